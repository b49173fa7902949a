// The renderers: Chrome trace JSON, SVG, ASCII grid. Built on hand-made timelines and on a simulated
// one so they do not depend on any generator.
#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "runtime/schedules/generators.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/timeline.h"

namespace pf::sched {
namespace {

Timeline sample_timeline() {
  // Two ranks of a 1F1B-like run with split backward, plus a zero-length SEND and a STEP.
  const CostModel c = CostModel::uniform(2, 1.0, 1.0, 1.0, 0.0);
  Schedule s;
  s.name = "sample";
  s.num_micro_batches = 2;
  s.placement = Placement::one_per_rank(2);
  using K = ActionKind;
  s.ranks = {{{K::kForward, 0, 0}, {K::kSendF, 0, 0}, {K::kForward, 0, 1}, {K::kSendF, 0, 1},
              {K::kRecvB, 0, 0}, {K::kBackwardInput, 0, 0}, {K::kRecvB, 0, 1},
              {K::kBackwardInput, 0, 1}, {K::kBackwardWeight, 0, 0}, {K::kBackwardWeight, 0, 1},
              {K::kStep, 0, -1}},
             {{K::kRecvF, 1, 0}, {K::kForward, 1, 0}, {K::kBackward, 1, 0}, {K::kSendB, 1, 0},
              {K::kRecvF, 1, 1}, {K::kForward, 1, 1}, {K::kBackward, 1, 1}, {K::kSendB, 1, 1},
              {K::kStep, 1, -1}}};
  return simulate(s, c).timeline;
}

// A minimal XML well-formedness check: balanced, properly nested tags, quoted attributes, escaped
// text. Returns "" when fine, else what is wrong. Counts elements by name into `counts` and the
// class attribute of <rect> elements into `rect_classes`.
std::string check_xml(const std::string& xml, std::map<std::string, int>* counts,
                      std::map<std::string, int>* rect_classes) {
  std::vector<std::string> stack;
  size_t i = 0;
  bool root_seen = false;
  while (i < xml.size()) {
    if (xml[i] != '<') {
      if (xml[i] == '&') {
        const size_t semi = xml.find(';', i);
        if (semi == std::string::npos || semi - i > 6) return "bare & at " + std::to_string(i);
      }
      if (stack.empty() && !std::isspace(static_cast<unsigned char>(xml[i])))
        return "text outside the root at " + std::to_string(i);
      ++i;
      continue;
    }
    if (xml.compare(i, 5, "<?xml") == 0) {
      const size_t end = xml.find("?>", i);
      if (end == std::string::npos) return "unterminated declaration";
      i = end + 2;
      continue;
    }
    const size_t end = xml.find('>', i);
    if (end == std::string::npos) return "unterminated tag at " + std::to_string(i);
    std::string tag = xml.substr(i + 1, end - i - 1);
    i = end + 1;
    if (!tag.empty() && tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name) return "mismatched </" + name + ">";
      stack.pop_back();
      continue;
    }
    const bool self_closing = !tag.empty() && tag.back() == '/';
    if (self_closing) tag.pop_back();
    size_t p = 0;
    while (p < tag.size() && !std::isspace(static_cast<unsigned char>(tag[p]))) ++p;
    const std::string name = tag.substr(0, p);
    if (name.empty()) return "empty tag name";
    if (stack.empty()) {
      if (root_seen) return "second root element";
      root_seen = true;
    }
    // Attributes: name="value" pairs.
    std::string cls;
    while (p < tag.size()) {
      while (p < tag.size() && std::isspace(static_cast<unsigned char>(tag[p]))) ++p;
      if (p >= tag.size()) break;
      const size_t eq = tag.find('=', p);
      if (eq == std::string::npos || eq + 1 >= tag.size() || tag[eq + 1] != '"')
        return "bad attribute in <" + name + ">";
      const std::string attr = tag.substr(p, eq - p);
      const size_t close = tag.find('"', eq + 2);
      if (close == std::string::npos) return "unterminated attribute in <" + name + ">";
      const std::string value = tag.substr(eq + 2, close - eq - 2);
      if (value.find('<') != std::string::npos) return "< in attribute";
      if (attr == "class") cls = value;
      p = close + 1;
    }
    ++(*counts)[name];
    if (name == "rect") ++(*rect_classes)[cls];
    if (!self_closing) stack.push_back(name);
  }
  if (!stack.empty()) return "unclosed <" + stack.back() + ">";
  if (!root_seen) return "no root element";
  return "";
}

TEST(Timeline, Basics) {
  const Timeline t = sample_timeline();
  EXPECT_EQ(t.num_ranks(), 2);
  EXPECT_EQ(t.num_actions(), 20u);
  EXPECT_DOUBLE_EQ(t.begin_time(), 0.0);
  EXPECT_GT(t.end_time(), 0.0);
  EXPECT_DOUBLE_EQ(Timeline{}.end_time(), 0.0);
}

TEST(ChromeTrace, ParsesWithOneTrackPerRankAndOneEventPerAction) {
  const Timeline t = sample_timeline();
  ChromeTraceOptions opt;
  opt.to_microseconds = 1000.0;
  const nlohmann::json j = nlohmann::json::parse(to_chrome_trace(t, opt));
  ASSERT_TRUE(j.contains("traceEvents"));
  std::map<int, std::string> thread_names;
  std::set<int> tids_with_events;
  size_t complete = 0;
  for (const auto& e : j["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "thread_name") thread_names[e["tid"].get<int>()] = e["args"]["name"];
    if (ph != "X") continue;
    ++complete;
    tids_with_events.insert(e["tid"].get<int>());
    EXPECT_TRUE(e.contains("cname"));
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    EXPECT_EQ(e["pid"].get<int>(), 0);
  }
  EXPECT_EQ(complete, t.num_actions());
  ASSERT_EQ(thread_names.size(), 2u);
  EXPECT_EQ(thread_names[0], "rank 0");
  EXPECT_EQ(thread_names[1], "rank 1");
  EXPECT_EQ(tids_with_events, (std::set<int>{0, 1}));
  // Names are the action texts, times scaled to microseconds.
  bool found = false;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X" && e["name"] == "1F0") {
      found = true;
      EXPECT_EQ(e["tid"].get<int>(), 1);
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1000.0);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 1000.0);
      EXPECT_EQ(e["cname"], kind_colour(ActionKind::kForward).cname);
      EXPECT_EQ(e["cat"], "F");
    }
  }
  EXPECT_TRUE(found);
}

TEST(ChromeTrace, EscapesProcessName) {
  ChromeTraceOptions opt;
  opt.process_name = "a \"quoted\"\\name\n";
  const nlohmann::json j = nlohmann::json::parse(to_chrome_trace(sample_timeline(), opt));
  EXPECT_EQ(j["traceEvents"][0]["args"]["name"], "a \"quoted\"\\name\n");
}

TEST(ChromeTrace, ColoursDifferPerComputeKind) {
  std::set<std::string> names;
  for (ActionKind k : {ActionKind::kForward, ActionKind::kBackwardInput,
                       ActionKind::kBackwardWeight, ActionKind::kBackward})
    names.insert(kind_colour(k).cname);
  EXPECT_EQ(names.size(), 4u);
}

TEST(Svg, WellFormedWithOneRectPerAction) {
  const Timeline t = sample_timeline();
  SvgOptions opt;
  opt.title = "sample <1F1B> & friends";
  const std::string svg = to_svg(t, opt);
  std::map<std::string, int> counts, rect_classes;
  EXPECT_EQ(check_xml(svg, &counts, &rect_classes), "");
  EXPECT_EQ(counts["svg"], 1);
  // RECVs are "action wait" (hatched); the hatch pattern has one rect of its own.
  EXPECT_EQ(rect_classes["action"] + rect_classes["action wait"], static_cast<int>(t.num_actions()));
  EXPECT_EQ(rect_classes["hatch"], 1);
  EXPECT_EQ(counts["rect"], rect_classes["action"] + rect_classes["action wait"] + rect_classes["legend"] + 1);
  EXPECT_GT(rect_classes["legend"], 0);
  EXPECT_NE(svg.find(">rank 0<"), std::string::npos);
  EXPECT_NE(svg.find(">rank 1<"), std::string::npos);
  EXPECT_NE(svg.find("&lt;1F1B&gt; &amp; friends"), std::string::npos);
}

// dualpipe-v's compound OVERLAP_F_B actions: one bar over each pair, and a legend entry for them.
TEST(Svg, OverlappedPairsGetOneBarEach) {
  const Schedule s = generate_schedule("dualpipe-v", {4, 8, 2});
  int pairs = 0;
  for (const auto& list : s.ranks)
    for (const Action& a : list) pairs += a.overlaps_next;
  ASSERT_GT(pairs, 0);
  const std::string svg = to_svg(simulate(s, CostModel::uniform(8)).timeline, SvgOptions());
  std::map<std::string, int> counts, rect_classes;
  EXPECT_EQ(check_xml(svg, &counts, &rect_classes), "");
  EXPECT_EQ(rect_classes["overlap"], pairs);
  EXPECT_NE(svg.find("OVERLAP_F_B"), std::string::npos);
  EXPECT_EQ(to_svg(simulate(generate_schedule("zb-v", {4, 8, 2}), CostModel::uniform(8)).timeline, SvgOptions())
                .find("class=\"overlap\""),
            std::string::npos);
}

TEST(Svg, EmptyTimelineIsStillValid) {
  std::map<std::string, int> counts, rect_classes;
  EXPECT_EQ(check_xml(to_svg(Timeline{}), &counts, &rect_classes), "");
  EXPECT_EQ(counts["rect"], rect_classes["hatch"]);  // only the hatch pattern's
}

TEST(AsciiGrid, OneRowPerRankOfTheGivenWidth) {
  const Timeline t = sample_timeline();
  const int width = 40;
  const std::string grid = to_ascii_grid(t, width);
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < grid.size()) {
    const size_t nl = grid.find('\n', start);
    lines.push_back(grid.substr(start, nl - start));
    start = nl + 1;
  }
  int rows = 0;
  for (const std::string& l : lines) {
    if (l.rfind("rank ", 0) != 0) continue;
    ++rows;
    const size_t bar = l.find('|');
    ASSERT_NE(bar, std::string::npos);
    const std::string cells = l.substr(bar + 1, l.size() - bar - 2);
    EXPECT_EQ(static_cast<int>(cells.size()), width) << l;
    for (char c : cells) EXPECT_NE(std::string("FBWXRSOLA.").find(c), std::string::npos) << l;
  }
  EXPECT_EQ(rows, 2);
  EXPECT_NE(grid.find("legend"), std::string::npos);
}

TEST(AsciiGrid, ShowsKindsAndIdle) {
  // Rank 0: F over [0,1), idle [1,2), W over [2,3); rank 1: fused backward over [1,3).
  Timeline t;
  t.ranks = {{{{ActionKind::kForward, 0, 0}, 0.0, 1.0}, {{ActionKind::kBackwardWeight, 0, 0}, 2.0, 3.0}},
             {{{ActionKind::kBackward, 1, 0}, 1.0, 3.0}}};
  const std::string grid = to_ascii_grid(t, 6);
  EXPECT_NE(grid.find("rank 0 |FF..WW|"), std::string::npos) << grid;
  EXPECT_NE(grid.find("rank 1 |..XXXX|"), std::string::npos) << grid;
}

// The <rect> elements of one class (an attribute list per element), in document order.
std::vector<std::map<std::string, std::string>> rects_of_class(const std::string& svg, const std::string& cls) {
  std::vector<std::map<std::string, std::string>> out;
  for (size_t i = svg.find("<rect "); i != std::string::npos; i = svg.find("<rect ", i + 1)) {
    const std::string tag = svg.substr(i, svg.find('>', i) - i);
    std::map<std::string, std::string> attrs;
    for (size_t q = tag.find("=\""); q != std::string::npos; q = tag.find("=\"", q + 2)) {
      size_t k = tag.rfind(' ', q);
      const size_t close = tag.find('"', q + 2);
      attrs[tag.substr(k + 1, q - k - 1)] = tag.substr(q + 2, close - q - 2);
    }
    if (attrs["class"] == cls) out.push_back(attrs);
  }
  return out;
}

// A measured-looking timeline: rank 0 holds stages 0 and 3 (V placement), waits in a RECV, offloads
// and reloads, and steps.
Timeline chunked_timeline() {
  using K = ActionKind;
  Timeline t;
  t.time_unit = "us";
  t.ranks = {{{{K::kForward, 0, 0}, 0, 10}, {{K::kSendF, 0, 0}, 10, 10.5}, {{K::kOffload, 0, 0}, 10.5, 11},
              {{K::kRecvF, 3, 0}, 11, 40}, {{K::kForward, 3, 0}, 40, 50}, {{K::kReload, 0, 0}, 50, 51},
              {{K::kBackward, 3, 0}, 51, 70}, {{K::kBackward, 0, 0}, 70, 90}, {{K::kStep, 0, -1}, 90, 90}},
             {{{K::kRecvF, 1, 0}, 0, 10}, {{K::kForward, 1, 0}, 10, 20}, {{K::kForward, 2, 0}, 20, 30},
              {{K::kBackward, 2, 0}, 30, 45}, {{K::kBackward, 1, 0}, 45, 60}, {{K::kStep, 1, -1}, 60, 60}}};
  return t;
}

TEST(Svg, ChunksWaitsCopiesAndStepsAreDrawnApart) {
  const std::string svg = to_svg(chunked_timeline(), SvgOptions{});
  std::map<std::string, int> counts, classes;
  ASSERT_EQ(check_xml(svg, &counts, &classes), "");
  // Chunks: rank 0's stage 3 (its chunk 1) is lighter than its stage 0, and boxes say stage:mb.
  auto fill_of = [&](const std::string& action) {  // the fill of the box whose tooltip starts so
    const size_t title = svg.find("<title>" + action + " [");
    const size_t fill = svg.rfind("fill=\"", title);
    return svg.substr(fill + 6, svg.find('"', fill + 6) - fill - 6);
  };
  EXPECT_EQ(fill_of("0F0"), kind_colour(ActionKind::kForward).rgb);
  EXPECT_NE(fill_of("3F0"), kind_colour(ActionKind::kForward).rgb);
  EXPECT_EQ(fill_of("1F0"), kind_colour(ActionKind::kForward).rgb);  // rank 1's chunk 0
  EXPECT_EQ(fill_of("2F0"), fill_of("3F0"));                         // both ranks' chunk 1
  EXPECT_NE(svg.find(">3:0<"), std::string::npos) << "stage:micro-batch labels when ranks hold chunks";
  EXPECT_NE(svg.find("chunk 1"), std::string::npos);
  const auto actions = rects_of_class(svg, "action");
  // RECV waiting is hatched and thin, never a full-height box.
  const auto waits = rects_of_class(svg, "action wait");
  ASSERT_EQ(waits.size(), 2u);
  for (const auto& w : waits) {
    EXPECT_EQ(w.at("fill"), "url(#wait)");
    EXPECT_LT(std::stod(w.at("height")), 26.0 * 0.3);
  }
  // Copies sit on a lane of their own, below the compute row of their rank.
  EXPECT_NE(svg.find(">copies<"), std::string::npos);
  double forward_y = -1, offload_y = -1, step_w = 0;
  for (const auto& a : actions) {
    if (a.at("fill") == kind_colour(ActionKind::kOffload).rgb) offload_y = std::stod(a.at("y"));
    if (a.at("fill") == kind_colour(ActionKind::kForward).rgb && forward_y < 0) forward_y = std::stod(a.at("y"));
    if (a.at("fill") == kind_colour(ActionKind::kStep).rgb) step_w = std::stod(a.at("width"));
  }
  EXPECT_GT(offload_y, forward_y + 20.0);
  EXPECT_GE(step_w, 3.0);  // a zero-length STEP stays visible
  EXPECT_NE(std::string(kind_colour(ActionKind::kSendF).rgb), kind_colour(ActionKind::kRecvF).rgb);
}

TEST(Svg, LegendEntriesDoNotOverlapAndTheWidthIsTheCallers) {
  for (double width : {400.0, 800.0, 1600.0}) {
    SvgOptions o;
    o.width = width;
    o.title = "zb-v: p=2, m=1, measured";
    const std::string svg = to_svg(chunked_timeline(), o);
    EXPECT_NE(svg.find("width=\"" + std::to_string(static_cast<int>(width)) + "\""), std::string::npos);
    // Each legend entry: its swatch x and text; rows wrap before the drawing's right edge.
    std::vector<std::pair<double, double>> swatches;
    for (const auto& l : rects_of_class(svg, "legend")) swatches.push_back({std::stod(l.at("x")), std::stod(l.at("y"))});
    std::vector<std::string> texts;
    for (size_t i = svg.find("<rect class=\"legend\""); i != std::string::npos;
         i = svg.find("<rect class=\"legend\"", i + 1)) {
      const size_t open = svg.find("<text", i), start = svg.find('>', open) + 1;
      texts.push_back(svg.substr(start, svg.find("</text>", start) - start));
    }
    ASSERT_EQ(swatches.size(), texts.size());
    ASSERT_GE(swatches.size(), 6u);
    for (size_t i = 0; i + 1 < swatches.size(); ++i) {
      if (swatches[i + 1].second != swatches[i].second) continue;  // a new row
      const double text_end = swatches[i].first + 16.0 + 7.0 * static_cast<double>(texts[i].size());
      EXPECT_LT(text_end, swatches[i + 1].first) << texts[i] << " runs into " << texts[i + 1] << " at width " << width;
    }
    for (size_t i = 0; i < swatches.size(); ++i)
      EXPECT_LE(swatches[i].first + 16.0 + 7.0 * static_cast<double>(texts[i].size()), width) << texts[i];
  }
}

}  // namespace
}  // namespace pf::sched

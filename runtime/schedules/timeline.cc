#include "runtime/schedules/timeline.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>

#include "runtime/core/error.h"

namespace pf::sched {

size_t Timeline::num_actions() const {
  size_t n = 0;
  for (const auto& rank : ranks) n += rank.size();
  return n;
}

double Timeline::begin_time() const {
  double t = std::numeric_limits<double>::infinity();
  for (const auto& rank : ranks)
    for (const auto& a : rank) t = std::min(t, a.start);
  return std::isfinite(t) ? t : 0.0;
}

double Timeline::end_time() const {
  double t = -std::numeric_limits<double>::infinity();
  for (const auto& rank : ranks)
    for (const auto& a : rank) t = std::max({t, a.end, a.has_tensor_parallel() ? a.tp.end : a.end});
  return std::isfinite(t) ? t : 0.0;
}

const char* tensor_parallel_label(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
    case ActionKind::kRecompute: return "TP_F";
    case ActionKind::kBackwardInput:
    case ActionKind::kBackward: return "TP_B";
    default: return "";
  }
}

KindColour tensor_parallel_colour() { return {"generic_work", "#7d7d7d"}; }

KindColour kind_colour(ActionKind kind) {
  // Names from catapult's trace-viewer colour scheme (tracing/base/color_scheme.js), with the RGB
  // that scheme gives them, so the SVG and the trace agree.
  switch (kind) {
    case ActionKind::kForward: return {"rail_response", "#4387fd"};         // blue
    case ActionKind::kBackwardInput: return {"rail_load", "#0da861"};       // green
    case ActionKind::kBackwardWeight: return {"good", "#007d00"};           // dark green
    case ActionKind::kBackward: return {"rail_idle", "#ee8e00"};            // orange
    case ActionKind::kSendF:
    case ActionKind::kSendB: return {"black", "#333333"};                   // dark grey
    case ActionKind::kRecvF:
    case ActionKind::kRecvB: return {"grey", "#c0c0c0"};                    // light grey (waiting)
    case ActionKind::kOffload: return {"background_memory_dump", "#00b4b4"};  // teal
    case ActionKind::kReload: return {"detailed_memory_dump", "#b400b4"};   // purple
    case ActionKind::kRecompute: return {"rail_animation", "#f44a3f"};      // red
    case ActionKind::kStep: return {"startup", "#e6e600"};                  // yellow
    case ActionKind::kAllReduce: return {"heap_dump_child_node_arrow", "#cc6600"};  // brown
    case ActionKind::kHold: return {"light_memory_dump", "#0000b4"};         // dark blue
    case ActionKind::kReturn: return {"vsync_highlight_color", "#0000ff"};   // blue
    case ActionKind::kUpdate: return {"startup", "#e6e600"};                 // yellow, like STEP
    case ActionKind::kHead: return {"thread_state_uninterruptible", "#b67d8f"};  // mauve
  }
  return {"generic_work", "#7d7d7d"};
}

char ascii_grid_char(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward: return 'F';
    case ActionKind::kBackwardInput: return 'B';
    case ActionKind::kBackwardWeight: return 'W';
    case ActionKind::kBackward: return 'X';
    case ActionKind::kRecompute: return 'R';
    case ActionKind::kOffload: return 'O';
    case ActionKind::kReload: return 'L';
    case ActionKind::kStep: return 'S';
    case ActionKind::kAllReduce: return 'A';
    case ActionKind::kHold: return 'H';
    case ActionKind::kReturn: return 'T';
    case ActionKind::kUpdate: return 'U';
    case ActionKind::kHead: return 'h';
    default: return '\0';
  }
}

namespace {

// Shortest round-trippable-enough decimal form, never in exponent notation for ordinary times.
std::string num(double v) {
  if (!std::isfinite(v)) v = 0.0;
  if (v == 0.0) return "0";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6f", v);
  std::string s(buf);
  // Trim trailing zeros and a trailing point.
  if (s.find('.') != std::string::npos) {
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

std::string json_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}


// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `target` ticks over `span`.
double nice_step(double span, int target) {
  if (span <= 0.0 || target <= 0) return 1.0;
  const double raw = span / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  double nice = 10.0;
  if (f <= 1.0) nice = 1.0;
  else if (f <= 2.0) nice = 2.0;
  else if (f <= 5.0) nice = 5.0;
  return nice * mag;
}

// The bar drawn over the two halves of an OVERLAP_F_B compound action.
constexpr const char* kOverlapBar = "#222222";

// Kinds in legend order, each listed once.
constexpr std::array<ActionKind, 15> kLegendKinds = {
    ActionKind::kForward,   ActionKind::kHead,          ActionKind::kBackwardInput,
    ActionKind::kBackwardWeight,
    ActionKind::kBackward,  ActionKind::kRecompute,     ActionKind::kOffload,
    ActionKind::kReload,    ActionKind::kHold,          ActionKind::kReturn,
    ActionKind::kStep,      ActionKind::kUpdate,        ActionKind::kAllReduce,
    ActionKind::kSendF,     ActionKind::kRecvF};
static_assert(kLegendKinds.size() == 15, "every kind but SEND_B and RECV_B (they share SEND's and RECV's entries)");

const char* legend_text(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward: return "F forward";
    case ActionKind::kBackwardInput: return "B input grad";
    case ActionKind::kBackwardWeight: return "W weight grad";
    case ActionKind::kBackward: return "BW fused backward";
    case ActionKind::kRecompute: return "RECOMPUTE";
    case ActionKind::kOffload: return "OFFLOAD";
    case ActionKind::kReload: return "RELOAD";
    case ActionKind::kStep: return "STEP";
    case ActionKind::kAllReduce: return "ALLREDUCE";
    case ActionKind::kHold: return "HOLD (partner keeps)";
    case ActionKind::kReturn: return "RETURN (to owner)";
    case ActionKind::kUpdate: return "UPDATE (a stage's own)";
    case ActionKind::kHead: return "HEAD local loss";
    case ActionKind::kSendF: case ActionKind::kSendB: return "SEND";
    case ActionKind::kRecvF: case ActionKind::kRecvB: return "RECV (waiting)";
  }
  return "";
}

bool same_legend_entry(ActionKind a, ActionKind b) {
  auto norm = [](ActionKind k) {
    if (k == ActionKind::kSendB) return ActionKind::kSendF;
    if (k == ActionKind::kRecvB) return ActionKind::kRecvF;
    return k;
  };
  return norm(a) == norm(b);
}

}  // namespace

std::string xml_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string to_chrome_trace(const Timeline& timeline, const ChromeTraceOptions& options) {
  PF_CHECK_ARG(options.to_microseconds > 0.0, "to_chrome_trace: to_microseconds must be > 0, got ",
               options.to_microseconds);
  const double k = options.to_microseconds;
  std::ostringstream out;
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  out << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << options.pid
      << ",\"tid\":0,\"args\":{\"name\":\"" << json_escape(options.process_name) << "\"}}";
  // Background TP collectives go on a track of their own per rank, "rank N TP" (tid ranks + N):
  // they overlap the rank's next actions, and a track's events must nest.
  const int n = timeline.num_ranks();
  auto track = [&](int tid, const std::string& name, int sort_index) {
    out << ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << options.pid << ",\"tid\":" << tid
        << ",\"args\":{\"name\":\"" << name << "\"}}";
    out << ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":" << options.pid
        << ",\"tid\":" << tid << ",\"args\":{\"sort_index\":" << sort_index << "}}";
  };
  for (int r = 0; r < n; ++r) {
    track(r, "rank " + std::to_string(r), r);
    const auto& actions = timeline.ranks[static_cast<size_t>(r)];
    if (std::any_of(actions.begin(), actions.end(), [](const TimedAction& a) { return a.has_tensor_parallel() && a.tp.background; }))
      track(n + r, "rank " + std::to_string(r) + " TP", r);
  }
  auto event = [&](const std::string& name, const char* category, const char* cname, double start, double end, int tid,
                   const Action& a) {
    out << ",\n{\"name\":\"" << json_escape(name) << "\",\"cat\":\"" << category << "\",\"ph\":\"X\",\"ts\":"
        << num(start * k) << ",\"dur\":" << num(std::max(0.0, end - start) * k) << ",\"pid\":" << options.pid
        << ",\"tid\":" << tid << ",\"cname\":\"" << cname << "\",\"args\":{\"stage\":" << a.stage
        << ",\"micro_batch\":" << a.micro_batch << "}}";
  };
  for (int r = 0; r < n; ++r) {
    for (const TimedAction& a : timeline.ranks[static_cast<size_t>(r)]) {
      event(action_to_string(a.action), action_kind_name(a.action.kind), kind_colour(a.action.kind).cname, a.start,
            a.end, r, a.action);
      if (a.has_tensor_parallel())
        event(std::string(tensor_parallel_label(a.action.kind)) + " " + action_to_string(a.action), "TP",
              tensor_parallel_colour().cname, a.tp.start, a.tp.end, a.tp.background ? n + r : r, a.action);
    }
  }
  out << "\n]}\n";
  return out.str();
}

namespace {

// A chunk's fill: chunk 0 the kind's colour, later chunks mixed with white (35% per chunk, up to
// 70%), so the chunks of one rank read apart and the kind stays recognisable.
std::string chunk_fill(const char* rgb, int chunk) {
  if (chunk <= 0) return rgb;
  unsigned r = 0, g = 0, b = 0;
  std::sscanf(rgb + 1, "%2x%2x%2x", &r, &g, &b);
  const double mix = std::min(0.7, 0.35 * chunk);
  auto lighten = [&](unsigned c) { return static_cast<unsigned>(std::lround(c + (255.0 - c) * mix)); };
  char out[8];
  std::snprintf(out, sizeof(out), "#%02x%02x%02x", lighten(r), lighten(g), lighten(b));
  return out;
}

// Per rank: stage -> the chunk it is on that rank (0 for the rank's lowest stage, 1 for the next).
std::vector<std::map<int, int>> chunks_of(const Timeline& timeline, int* max_chunks) {
  std::vector<std::map<int, int>> chunks(timeline.ranks.size());
  *max_chunks = 1;
  for (size_t r = 0; r < timeline.ranks.size(); ++r) {
    for (const TimedAction& a : timeline.ranks[r])
      if (is_compute(a.action.kind)) chunks[r][a.action.stage] = 0;
    int i = 0;
    for (auto& entry : chunks[r]) entry.second = i++;
    *max_chunks = std::max(*max_chunks, i);
  }
  return chunks;
}

bool has_kind(const Timeline& timeline, bool (*pred)(ActionKind)) {
  for (const auto& rank : timeline.ranks)
    for (const auto& a : rank)
      if (pred(a.action.kind)) return true;
  return false;
}

bool is_marker(ActionKind kind) {
  return kind == ActionKind::kStep || kind == ActionKind::kUpdate || kind == ActionKind::kAllReduce;
}
bool is_recv(ActionKind kind) { return kind == ActionKind::kRecvF || kind == ActionKind::kRecvB; }

// Whether any action has a TP collective; `background`: one that runs in the background.
bool has_tensor_parallel(const Timeline& timeline, bool background) {
  for (const auto& rank : timeline.ranks)
    for (const auto& a : rank)
      if (a.has_tensor_parallel() && (!background || a.tp.background)) return true;
  return false;
}

}  // namespace

std::string to_svg(const Timeline& timeline, const SvgOptions& options) {
  PF_CHECK_ARG(options.width >= 200.0, "to_svg: width must be >= 200 pixels, got ", options.width);
  PF_CHECK_ARG(options.row_height >= 8.0, "to_svg: row_height must be >= 8 pixels, got ",
               options.row_height);
  PF_CHECK_ARG(options.time_end >= 0.0, "to_svg: time_end must be >= 0, got ", options.time_end);
  const double t0 = options.time_end > 0.0 ? std::min(0.0, timeline.begin_time()) : timeline.begin_time();
  const double t1 = std::max(timeline.end_time(), options.time_end);
  const double span = t1 > t0 ? t1 - t0 : 1.0;
  const double label_w = 70.0, right_pad = 20.0;
  const double top = options.title.empty() ? 10.0 : 34.0;
  const double row_h = options.row_height;
  // Copies (OFFLOAD, RELOAD) get a lane of their own under each rank's compute row.
  const bool copy_lanes = has_kind(timeline, is_background_copy);
  const double copy_h = copy_lanes ? std::max(8.0, row_h * 0.55) : 0.0;
  // Background TP collectives get a lane of their own too, under the copies'.
  const bool tp_lanes = has_tensor_parallel(timeline, true);
  const double tp_h = tp_lanes ? std::max(8.0, row_h * 0.55) : 0.0;
  const double rank_h = row_h + copy_h + tp_h;
  const double plot_w = options.width - label_w - right_pad;
  const double scale = plot_w / span;
  const int n = timeline.num_ranks();
  const double axis_y = top + n * rank_h + 4.0;
  int max_chunks = 1;
  const std::vector<std::map<int, int>> chunks = chunks_of(timeline, &max_chunks);

  // Legend: the kinds that occur, in a fixed order; then the chunk shades when ranks hold several.
  struct Entry {
    std::string text;
    std::string fill;
    bool hatched;
  };
  std::vector<Entry> legend;
  if (options.legend) {
    for (ActionKind k : kLegendKinds) {
      bool present = false;
      for (const auto& rank : timeline.ranks)
        for (const auto& a : rank)
          if (same_legend_entry(a.action.kind, k)) present = true;
      if (present) legend.push_back({legend_text(k), kind_colour(k).rgb, is_recv(k)});
    }
    if (has_tensor_parallel(timeline, false))
      legend.push_back({tp_lanes ? "TP collective (TP lane: background)" : "TP collective (TP_F, TP_B)",
                        tensor_parallel_colour().rgb, false});
    for (int c = 0; max_chunks > 1 && c < max_chunks; ++c)
      legend.push_back({"chunk " + std::to_string(c) + (c == 0 ? " (label stage:micro-batch)" : ""),
                        chunk_fill(kind_colour(ActionKind::kForward).rgb, c), false});
    bool overlaps = false;
    for (const auto& rank : timeline.ranks)
      for (const auto& a : rank) overlaps = overlaps || a.action.overlaps_next;
    if (overlaps) legend.push_back({"bar: one OVERLAP_F_B action (F + backward)", kOverlapBar, false});
  }
  // Each entry as wide as its text (at most 7 px per character at font size 11), wrapped to rows.
  const double legend_y = axis_y + 40.0;
  std::vector<std::pair<double, double>> legend_at;  // (x, y) of each entry's swatch
  {
    double x = label_w, y = legend_y;
    for (const Entry& e : legend) {
      const double w = 16.0 + 7.0 * static_cast<double>(e.text.size()) + 18.0;
      if (x > label_w && x + w > options.width) {
        x = label_w;
        y += 20.0;
      }
      legend_at.emplace_back(x, y);
      x += w;
    }
  }
  const double height = (legend_at.empty() ? legend_y - 20.0 : legend_at.back().second) + 20.0 + 8.0;

  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(options.width)
      << "\" height=\"" << num(height) << "\" viewBox=\"0 0 " << num(options.width) << " "
      << num(height) << "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"11\">\n";
  out << "<style>.action{stroke:#222;stroke-width:0.5}.wait{stroke:#777;stroke-width:0.5}"
         ".lbl{fill:#fff;text-anchor:middle;dominant-baseline:central;pointer-events:none}"
         ".lbl.light{fill:#111}.rank{text-anchor:end;dominant-baseline:central}"
         ".lane{text-anchor:end;dominant-baseline:central;fill:#666;font-size:9px}.tick{text-anchor:middle}"
         ".tp{stroke:#222;stroke-width:0.5}</style>\n";
  // RECV: waiting for a peer, drawn hatched and thin, not as work.
  const std::string wait_id = options.id_prefix + "wait";
  out << "<defs><pattern id=\"" << wait_id << "\" width=\"4\" height=\"4\" patternUnits=\"userSpaceOnUse\" "
         "patternTransform=\"rotate(45)\"><rect class=\"hatch\" width=\"4\" height=\"4\" fill=\"#f4f4f4\"/>"
         "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"4\" stroke=\"#9a9a9a\" stroke-width=\"1.5\"/></pattern></defs>\n";
  if (!options.title.empty())
    out << "<text x=\"" << num(label_w) << "\" y=\"20\" font-size=\"14\">"
        << xml_escape(options.title) << "</text>\n";

  for (int r = 0; r < n; ++r) {
    const double y = top + r * rank_h;
    out << "<text class=\"rank\" x=\"" << num(label_w - 8.0) << "\" y=\"" << num(y + row_h / 2)
        << "\">rank " << r << "</text>\n";
    if (copy_lanes)
      out << "<text class=\"lane\" x=\"" << num(label_w - 8.0) << "\" y=\"" << num(y + row_h + copy_h / 2)
          << "\">copies</text>\n";
    if (tp_lanes)
      out << "<text class=\"lane\" x=\"" << num(label_w - 8.0) << "\" y=\"" << num(y + row_h + copy_h + tp_h / 2)
          << "\">TP</text>\n";
    out << "<line x1=\"" << num(label_w) << "\" y1=\"" << num(y + rank_h) << "\" x2=\""
        << num(label_w + plot_w) << "\" y2=\"" << num(y + rank_h)
        << "\" stroke=\"#ddd\" stroke-width=\"0.5\"/>\n";
    const auto& stage_chunk = chunks[static_cast<size_t>(r)];
    // OVERLAP_F_B: a bar over the F and its backward (the rank's next compute action).
    const auto& actions = timeline.ranks[static_cast<size_t>(r)];
    for (size_t i = 0; i < actions.size(); ++i) {
      if (!actions[i].action.overlaps_next) continue;
      size_t j = i + 1;
      while (j < actions.size() && !is_pass(actions[j].action.kind)) ++j;
      if (j == actions.size()) continue;
      // Inset by 2 px at each end, so that back-to-back pairs show as separate bars.
      const double w = std::max(0.0, (actions[j].end - actions[i].start) * scale - 4.0);
      out << "<rect class=\"overlap\" x=\"" << num(label_w + (actions[i].start - t0) * scale + 2.0) << "\" y=\""
          << num(y) << "\" width=\"" << num(w) << "\" height=\"2\" fill=\"" << kOverlapBar << "\"/>\n";
    }
    for (const TimedAction& a : timeline.ranks[static_cast<size_t>(r)]) {
      const ActionKind kind = a.action.kind;
      const double dur = std::max(0.0, a.end - a.start);
      const bool comm = is_communication(kind);
      const bool copy = is_background_copy(kind);
      const double lane_y = copy ? y + row_h : y;
      const double lane_h = copy ? copy_h : row_h;
      const double min_w = is_marker(kind) ? 3.0 : 0.75;  // STEP and UPDATE stay visible
      const bool instant = dur * scale < min_w;
      const double x = label_w + (a.start - t0) * scale;
      const double w = instant ? min_w : dur * scale;
      double h = lane_h - 4.0, yy = lane_y + 2.0;
      if (comm) {  // SEND/RECV: a thin strip at the bottom of the row
        h = std::max(3.0, lane_h * 0.22);
        yy = lane_y + lane_h - 2.0 - h;
      } else if (instant && !is_marker(kind)) {
        h = lane_h * 0.5;
        yy = lane_y + lane_h * 0.25;
      }
      const auto it = stage_chunk.find(a.action.stage);
      const int chunk = it == stage_chunk.end() ? 0 : it->second;
      const std::string fill = is_recv(kind) ? "url(#" + wait_id + ")" : chunk_fill(kind_colour(kind).rgb, chunk);
      out << "<rect class=\"" << (is_recv(kind) ? "action wait" : "action") << "\" x=\"" << num(x) << "\" y=\""
          << num(yy) << "\" width=\"" << num(w) << "\" height=\"" << num(h) << "\" fill=\"" << fill
          << "\"><title>" << xml_escape(action_to_string(a.action)) << " [" << num(a.start) << ", "
          << num(a.end) << "] " << xml_escape(timeline.time_unit) << (is_recv(kind) ? " (waiting)" : "")
          << "</title></rect>\n";
      // Its TP collective: over the action where the rank waits in it, else on the TP lane.
      double label_x = x, label_w_px = w;  // where the label goes: the action, or its longest compute part
      if (a.has_tensor_parallel()) {
        const TimedCollective& c = a.tp;
        const double cx = label_w + (c.start - t0) * scale;
        const double cw = std::max(0.75, (c.end - c.start) * scale);
        const double cy = c.background ? y + row_h + copy_h + 2.0 : lane_y + 2.0;
        const double ch = c.background ? tp_h - 4.0 : lane_h - 4.0;
        out << "<rect class=\"tp\" x=\"" << num(cx) << "\" y=\"" << num(cy) << "\" width=\"" << num(cw)
            << "\" height=\"" << num(ch) << "\" fill=\"" << chunk_fill(tensor_parallel_colour().rgb, chunk)
            << "\"><title>" << tensor_parallel_label(kind) << " " << xml_escape(action_to_string(a.action)) << " ["
            << num(c.start) << ", " << num(c.end) << "] " << xml_escape(timeline.time_unit)
            << (c.background ? " (in the background)" : "") << "</title></rect>\n";
        if (!c.background) {
          const double before = (c.start - a.start) * scale, after = (a.end - c.end) * scale;
          label_x = before >= after ? x : cx + cw;
          label_w_px = std::max(before, after);
        }
      }
      if (!instant && !comm && a.action.micro_batch >= 0) {
        const std::string label = max_chunks > 1 ? std::to_string(a.action.stage) + ":" +
                                                       std::to_string(a.action.micro_batch)
                                                 : std::to_string(a.action.micro_batch);
        const double need = 6.5 * static_cast<double>(label.size()) + 2.0;
        if (label_w_px < need) {  // too narrow: over the whole action
          label_x = x;
          label_w_px = w;
        }
        if (label_w_px >= need)
          out << "<text class=\"lbl" << (chunk > 0 ? " light" : "") << "\" x=\"" << num(label_x + label_w_px / 2)
              << "\" y=\"" << num(lane_y + lane_h / 2) << "\">" << label << "</text>\n";
      }
    }
  }

  // Time axis.
  out << "<line x1=\"" << num(label_w) << "\" y1=\"" << num(axis_y) << "\" x2=\""
      << num(label_w + plot_w) << "\" y2=\"" << num(axis_y) << "\" stroke=\"#000\"/>\n";
  const double step = nice_step(span, 10);
  const double first_tick = std::ceil(t0 / step) * step;
  for (int i = 0;; ++i) {
    const double t = first_tick + i * step;
    if (t > t1 + step * 1e-9 || i > 1000) break;
    const double x = label_w + (t - t0) * scale;
    out << "<line x1=\"" << num(x) << "\" y1=\"" << num(axis_y) << "\" x2=\"" << num(x)
        << "\" y2=\"" << num(axis_y + 5.0) << "\" stroke=\"#000\"/>\n";
    out << "<text class=\"tick\" x=\"" << num(x) << "\" y=\"" << num(axis_y + 17.0) << "\">"
        << num(t) << "</text>\n";
  }
  out << "<text x=\"" << num(label_w + plot_w) << "\" y=\"" << num(axis_y + 30.0)
      << "\" text-anchor=\"end\">time (" << xml_escape(timeline.time_unit) << ")</text>\n";

  // Legend (swatches are <rect class="legend">, not actions).
  for (size_t i = 0; i < legend.size(); ++i) {
    const double lx = legend_at[i].first, ly = legend_at[i].second;
    out << "<rect class=\"legend\" x=\"" << num(lx) << "\" y=\"" << num(ly)
        << "\" width=\"12\" height=\"12\" stroke=\"#222\" stroke-width=\"0.5\" fill=\""
        << (legend[i].hatched ? "url(#" + wait_id + ")" : legend[i].fill) << "\"/>\n";
    out << "<text x=\"" << num(lx + 16.0) << "\" y=\"" << num(ly + 10.0) << "\">" << xml_escape(legend[i].text)
        << "</text>\n";
  }
  out << "</svg>\n";
  return out.str();
}

std::string to_ascii_grid(const Timeline& timeline, int width) {
  PF_CHECK_ARG(width >= 1, "to_ascii_grid: width must be >= 1, got ", width);
  const double t0 = timeline.begin_time();
  const double t1 = timeline.end_time();
  const double span = t1 > t0 ? t1 - t0 : 1.0;
  const double slot = span / width;
  const int n = timeline.num_ranks();
  const std::string prefix_fmt = "rank " + std::to_string(std::max(0, n - 1));
  const size_t label_w = prefix_fmt.size();

  std::ostringstream out;
  out << "time " << num(t0) << " .. " << num(t1) << " " << timeline.time_unit << ", "
      << num(slot) << " per character\n";
  const bool copy_lanes = has_kind(timeline, is_background_copy);
  // One row of the lane: the rank's compute (copies = false) or its copies.
  auto lane = [&](int r, bool copies) {
    std::string row(static_cast<size_t>(width), '.');
    std::vector<double> best(static_cast<size_t>(width), 0.0);
    std::vector<double> busy(static_cast<size_t>(width), 0.0);
    for (const TimedAction& a : timeline.ranks[static_cast<size_t>(r)]) {
      const char c = ascii_grid_char(a.action.kind);
      if (c == '\0' || a.end <= a.start) continue;
      if (copy_lanes && is_background_copy(a.action.kind) != copies) continue;
      int s0 = static_cast<int>(std::floor((a.start - t0) / slot));
      int s1 = static_cast<int>(std::ceil((a.end - t0) / slot));
      s0 = std::clamp(s0, 0, width - 1);
      s1 = std::clamp(s1, s0 + 1, width);
      for (int s = s0; s < s1; ++s) {
        const double lo = t0 + s * slot, hi = lo + slot;
        const double overlap = std::min(hi, a.end) - std::max(lo, a.start);
        if (overlap <= 0.0) continue;
        busy[static_cast<size_t>(s)] += overlap;
        if (overlap > best[static_cast<size_t>(s)]) {
          best[static_cast<size_t>(s)] = overlap;
          row[static_cast<size_t>(s)] = c;
        }
      }
    }
    // Idle for most of the slot: show '.'.
    for (int s = 0; s < width; ++s)
      if (busy[static_cast<size_t>(s)] < 0.5 * slot * (1.0 - 1e-9)) row[static_cast<size_t>(s)] = '.';
    return row;
  };
  for (int r = 0; r < n; ++r) {
    std::string label = "rank " + std::to_string(r);
    label.resize(label_w, ' ');
    out << label << " |" << lane(r, false) << "|\n";
    if (copy_lanes) {
      out << std::string(label_w > 4 ? label_w - 4 : 0, ' ') << "copy |" << lane(r, true) << "|\n";
    }
  }
  out << "legend: F forward, B backward (input), W backward (weight), X fused backward (BW), "
         "R recompute, O offload, L reload, H hold, T return, S step, U update, A all-reduce, h local head, "
         ". idle\n";
  return out.str();
}

}  // namespace pf::sched

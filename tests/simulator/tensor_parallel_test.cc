// Tensor-parallel collectives in the simulator (CostModel::t_tp_f, t_tp_b): their cost on hand-timed
// schedules, B's all-reduce in the background (SimulationOptions::overlap_tensor_parallel_backward),
// equality with the costs folded into t_f and t_b on the generators' schedules, and the collectives
// in the timeline and its renderers.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/schedules/activation_policy.h"
#include "runtime/schedules/bubbles.h"
#include "runtime/schedules/generators.h"
#include "runtime/schedules/lowering.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/timeline.h"
#include "runtime/schedules/validator.h"

namespace pf::sched {
namespace {

using K = ActionKind;

Schedule make(int ranks, int mbs, std::vector<std::vector<Action>> lists) {
  Schedule s;
  s.name = "hand";
  s.num_micro_batches = mbs;
  s.placement = Placement::one_per_rank(ranks);
  s.ranks = std::move(lists);
  return s;
}

// Two stages, one micro-batch, split backward: F0 F1 B1 W1 B0 W0 along the critical path.
Schedule two_stages() {
  return make(2, 1, {{{K::kForward, 0, 0}, {K::kBackwardInput, 0, 0}, {K::kBackwardWeight, 0, 0}},
                     {{K::kForward, 1, 0}, {K::kBackwardInput, 1, 0}, {K::kBackwardWeight, 1, 0}}});
}

// t_f 1, t_b 2, t_w 0.5, t_comm 0.25 (every time a binary fraction: the sums below are exact).
CostModel two_stage_costs() {
  CostModel c = CostModel::uniform(2, 1.0, 2.0, 0.5, 0.25);
  c.t_tp_f = {0.5, 0.25};
  c.t_tp_b = {0.75, 0.5};
  return c;
}

SimulationOptions overlapped() {
  SimulationOptions o;
  o.overlap_tensor_parallel_backward = true;
  return o;
}

TEST(TensorParallelCosts, CheckedAndEmptyMeansZero) {
  CostModel c = CostModel::uniform(2);
  EXPECT_EQ(c.tp_f(1), 0.0);
  EXPECT_EQ(c.tp_b(0), 0.0);
  c.t_tp_f = {0.5, 0.25};
  EXPECT_EQ(c.tp_f(1), 0.25);
  EXPECT_NO_THROW(c.check(2));
  c.t_tp_b = {1.0};
  EXPECT_THROW(c.check(2), Error);
  c.t_tp_b = {1.0, -1.0};
  EXPECT_THROW(c.check(2), Error);
}

// (a) Every collective is on the critical path: the makespan grows by their sum, 2, from 7 to 9.
TEST(TensorParallelCosts, HandTimedTwoStagesPayEveryCollective) {
  CostModel plain = two_stage_costs();
  plain.t_tp_f.clear();
  plain.t_tp_b.clear();
  EXPECT_EQ(simulate(two_stages(), plain).makespan, 7.0);

  const SimulationResult r = simulate(two_stages(), two_stage_costs());
  const auto& r0 = r.timeline.ranks[0];
  const auto& r1 = r.timeline.ranks[1];
  // rank 0 F [0, 1.5] (TP_F [1, 1.5]); rank 1 F [1.75, 3] (TP_F [2.75, 3]), B [3, 5.5] (TP_B
  // [5, 5.5]), W [5.5, 6]; rank 0 B [5.75, 8.5] (TP_B [7.75, 8.5]), W [8.5, 9].
  EXPECT_EQ(r0[0].end, 1.5);
  EXPECT_EQ(r0[0].tp.start, 1.0);
  EXPECT_EQ(r0[0].tp.end, 1.5);
  EXPECT_EQ(r1[0].start, 1.75);  // F's output (after its collective) + t_comm
  EXPECT_EQ(r1[0].end, 3.0);
  EXPECT_EQ(r1[1].tp.start, 5.0);
  EXPECT_EQ(r1[1].end, 5.5);
  EXPECT_EQ(r1[2].start, 5.5);  // W after B's collective: the rank waited in it
  EXPECT_EQ(r0[1].start, 5.75);
  EXPECT_EQ(r0[1].tp.start, 7.75);
  EXPECT_EQ(r0[1].end, 8.5);
  EXPECT_EQ(r.makespan, 9.0);
  EXPECT_EQ(r.makespan - 7.0, 0.5 + 0.25 + 0.75 + 0.5);
  for (const auto& rank : r.timeline.ranks)
    for (const TimedAction& a : rank) {
      EXPECT_EQ(a.has_tensor_parallel(), a.action.kind != K::kBackwardWeight) << action_to_string(a.action);
      EXPECT_FALSE(a.tp.background);
    }
  // The rank waits in them: busy time and ideal work; the accounting shows them apart.
  EXPECT_EQ(r.busy[0], 1.5 + 2.75 + 0.5);
  EXPECT_EQ(r.busy[1], 1.25 + 2.5 + 0.5);
  EXPECT_EQ(r.tensor_parallel[0], 1.25);
  EXPECT_EQ(r.tensor_parallel[1], 0.75);
  EXPECT_EQ(r.tensor_parallel_blocking, r.tensor_parallel);
  EXPECT_EQ(r.ideal, 4.75);
}

// A fused BW runs its collective between its B and W parts and costs t_b + t_tp_b + t_w; a
// RECOMPUTE runs the forward collectives again.
TEST(TensorParallelCosts, FusedBackwardAndRecompute) {
  const Schedule s = make(1, 1, {{{K::kForward, 0, 0}, {K::kRecompute, 0, 0}, {K::kBackward, 0, 0}}});
  CostModel c = CostModel::uniform(1, 1.0, 2.0, 0.5);
  c.t_tp_f = {0.25};
  c.t_tp_b = {0.75};
  const SimulationResult r = simulate(s, c);
  const auto& t = r.timeline.ranks[0];
  EXPECT_EQ(t[1].start, 1.25);
  EXPECT_EQ(t[1].end, 2.5);  // RECOMPUTE: t_f + t_tp_f
  EXPECT_EQ(t[1].tp.start, 2.25);
  EXPECT_EQ(t[2].tp.start, 4.5);  // BW: B's part [2.5, 4.5], TP_B [4.5, 5.25], W's part [5.25, 5.75]
  EXPECT_EQ(t[2].tp.end, 5.25);
  EXPECT_EQ(t[2].end, 5.75);
  EXPECT_EQ(r.makespan, 5.75);
  EXPECT_EQ(r.ideal, 1.25 + 3.25);  // RECOMPUTE is not ideal work
  EXPECT_STREQ(tensor_parallel_label(K::kRecompute), "TP_F");
  EXPECT_STREQ(tensor_parallel_label(K::kBackward), "TP_B");
  EXPECT_STREQ(tensor_parallel_label(K::kBackwardWeight), "");
}

// (b) B's all-reduce in the background: rank 1's W (0.5) hides its collective (0.5), so rank 1
// ends at 5.5 instead of 6; rank 0's B still starts only once the collective has ended (5.5 +
// t_comm), not at rank 1's B's end (5 + t_comm); rank 0's W (0.5) hides 0.5 of its 0.75, the
// makespan goes from 9 to 8.5, rank 0 finishing with its collective.
TEST(TensorParallelOverlap, WeightGradientHidesTheAllReduceButTheGradientWaitsForIt) {
  const SimulationResult blocking = simulate(two_stages(), two_stage_costs());
  const SimulationResult r = simulate(two_stages(), two_stage_costs(), overlapped());
  const auto& r0 = r.timeline.ranks[0];
  const auto& r1 = r.timeline.ranks[1];
  EXPECT_EQ(r1[1].start, 3.0);
  EXPECT_EQ(r1[1].end, 5.0);  // B's compute only
  EXPECT_TRUE(r1[1].tp.background);
  EXPECT_EQ(r1[1].tp.start, 5.0);
  EXPECT_EQ(r1[1].tp.end, 5.5);
  EXPECT_EQ(r1[2].start, 5.0);  // W right after B's compute, beside the collective
  EXPECT_EQ(r.finish[1], 5.5);
  EXPECT_EQ(blocking.finish[1] - r.finish[1], 0.5);  // B + W on rank 1: shorter by t_tp_b[1]
  EXPECT_EQ(r0[1].start, r1[1].tp.end + 0.25);      // the input gradient: after the collective
  EXPECT_GT(r0[1].start, r1[1].end + 0.25);
  EXPECT_EQ(r0[1].end, 7.75);
  EXPECT_EQ(r0[2].start, 7.75);
  EXPECT_EQ(r0[2].end, 8.25);
  EXPECT_EQ(r0[1].tp.end, 8.5);
  EXPECT_EQ(r.finish[0], 8.5);
  EXPECT_EQ(r.makespan, 8.5);
  EXPECT_EQ(blocking.makespan - r.makespan, 0.5);
  // Background collectives are neither busy time nor ideal work.
  EXPECT_EQ(r.busy[1], 1.25 + 2.0 + 0.5);
  EXPECT_EQ(r.tensor_parallel[1], 0.75);
  EXPECT_EQ(r.tensor_parallel_blocking[1], 0.25);
  EXPECT_EQ(r.ideal, 4.0);
  // Rank 0's compute is done at 8.25; the step ends with its all-reduce at 8.5.
  EXPECT_EQ(timeline_bubbles(r.timeline)[0].after_last, 0.25);

  // Lowered: SEND_B carries the gradient, so it waits for the collective too.
  const Schedule lowered = lower_communication(two_stages());
  EXPECT_EQ(simulate(lowered, two_stage_costs(), overlapped()).makespan, 8.5);
  SimulationOptions posted = overlapped();
  posted.comm = CommSemantics::kPosted;
  EXPECT_EQ(simulate(lowered, two_stage_costs(), posted).makespan, 8.5);
}

// One rank's collectives run one after another on its TP lane: F1's forward collective waits for
// B0's all-reduce, and the rank with it (the wait is not busy time).
TEST(TensorParallelOverlap, ARanksCollectivesShareOneLane) {
  const Schedule s = make(1, 2, {{{K::kForward, 0, 0}, {K::kBackwardInput, 0, 0}, {K::kForward, 0, 1},
                                  {K::kBackwardInput, 0, 1}, {K::kBackwardWeight, 0, 0}, {K::kBackwardWeight, 0, 1}}});
  CostModel c = CostModel::uniform(1, 1.0, 1.0, 1.0);
  c.t_tp_f = {0.5};
  c.t_tp_b = {2.0};
  const SimulationResult r = simulate(s, c, overlapped());
  const auto& t = r.timeline.ranks[0];
  EXPECT_EQ(t[1].end, 2.5);       // B0's compute [1.5, 2.5]
  EXPECT_EQ(t[1].tp.end, 4.5);    // its all-reduce [2.5, 4.5]
  EXPECT_EQ(t[2].start, 2.5);     // F1's compute [2.5, 3.5]
  EXPECT_EQ(t[2].tp.start, 4.5);  // its collective waits for the lane
  EXPECT_EQ(t[2].end, 5.0);
  EXPECT_EQ(t[3].tp.start, 6.0);  // B1 [5, 6], all-reduce [6, 8]
  EXPECT_EQ(t[5].end, 8.0);       // W0 [6, 7], W1 [7, 8]
  EXPECT_EQ(r.makespan, 8.0);
  EXPECT_EQ(r.busy[0], 7.0);      // 1.5 + 1 + 1.5 + 1 + 1 + 1: F1's wait of 1 is idle
  EXPECT_EQ(r.tensor_parallel[0], 5.0);
  EXPECT_EQ(r.tensor_parallel_blocking[0], 1.0);
  // Without the option the rank waits in every collective: two F of 1.5, two B of 3, two W of 1.
  EXPECT_EQ(simulate(s, c).makespan, 2 * 1.5 + 2 * 3.0 + 2 * 1.0);
}

// Exactly equal, bit for bit: (tp, the option) against (folded, no TP).
void expect_same(const SimulationResult& a, const SimulationResult& b, const std::string& what) {
  EXPECT_EQ(a.makespan, b.makespan) << what;
  EXPECT_EQ(a.ideal, b.ideal) << what;
  EXPECT_EQ(a.bubble_rate, b.bubble_rate) << what;
  EXPECT_EQ(a.max_span, b.max_span) << what;
  EXPECT_EQ(a.busy, b.busy) << what;
  EXPECT_EQ(a.finish, b.finish) << what;
  EXPECT_EQ(a.peak_activation_bytes, b.peak_activation_bytes) << what;
  ASSERT_EQ(a.timeline.ranks.size(), b.timeline.ranks.size()) << what;
  for (size_t r = 0; r < a.timeline.ranks.size(); ++r) {
    ASSERT_EQ(a.timeline.ranks[r].size(), b.timeline.ranks[r].size()) << what;
    for (size_t i = 0; i < a.timeline.ranks[r].size(); ++i) {
      EXPECT_EQ(a.timeline.ranks[r][i].start, b.timeline.ranks[r][i].start) << what << " rank " << r << " action " << i;
      EXPECT_EQ(a.timeline.ranks[r][i].end, b.timeline.ranks[r][i].end) << what << " rank " << r << " action " << i;
    }
  }
}

// (c) Empty t_tp_* give exactly the results of before (zeros too, with or without the option),
// and t_tp_* without the option exactly those of the same times folded into t_f and t_b, on the
// generators' schedules, lowered or not, with a recompute policy, unequal stages and t_comm > 0,
// and on one rank's F + BW and F + B + W, where the order of the sums shows in the last bit.
TEST(TensorParallelCosts, EqualToTheFoldedCostsBitForBit) {
  std::vector<std::pair<std::string, Schedule>> schedules = {
      {"F BW", make(1, 1, {{{K::kForward, 0, 0}, {K::kBackward, 0, 0}}})},
      {"F B W", make(1, 1, {{{K::kForward, 0, 0}, {K::kBackwardInput, 0, 0}, {K::kBackwardWeight, 0, 0}}})}};
  for (const std::string name : {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zb-v", "dualpipe-v", "bitpipe"}) {
    GeneratorOptions g;
    g.ranks = 4;
    g.micro_batches = 8;
    const Schedule generated = generate_schedule(name, g);
    schedules.emplace_back(name, generated);
    schedules.emplace_back(name + " lowered", lower_communication(generated));
    schedules.emplace_back(name + " recompute",
                           apply_activation_policy(generated, ActivationPolicy::kRecompute,
                                                   CostModel::uniform(generated.num_stages())));
  }
  for (const auto& [what, s] : schedules) {
    const int S = s.num_stages();
    CostModel plain;
    for (int j = 0; j < S; ++j) {
      plain.t_f.push_back(0.3 + 0.07 * j);
      plain.t_b.push_back(0.61 + 0.05 * j);
      plain.t_w.push_back(0.29 + 0.03 * j);
      plain.m_b.push_back(3.0);
      plain.m_w.push_back(1.0);
    }
    plain.t_comm = 0.013;
    CostModel tp = plain, folded = plain, zeros = plain;
    for (int j = 0; j < S; ++j) {
      tp.t_tp_f.push_back(0.11 + 0.01 * j);
      tp.t_tp_b.push_back(0.17 - 0.01 * j);
      folded.t_f[static_cast<size_t>(j)] += tp.t_tp_f.back();
      folded.t_b[static_cast<size_t>(j)] += tp.t_tp_b.back();
    }
    zeros.t_tp_f.assign(static_cast<size_t>(S), 0.0);
    zeros.t_tp_b.assign(static_cast<size_t>(S), 0.0);
    SimulationOptions o;
    o.comm = communication_semantics(s);
    SimulationOptions with_option = o;
    with_option.overlap_tensor_parallel_backward = true;
    const SimulationResult before = simulate(s, plain, o);
    expect_same(simulate(s, zeros, o), before, what + " zeros");
    expect_same(simulate(s, plain, with_option), before, what + " empty, overlap");
    expect_same(simulate(s, zeros, with_option), before, what + " zeros, overlap");
    const SimulationResult with_tp = simulate(s, tp, o);
    expect_same(with_tp, simulate(s, folded, o), what + " folded");
    // Every B's all-reduce is followed by a W (or BW's W part) that can hide some of it.
    EXPECT_LT(simulate(s, tp, with_option).makespan, with_tp.makespan) << what;
  }
  EXPECT_EQ(schedules.size(), 26u);
}

// (d) The collectives in the timeline, the Chrome trace and the SVG.
TEST(TensorParallelTimeline, TraceAndSvgShowTheCollectives) {
  for (const bool overlap : {false, true}) {
    const SimulationResult r = simulate(two_stages(), two_stage_costs(), overlap ? overlapped() : SimulationOptions{});
    const Timeline& t = r.timeline;
    EXPECT_EQ(t.end_time(), r.makespan);
    int with_tp = 0, background = 0;
    for (const auto& rank : t.ranks)
      for (const TimedAction& a : rank) {
        with_tp += a.has_tensor_parallel();
        background += a.tp.background;
        if (a.has_tensor_parallel() && !a.tp.background) {  // inside its action
          EXPECT_GE(a.tp.start, a.start);
          EXPECT_LE(a.tp.end, a.end);
        }
      }
    EXPECT_EQ(with_tp, 4);
    EXPECT_EQ(background, overlap ? 2 : 0);

    const nlohmann::json trace = nlohmann::json::parse(to_chrome_trace(t));
    std::map<std::string, double> tp_events;  // name -> duration
    std::map<int, std::string> tracks;
    std::map<std::string, int> tid_of;
    for (const auto& e : trace["traceEvents"]) {
      if (e["ph"] == "M" && e["name"] == "thread_name") tracks[e["tid"].get<int>()] = e["args"]["name"];
      if (e["ph"] != "X" || e["cat"] != "TP") continue;
      EXPECT_EQ(e["cname"], "generic_work");
      tp_events[e["name"]] = e["dur"].get<double>();
      tid_of[e["name"]] = e["tid"].get<int>();
    }
    EXPECT_EQ(tp_events, (std::map<std::string, double>{{"TP_F 0F0", 0.5}, {"TP_F 1F0", 0.25}, {"TP_B 0B0", 0.75},
                                                        {"TP_B 1B0", 0.5}}));
    EXPECT_EQ(tid_of["TP_F 1F0"], 1);
    EXPECT_EQ(tid_of["TP_B 1B0"], overlap ? 3 : 1);  // the background ones on "rank 1 TP"
    EXPECT_EQ(tracks.count(3), overlap ? 1u : 0u);
    if (overlap) {
      EXPECT_EQ(tracks[3], "rank 1 TP");
    }

    const std::string svg = to_svg(t);
    size_t rects = 0;
    for (size_t at = svg.find("<rect class=\"tp\""); at != std::string::npos; at = svg.find("<rect class=\"tp\"", at + 1))
      ++rects;
    EXPECT_EQ(rects, 4u);
    EXPECT_NE(svg.find("fill=\"#7d7d7d\""), std::string::npos);
    EXPECT_NE(svg.find("<title>TP_B 1B0 ["), std::string::npos);
    EXPECT_NE(svg.find(">TP collective ("), std::string::npos);  // the legend
    EXPECT_EQ(svg.find(">TP</text>") != std::string::npos, overlap);       // the lane
    EXPECT_EQ(svg.find("(in the background)") != std::string::npos, overlap);
  }
  // Without TP costs nothing of it appears.
  CostModel plain = two_stage_costs();
  plain.t_tp_f.clear();
  plain.t_tp_b.clear();
  const Timeline t = simulate(two_stages(), plain).timeline;
  EXPECT_EQ(to_svg(t).find("TP"), std::string::npos);
  EXPECT_EQ(to_chrome_trace(t).find("TP"), std::string::npos);
}

}  // namespace
}  // namespace pf::sched

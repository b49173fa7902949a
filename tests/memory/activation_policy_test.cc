// The activation policy pass (runtime/schedules/activation_policy.h): valid schedules, the simulator's
// peaks agree with the pass's accounting, selective offloads only what the budget needs (longest-
// living first) and refuses an impossible budget naming the smallest one that works.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/schedules/activation_policy.h"
#include "runtime/schedules/lowering.h"
#include "runtime/schedules/schedule_request.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/text_format.h"
#include "runtime/schedules/validator.h"

namespace pf::sched {
namespace {

Schedule make(const std::string& name, int p, int m, int v = 1, bool lowered = false) {
  ScheduleRequest req;
  req.name = name;
  req.ranks = p;
  req.micro_batches = m;
  req.chunks = v;
  Schedule s = make_schedule(req);
  return lowered ? lower_communication(s) : s;
}

int count(const Schedule& s, int rank, ActionKind kind) {
  int n = 0;
  for (const Action& a : s.ranks[rank]) n += a.kind == kind;
  return n;
}

CostModel costs_for(const Schedule& s) {
  CostModel c = CostModel::uniform(s.num_stages(), 1.0, 1.0, 1.0, 0.0, 100.0, 40.0);
  c.m_in.assign(static_cast<size_t>(s.num_stages()), 10.0);
  c.transfer_bandwidth = 200.0;
  return c;
}

TEST(ActivationPolicy, NamesRoundTrip) {
  for (const std::string& n : activation_policy_names()) EXPECT_EQ(activation_policy_name(parse_activation_policy(n)), n);
  try {
    parse_activation_policy("bogus");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("offload-file"), std::string::npos);
  }
  EXPECT_TRUE(policy_offloads(ActivationPolicy::kSelective));
  EXPECT_FALSE(policy_offloads(ActivationPolicy::kRecompute));
}

TEST(ActivationPolicy, EveryPolicyGivesValidSchedulesAndSimulatorAgrees) {
  struct G {
    const char* name;
    int v;
  };
  int checked = 0;
  for (G g : {G{"1f1b", 1}, G{"gpipe", 1}, G{"zb-h1", 1}, G{"zb-h2", 1}, G{"zb-v", 2}, G{"interleaved-1f1b", 2}}) {
    for (int p : {2, 4}) {
      for (bool lowered : {false, true}) {
        const Schedule base = make(g.name, p, 8, g.v, lowered);
        const CostModel c = costs_for(base);
        for (ActivationPolicy pol : {ActivationPolicy::kNone, ActivationPolicy::kRecompute, ActivationPolicy::kOffloadHost,
                                     ActivationPolicy::kOffloadFile, ActivationPolicy::kSelective,
                                     ActivationPolicy::kBalance}) {
          const double budget = pol == ActivationPolicy::kSelective ? min_activation_budget(base, c) : 0.0;
          const Schedule s = apply_activation_policy(base, pol, c, budget);
          const ValidationReport rep = validate(s);
          ASSERT_TRUE(rep.ok()) << g.name << " " << activation_policy_name(pol) << ": " << rep.to_string();
          const SimulationResult sim = simulate(s, c);
          const auto units = activation_peak_units(s);
          const auto bytes = activation_peak_bytes(s, c);
          for (int r = 0; r < p; ++r) {
            EXPECT_EQ(sim.peak_activations[r], units[r]) << g.name << " rank " << r;
            EXPECT_DOUBLE_EQ(sim.peak_activation_bytes[r], bytes[r]) << g.name << " rank " << r;
            if (pol == ActivationPolicy::kSelective) {
              EXPECT_LE(bytes[r], budget);
            }
          }
          // Text round trip keeps the inserted actions.
          EXPECT_EQ(parse_schedule(schedule_to_text(s)), s);
          // Unlowered input: the policy output still lowers.
          if (!lowered) {
            EXPECT_NO_THROW(lower_communication(s));
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GE(checked, 120);
}

// BPipe on 1F1B: rank r holds p - r contexts; pairing r with p-1-r evens the peaks out to about
// (p + 1) / 2 without changing the makespan.
TEST(ActivationPolicy, BalanceEvensOutOneFOneB) {
  for (int p : {4, 8}) {
    const Schedule base = make("1f1b", p, 2 * p, 1, true);
    const CostModel c = CostModel::uniform(p);
    const Schedule bal = apply_activation_policy(base, ActivationPolicy::kBalance, c);
    ASSERT_TRUE(validate(bal).ok()) << validate(bal).to_string();
    const auto before = activation_peak_units(base), after = activation_peak_units(bal);
    for (int r = 0; r < p; ++r) EXPECT_EQ(before[r], p - r);
    const int max_after = *std::max_element(after.begin(), after.end());
    EXPECT_EQ(max_after, (p + 2) / 2) << "p=" << p;  // 3 for p = 4, 5 for p = 8
    EXPECT_DOUBLE_EQ(simulate(bal, c).makespan, simulate(base, c).makespan);
    // Every moved context goes from rank r to rank p-1-r and comes back.
    for (int r = 0; r < p; ++r) {
      for (const Action& a : bal.ranks[r]) {
        if (a.kind == ActionKind::kHold || a.kind == ActionKind::kReturn) {
          EXPECT_EQ(a.stage, p - 1 - r) << action_to_string(a) << " on rank " << r;
        }
      }
      EXPECT_EQ(count(bal, r, ActionKind::kOffload), count(bal, p - 1 - r, ActionKind::kHold));
      EXPECT_EQ(count(bal, r, ActionKind::kHold), count(bal, r, ActionKind::kReturn));
    }
    EXPECT_GT(count(bal, 0, ActionKind::kOffload), 0);
  }
}

// Over the generators: balance never raises the largest peak, never deadlocks, and the simulator's
// per-rank peaks equal the pass's accounting (HOLD/RETURN included).
TEST(ActivationPolicy, BalanceNeverRaisesTheLargestPeak) {
  struct G {
    const char* name;
    int v;
  };
  int improved = 0, checked = 0;
  for (G g : {G{"1f1b", 1}, G{"gpipe", 1}, G{"zb-h1", 1}, G{"zb-h2", 1}, G{"zb-v", 2}, G{"interleaved-1f1b", 2},
              G{"bfs", 2}}) {
    for (int p : {2, 3, 4, 6}) {
      for (int m : {3, 8, 12}) {
        Schedule base;
        try {
          base = make(g.name, p, m, g.v, true);
        } catch (const Error&) {
          continue;
        }
        CostModel c = costs_for(base);
        for (size_t s = 0; s < c.m_b.size(); ++s) c.m_b[s] = 100.0 + 10.0 * static_cast<double>(s % 3);
        const Schedule bal = apply_activation_policy(base, ActivationPolicy::kBalance, c);
        const ValidationReport rep = validate(bal);
        ASSERT_TRUE(rep.ok()) << g.name << " p=" << p << " m=" << m << ": " << rep.to_string();
        const auto b0 = activation_peak_bytes(base, c), b1 = activation_peak_bytes(bal, c);
        const double max0 = *std::max_element(b0.begin(), b0.end()), max1 = *std::max_element(b1.begin(), b1.end());
        EXPECT_LE(max1, max0) << g.name << " p=" << p << " m=" << m;
        improved += max1 < max0;
        const SimulationResult sim = simulate(bal, c);
        for (int r = 0; r < p; ++r) EXPECT_DOUBLE_EQ(sim.peak_activation_bytes[r], b1[r]);
        EXPECT_EQ(parse_schedule(schedule_to_text(bal)), bal);
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 60);
  EXPECT_GE(improved, 20);
}

TEST(ActivationPolicy, ValidatorChecksHoldAndReturn) {
  const Schedule bal = apply_activation_policy(make("1f1b", 4, 8, 1, true), ActivationPolicy::kBalance, CostModel());
  auto find = [&](int rank, ActionKind kind) {
    for (size_t i = 0; i < bal.ranks[rank].size(); ++i)
      if (bal.ranks[rank][i].kind == kind) return static_cast<int>(i);
    return -1;
  };
  const int hold = find(3, ActionKind::kHold), ret = find(3, ActionKind::kReturn);
  ASSERT_GE(hold, 0);
  ASSERT_GE(ret, 0);
  // RETURN without HOLD.
  Schedule s = bal;
  s.ranks[3].erase(s.ranks[3].begin() + hold);
  EXPECT_NE(validate(s).to_string().find("never received"), std::string::npos) << validate(s).to_string();
  // HOLD on the owner's rank.
  s = bal;
  Action h = s.ranks[3][static_cast<size_t>(hold)];
  s.ranks[3].erase(s.ranks[3].begin() + hold);
  s.ranks[h.stage].push_back(h);
  EXPECT_NE(validate(s).to_string().find("runs on a partner rank"), std::string::npos) << validate(s).to_string();
  // RETURN moved after the owner's B that needs it: the owner's RELOAD waits for a RETURN that
  // waits for that B's gradient chain: a deadlock the validator names.
  s = bal;
  const Action r = s.ranks[3][static_cast<size_t>(ret)];
  s.ranks[3].erase(s.ranks[3].begin() + ret);
  s.ranks[3].push_back(r);
  EXPECT_NE(validate(s).to_string().find("deadlock"), std::string::npos) << validate(s).to_string();
}

TEST(ActivationPolicy, OneFOneBFirstRank) {
  const Schedule base = make("1f1b", 4, 8);
  const CostModel c = costs_for(base);
  // Without a policy rank 0 holds p = 4 contexts.
  EXPECT_EQ(activation_peak_units(base)[0], 4);
  EXPECT_DOUBLE_EQ(activation_peak_bytes(base, c)[0], 400.0);
  const Schedule off = apply_activation_policy(base, ActivationPolicy::kOffloadHost, c);
  EXPECT_EQ(count(off, 0, ActionKind::kOffload), count(off, 0, ActionKind::kReload));
  EXPECT_GT(count(off, 0, ActionKind::kOffload), 0);
  // The last rank runs F then B directly: nothing to offload there.
  EXPECT_EQ(count(off, 3, ActionKind::kOffload), 0);
  EXPECT_LT(activation_peak_bytes(off, c)[0], 400.0);
  EXPECT_LE(activation_peak_units(off)[0], 2);
  const Schedule rc = apply_activation_policy(base, ActivationPolicy::kRecompute, c);
  EXPECT_EQ(count(rc, 0, ActionKind::kRecompute), 8);
  EXPECT_EQ(count(rc, 3, ActionKind::kRecompute), 0);
  // Recompute: inputs (10 each) plus one rebuilt context.
  EXPECT_DOUBLE_EQ(activation_peak_bytes(rc, c)[0], 100.0 + 3 * 10.0);
  // Transfer time: OFFLOAD/RELOAD take m_b / bandwidth in the simulator.
  const SimulationResult sim = simulate(off, c);
  for (const auto& ta : sim.timeline.ranks[0])
    if (ta.action.kind == ActionKind::kOffload) {
      EXPECT_DOUBLE_EQ(ta.end - ta.start, 0.5);
    }
  EXPECT_DOUBLE_EQ(offloaded_bytes_per_rank(off, c)[0], 100.0 * count(off, 0, ActionKind::kOffload));
}

TEST(ActivationPolicy, SelectiveOffloadsOnlyWhatTheBudgetNeedsLongestFirst) {
  const Schedule base = make("1f1b", 4, 8);
  const CostModel c = costs_for(base);
  const double none = activation_peak_bytes(base, c)[0];
  const double lo = min_activation_budget(base, c);
  ASSERT_LT(lo, none);
  // A budget at the current peak: nothing moves.
  const Schedule same = apply_activation_policy(base, ActivationPolicy::kSelective, c, none);
  EXPECT_EQ(same, base);
  // One context less: a few offloads on the early ranks only, fewer than offload-all, and none on
  // the last rank (already within the budget).
  const Schedule one = apply_activation_policy(base, ActivationPolicy::kSelective, c, none - 100.0);
  const Schedule all = apply_activation_policy(base, ActivationPolicy::kOffloadHost, c);
  EXPECT_GT(count(one, 0, ActionKind::kOffload), 0);
  EXPECT_LT(count(one, 0, ActionKind::kOffload), count(all, 0, ActionKind::kOffload));
  EXPECT_EQ(count(one, 3, ActionKind::kOffload), 0);
  EXPECT_LE(activation_peak_bytes(one, c)[0], none - 100.0);
  // Longest-living first: on rank 0 every offloaded context lives at least as long (simulated clock,
  // end of F to start of B) as every context left resident.
  {
    const SimulationResult sim = simulate(base, c);
    std::map<std::pair<int, int>, double> f_end, b_start;
    for (const auto& ta : sim.timeline.ranks[0]) {
      if (ta.action.kind == ActionKind::kForward) f_end[{ta.action.stage, ta.action.micro_batch}] = ta.end;
      if (ta.action.kind == ActionKind::kBackward || ta.action.kind == ActionKind::kBackwardInput)
        b_start[{ta.action.stage, ta.action.micro_batch}] = ta.start;
    }
    std::set<std::pair<int, int>> off;
    for (const Action& a : one.ranks[0])
      if (a.kind == ActionKind::kOffload) off.insert({a.stage, a.micro_batch});
    double min_off = 1e300, max_kept = -1;
    for (const Action& a : all.ranks[0]) {
      if (a.kind != ActionKind::kOffload) continue;  // the eligible contexts
      const std::pair<int, int> k{a.stage, a.micro_batch};
      const double life = b_start[k] - f_end[k];
      if (off.count(k)) min_off = std::min(min_off, life);
      else max_kept = std::max(max_kept, life);
    }
    EXPECT_GE(min_off, max_kept);
  }
  // Monotone: smaller budgets never offload fewer contexts.
  int prev = 0;
  for (double b = none; b >= lo; b -= 50.0) {
    const Schedule s = apply_activation_policy(base, ActivationPolicy::kSelective, c, b);
    int n = 0;
    for (int r = 0; r < 4; ++r) n += count(s, r, ActionKind::kOffload);
    EXPECT_GE(n, prev);
    prev = n;
  }
}

TEST(ActivationPolicy, ImpossibleBudgetNamesTheSmallestThatWorks) {
  const Schedule base = make("gpipe", 4, 8);
  const CostModel c = costs_for(base);
  const double lo = min_activation_budget(base, c);
  try {
    apply_activation_policy(base, ActivationPolicy::kSelective, c, lo - 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("smallest budget that works: " + std::to_string(static_cast<long long>(lo)) +
                                         " bytes"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(apply_activation_policy(base, ActivationPolicy::kSelective, c, lo));
  EXPECT_THROW(apply_activation_policy(base, ActivationPolicy::kSelective, c, 0), Error);
  // A schedule that already has memory actions is refused.
  const Schedule off = apply_activation_policy(base, ActivationPolicy::kOffloadHost, c);
  EXPECT_THROW(apply_activation_policy(off, ActivationPolicy::kRecompute, c), Error);
}

TEST(ActivationPolicy, PlanGathersTheFigures) {
  const Schedule base = make("1f1b", 4, 8, 1, true);
  const CostModel c = costs_for(base);  // m_b 100, bandwidth 200
  const ActivationPlan off = plan_activation(base, ActivationPolicy::kOffloadFile, c);
  EXPECT_EQ(off.schedule, apply_activation_policy(base, ActivationPolicy::kOffloadFile, c));
  EXPECT_EQ(off.peak_units, activation_peak_units(off.schedule));
  EXPECT_EQ(off.peak_bytes, activation_peak_bytes(off.schedule, c));
  EXPECT_DOUBLE_EQ(off.offloaded_bytes[0], 100.0 * count(off.schedule, 0, ActionKind::kOffload));
  EXPECT_DOUBLE_EQ(off.transfer_time[0], 2.0 * off.offloaded_bytes[0] / 200.0);
  EXPECT_EQ(off.recomputes[0], 0);
  EXPECT_DOUBLE_EQ(off.min_budget, min_activation_budget(base, c));
  const ActivationPlan rc = plan_activation(base, ActivationPolicy::kRecompute, c);
  EXPECT_EQ(rc.recomputes[0], 8);
  EXPECT_DOUBLE_EQ(rc.offloaded_bytes[0], 0.0);
  EXPECT_THROW(plan_activation(base, ActivationPolicy::kSelective, c, off.min_budget - 1), Error);
}

}  // namespace
}  // namespace pf::sched

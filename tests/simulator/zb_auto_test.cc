// zb-auto: validity, memory cap, W order, registry entry, and how it compares with the handcrafted
// zero-bubble schedules. (Its reproduction of the paper's ZB-1p / ZB-2p columns is in
// paper_table_test.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/schedules/generators.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/validator.h"
#include "runtime/schedules/zb_auto.h"

namespace pf::sched {
namespace {

Schedule gen(const std::string& name, int p, int m) {
  GeneratorOptions o;
  o.ranks = p;
  o.micro_batches = m;
  return generate_schedule(name, o);
}

TEST(ZbAuto, IsRegistered) {
  const std::vector<std::string> names = generator_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "zb-auto"), names.end());
  register_zb_auto_generator();  // idempotent
  const Schedule s = gen("zb-auto", 4, 8);
  EXPECT_EQ(s.name, "zb-auto");
  EXPECT_TRUE(validate(s).ok()) << validate(s).to_string();
  for (int r = 0; r < 4; ++r) {
    const auto& list = s.ranks[static_cast<size_t>(r)];
    ASSERT_FALSE(list.empty());
    EXPECT_EQ(list.back().kind, ActionKind::kStep);  // like the built-ins
  }
  GeneratorOptions bad;
  bad.ranks = 4;
  bad.micro_batches = 8;
  bad.chunks = 2;
  EXPECT_THROW(generate_schedule("zb-auto", bad), Error);
}

// The guarantees every zb-auto order keeps: valid, each stage's W's in micro-batch order (the
// sequential trainer's accumulation order), and no rank above its cap.
void expect_valid_within_cap(const Schedule& s, const CostModel& cm, double cap,
                             const std::string& where) {
  const ValidationReport report = validate(s);
  ASSERT_TRUE(report.ok()) << where << "\n" << report.to_string();
  std::vector<int> in_order(static_cast<size_t>(s.num_micro_batches));
  std::iota(in_order.begin(), in_order.end(), 0);
  for (int stage = 0; stage < s.num_stages(); ++stage)
    EXPECT_EQ(weight_gradient_order(s, stage), in_order) << where;
  const SimulationResult r = simulate(s, cm);
  for (int rank = 0; rank < s.num_ranks(); ++rank)
    EXPECT_LE(r.peak_activation_bytes[static_cast<size_t>(rank)],
              cap * cm.mem_b(rank) + 1e-9)
        << where << " rank " << rank;
  EXPECT_GE(r.bubble_rate, -1e-12) << where;
}

TEST(ZbAuto, ValidWithinCapAndWeightGradientsInOrder) {
  struct C {
    double f, b, w, comm, mw;
  };
  const std::vector<C> costs = {{1, 1, 1, 0, 0},     {1, 1, 1, 0.2, 0.5}, {2, 3, 1, 0.1, 0.4},
                                {1, 2, 0.5, 0, 1.0}, {3, 2, 1, 0.5, 0.3}, {1, 1, 2, 0.05, 0.2}};
  for (const C& c : costs)
    for (int p : {1, 2, 3, 4, 8})
      for (int m : {1, 2, 3, 5, 8, 16})
        for (double cap_per_p : {0.0, 1.0, 1.5, 2.0, 3.0}) {
          const double cap = cap_per_p == 0.0 ? 1.0 : cap_per_p * p;  // 0 stands for one M_B
          const double mb_bytes = 2.0;
          const CostModel cm = CostModel::uniform(p, c.f, c.b, c.w, c.comm, mb_bytes, c.mw * mb_bytes);
          expect_valid_within_cap(generate_zb_auto(p, m, cm, cap), cm, cap,
                                  "p=" + std::to_string(p) + " m=" + std::to_string(m) +
                                      " cap=" + std::to_string(cap));
        }
}

TEST(ZbAuto, AtLeastAsGoodAsTheHandcraftedSchedules) {
  // Uniform T_F = T_B = T_W: cap p matches or beats ZB-H1, cap 2p matches or beats ZB-H2 (which is
  // bubble-free in span terms once m >= 2p - 1), both by the paper's span measure.
  for (int p : {2, 3, 4, 8})
    for (int m : {2 * p, 3 * p, 4 * p}) {
      const CostModel c = CostModel::uniform(p, 1, 1, 1, 0, 1.0, 0.5);
      const SimulationResult h1 = simulate(gen("zb-h1", p, m), c);
      const SimulationResult z1 = simulate(generate_zb_auto(p, m, c, p), c);
      EXPECT_LE(z1.max_span, h1.max_span + 1e-9) << "p=" << p << " m=" << m;
      const SimulationResult z2 = simulate(generate_zb_auto(p, m, c, 2 * p), c);
      EXPECT_NEAR(z2.span_bubble_rate, 0.0, 1e-12) << "p=" << p << " m=" << m;
      EXPECT_LE(z2.max_span, z1.max_span + 1e-9);
    }
}

// The objective's primary measure of a timed schedule.
double objective_value(const SimulationResult& r, ZbAutoOptions::Objective objective) {
  return objective == ZbAutoOptions::Objective::kMaxSpan ? r.max_span : r.makespan;
}

// Largest per-rank peak of activation bytes, in units of M_B (= 1 in the grid below).
double peak_in_mb(const SimulationResult& r) {
  return *std::max_element(r.peak_activation_bytes.begin(), r.peak_activation_bytes.end());
}

TEST(ZbAuto, NeverWorseThanAFixedZeroBubbleScheduleWithinItsCap) {
  // Under either objective, with caps p, 1.5p and 2p, zb-auto matches or beats ZB-H1 and ZB-H2
  // wherever their peak memory fits the cap (ZB-H1 fits p and ZB-H2 2p, as M_W <= M_B here). The
  // grid covers T_W close to T_F, T_W above it, T_B below T_F and a T_comm as large as T_B.
  struct C {
    double f, b, w, comm;
  };
  const std::vector<C> costs = {{1, 1, 1, 0},      {1, 1, 0.9, 0.05}, {1, 1, 0.95, 0},
                                {1, 1, 1.1, 0.1},  {1, 1, 2, 0.1},    {1, 2, 1, 0.1},
                                {2, 1, 1, 0.1},    {1, 1, 0.3, 0.1},  {1, 0.5, 0.2, 1.5},
                                {1, 0.5, 0.9, 1.5}, {2, 2, 1, 1.5},   {18.522, 18.086, 9.337, 0.601}};
  using Objective = ZbAutoOptions::Objective;
  for (const C& c : costs)
    for (double mw : {0.0, 0.5, 1.0})
      for (int p = 2; p <= 8; ++p)
        for (int m : {p, 2 * p, 3 * p}) {
          const CostModel cm = CostModel::uniform(p, c.f, c.b, c.w, c.comm, 1.0, mw);
          const std::vector<std::pair<std::string, SimulationResult>> fixed = {
              {"zb-h1", simulate(gen("zb-h1", p, m), cm)},
              {"zb-h2", simulate(gen("zb-h2", p, m), cm)}};
          ASSERT_LE(peak_in_mb(fixed[0].second), p + 1e-9);
          ASSERT_LE(peak_in_mb(fixed[1].second), 2 * p + 1e-9);
          for (Objective objective : {Objective::kMaxSpan, Objective::kMakespan})
            for (double cap : {1.0 * p, 1.5 * p, 2.0 * p}) {
              ZbAutoOptions o;
              o.objective = objective;
              const std::string where =
                  "F " + std::to_string(c.f) + " B " + std::to_string(c.b) + " W " +
                  std::to_string(c.w) + " comm " + std::to_string(c.comm) + " M_W " +
                  std::to_string(mw) + " p=" + std::to_string(p) + " m=" + std::to_string(m) +
                  " cap " + std::to_string(cap) +
                  (objective == Objective::kMaxSpan ? " span" : " makespan");
              const Schedule z = generate_zb_auto(p, m, cm, cap, o);
              expect_valid_within_cap(z, cm, cap, where);
              const double ours = objective_value(simulate(z, cm), objective);
              for (const auto& [name, r] : fixed)
                if (peak_in_mb(r) <= cap + 1e-9) {
                  EXPECT_LE(ours, objective_value(r, objective) + 1e-9) << where << " vs " << name;
                }
            }
        }
}

// Largest idle time of one rank within its own span (first action to last).
double max_span_idle(const SimulationResult& r) {
  double idle = 0.0;
  for (size_t j = 0; j < r.busy.size(); ++j)
    idle = std::max(idle, r.finish[j] - r.first_start[j] - r.busy[j]);
  return idle;
}

TEST(ZbAuto, CoversZbH2WhenTwIsCloseToTf) {
  // ZB-H2's fixed order leaves (p-1)(T_F+T_B-2T_W) idle on some rank when T_W < T_F (T_F = T_B,
  // T_comm = 0); zb-auto with cap 2p never leaves more, and none at all once m >= 3p.
  const int p = 8;
  for (double tw : {0.7, 0.8, 0.9, 0.95, 1.0, 1.1})
    for (int m : {2 * p, 3 * p, 4 * p}) {
      const CostModel cm = CostModel::uniform(p, 1.0, 1.0, tw, 0.0, 1.0, 0.5);
      const double h2_idle = std::max(0.0, (p - 1) * (2.0 - 2.0 * tw));
      const std::string where = "T_W " + std::to_string(tw) + " m=" + std::to_string(m);
      EXPECT_NEAR(max_span_idle(simulate(gen("zb-h2", p, m), cm)), h2_idle, 1e-9) << where;
      const double auto_idle = max_span_idle(simulate(generate_zb_auto(p, m, cm, 2 * p), cm));
      EXPECT_LE(auto_idle, h2_idle + 1e-9) << where;
      if (m >= 3 * p) {
        EXPECT_NEAR(auto_idle, 0.0, 1e-9) << where;
      }
    }
}

TEST(ZbAuto, MakespanObjective) {
  ZbAutoOptions by_makespan;
  by_makespan.objective = ZbAutoOptions::Objective::kMakespan;
  for (int p : {4, 8})
    for (int m : {8, 24}) {
      const CostModel c = CostModel::uniform(p, 1.0, 1.2, 0.7, 0.05, 1.0, 0.4);
      const SimulationResult a = simulate(generate_zb_auto(p, m, c, 2 * p), c);
      const SimulationResult b = simulate(generate_zb_auto(p, m, c, 2 * p, by_makespan), c);
      EXPECT_LE(b.makespan, a.makespan + 1e-9);
      EXPECT_LE(a.max_span, b.max_span + 1e-9);
    }
}

TEST(ZbAuto, RejectsBadArguments) {
  const CostModel c = CostModel::uniform(4);
  EXPECT_THROW(generate_zb_auto(0, 8, c, 4), Error);
  EXPECT_THROW(generate_zb_auto(4, 0, c, 4), Error);
  EXPECT_THROW(generate_zb_auto(4, 8, c, 0.5), Error);
  EXPECT_THROW(generate_zb_auto(3, 8, c, 4), Error);  // cost model for 4 stages
  // M_W above the cap.
  EXPECT_THROW(generate_zb_auto(4, 8, CostModel::uniform(4, 1, 1, 1, 0, 1.0, 2.0), 1.0), Error);
}

}  // namespace
}  // namespace pf::sched

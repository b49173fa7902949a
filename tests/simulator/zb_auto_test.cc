// zb-auto: validity, memory cap, W order, registry entry, and how it compares with the handcrafted
// zero-bubble schedules. (Its reproduction of the paper's ZB-1p / ZB-2p columns is in
// paper_table_test.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
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
          const Schedule s = generate_zb_auto(p, m, cm, cap);
          const std::string where = "p=" + std::to_string(p) + " m=" + std::to_string(m) +
                                    " cap=" + std::to_string(cap);
          const ValidationReport report = validate(s);
          ASSERT_TRUE(report.ok()) << where << "\n" << report.to_string();
          std::vector<int> in_order(static_cast<size_t>(m));
          std::iota(in_order.begin(), in_order.end(), 0);
          for (int stage = 0; stage < p; ++stage)
            EXPECT_EQ(weight_gradient_order(s, stage), in_order) << where;
          const SimulationResult r = simulate(s, cm);
          for (int rank = 0; rank < p; ++rank)
            EXPECT_LE(r.peak_activation_bytes[static_cast<size_t>(rank)], cap * mb_bytes + 1e-9)
                << where << " rank " << rank;
          EXPECT_GE(r.bubble_rate, -1e-12);
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

// v-half and v-min: the memory cap holds on every rank, and the bubble rates are those of the
// controllable-memory paper's closed forms (T_F = T_B = T_W): about p/(2m) and 2p/(3m) of the
// schedule, where 1F1B's is about p/m.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <optional>
#include <string>

#include "runtime/schedules/capped_v.h"
#include "runtime/schedules/generators.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/v_building_block.h"
#include "runtime/schedules/validator.h"
#include "schedule_test_util.h"

namespace pf::sched {
namespace {

TEST(CappedV, Caps) {
  EXPECT_EQ(v_half_cap(4), 3);
  EXPECT_EQ(v_half_cap(8), 5);
  EXPECT_EQ(v_min_cap(4), 2);
  EXPECT_EQ(v_min_cap(8), 4);
  EXPECT_EQ(v_min_cap(1), 1);
}

int max_peak(const SimulationResult& r) {
  return *std::max_element(r.peak_activations.begin(), r.peak_activations.end());
}

// Peaks in chunk contexts: one micro-batch of a rank is its two chunks' contexts.
TEST(CappedV, PeakMemoryIsTheCap) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 32; ++m) {
      for (const auto& [name, cap] : {std::pair<const char*, int>{"v-half", v_half_cap(p)}, {"v-min", v_min_cap(p)}}) {
        SCOPED_TRACE(std::string(name) + " p=" + std::to_string(p) + " m=" + std::to_string(m));
        const Schedule s = generate_schedule(name, {p, m, 2});
        ASSERT_EQ(s.placement, Placement::v_shape(p));
        const SimulationResult r = simulate(s, CostModel::uniform(2 * p));
        EXPECT_LE(max_peak(r), 2 * cap);
        if (p >= 3 && m >= p) {
          EXPECT_LT(max_peak(r), max_peak(simulate(generate_schedule("zb-v", {p, m, 2}), CostModel::uniform(2 * p))));
        }
      }
    }
  }
}

// The paper's bubble rates, 1 - m (T_F+T_B+T_W) / longest rank span, at T_F = T_B = T_W: v-half
// about p/(2m), v-min about 2p/(3m); both at or below them here.
TEST(CappedV, BubbleRatesOfTheClosedForms) {
  for (int p = 4; p <= 8; ++p) {
    for (int m : {2 * p, 4 * p, 8 * p}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const double half = simulate(generate_schedule("v-half", {p, m, 2}), CostModel::uniform(2 * p)).span_bubble_rate;
      const double min = simulate(generate_schedule("v-min", {p, m, 2}), CostModel::uniform(2 * p)).span_bubble_rate;
      const double one_f_one_b = simulate(generate_schedule("1f1b", {p, m}), CostModel::uniform(p)).span_bubble_rate;
      EXPECT_LE(half, p / (2.0 * m));
      EXPECT_LE(min, 2.0 * p / (3.0 * m));
      EXPECT_LT(half, one_f_one_b);
      EXPECT_LE(half, min);
    }
  }
}

// Unequal costs and W memory: the cap is in bytes of a rank's micro-batch, m_b of both its chunks.
TEST(CappedV, CapHoldsWithUnequalCostsAndWeightMemory) {
  for (int p : {2, 3, 5}) {
    CostModel c = CostModel::uniform(2 * p, 1.0, 2.0, 0.7, 0.1);
    c.m_b.assign(static_cast<size_t>(2 * p), 4.0);
    c.m_w.assign(static_cast<size_t>(2 * p), 1.0);
    for (int s = 0; s < 2 * p; ++s) c.t_f[static_cast<size_t>(s)] += 0.1 * s;
    for (double cap : {1.0, 1.5, 2.0, 3.0}) {
      const Schedule s = generate_capped_v("v-test", p, 4 * p, c, cap);
      ASSERT_TRUE(validate(s).ok()) << validate(s).to_string();
      const SimulationResult r = simulate(s, c);
      for (int k = 0; k < p; ++k) {
        EXPECT_LE(r.peak_activation_bytes[static_cast<size_t>(k)], cap * 8.0 + 1e-9) << "p=" << p << " cap " << cap;
      }
    }
  }
}

// The building block alone: valid for every p, m; on unit costs the longest rank span exceeds the
// m(T_F+T_B+T_W) of work by less than the block's length on rank 0, 4p units (2p F and 2p B on the
// critical path), and its peak is what the lifespans give, (4p + 2) / 6 chunk contexts plus the
// ones in flight at the block's ends.
TEST(VBuildingBlock, ValidAndAsShortAsItsBlock) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 24; ++m) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const std::optional<Schedule> s = v_building_block_schedule("v-block", p, m, CostModel::uniform(2 * p));
      ASSERT_TRUE(s.has_value());
      ASSERT_TRUE(validate(*s).ok()) << validate(*s).to_string();
      const SimulationResult r = simulate(*s, CostModel::uniform(2 * p));
      EXPECT_LE(r.max_span - r.ideal, 4.0 * p + 1e-9);
      EXPECT_LE(max_peak(r), (4 * p + 2 + 5) / 6 + 2);
    }
  }
}

TEST(CappedV, BadArguments) {
  const CostModel c = CostModel::uniform(8);
  EXPECT_HAS(testing::error_of([&] { generate_capped_v("v-x", 4, 8, c, 0.5); }),
             "v-x: the memory cap must be at least 1 micro-batch");
  EXPECT_HAS(testing::error_of([&] { generate_capped_v("v-x", 4, 0, c, 2); }), "micro_batches must be >= 1");
  EXPECT_HAS(testing::error_of([&] { generate_capped_v("v-x", 3, 8, c, 2); }), "t_f has 8 entries, the schedule has 6 stages");
  EXPECT_HAS(testing::error_of([] { generate_schedule("v-min", {4, 8, 3}); }), "v-min always has 2 chunks per rank");
}

}  // namespace
}  // namespace pf::sched

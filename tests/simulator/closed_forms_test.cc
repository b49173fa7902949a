// Closed forms of docs/SCHEDULES.md checked against the simulator on the built-in generators, over a
// grid of p, m, v and per-pass costs (T_comm = 0 unless stated). Bubble measures:
//   * "of wall time": (makespan - ideal) / makespan (SimulationResult::bubble_rate), ideal = the
//     busiest rank's own F+B+W work;
//   * "relative to ideal" (interleaved): (makespan - ideal) / ideal, ideal = v*m*(T_F+T_B+T_W) of
//     one chunk, i.e. the Megatron paper's bubble-time fraction;
//   * "bubble time" (ZB-H1/ZB-H2, the zero-bubble paper's Table 2): the longest rank span minus the
//     ideal, SimulationResult::max_span - ideal (a rank's span runs from its own first action to its
//     last; for ZB-H1, as for 1F1B, it equals makespan - ideal).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/schedules/generators.h"
#include "runtime/schedules/lowering.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/validator.h"

namespace pf::sched {
namespace {

struct Costs {
  double f, b, w;
};
// T_W <= T_F <= T_B is the paper's regime (Table 1); the others probe the edges.
const std::vector<Costs> kCosts = {{1, 1, 1}, {1, 2, 1}, {2, 3, 1}, {1, 1, 0.5}, {3, 2, 1},
                                   {1, 0.5, 0.5}, {1, 1, 2}};
const std::vector<int> kRanks = {1, 2, 3, 4, 8};
const std::vector<int> kMicroBatches = {1, 2, 3, 4, 7, 8, 16, 32};

Schedule gen(const std::string& name, int p, int m, int v = 1) {
  GeneratorOptions o;
  o.ranks = p;
  o.micro_batches = m;
  o.chunks = v;
  return generate_schedule(name, o);
}

std::string where(int p, int m, const Costs& c, int v = 1) {
  return "p=" + std::to_string(p) + " m=" + std::to_string(m) + " v=" + std::to_string(v) +
         " T_F=" + std::to_string(c.f) + " T_B=" + std::to_string(c.b) +
         " T_W=" + std::to_string(c.w);
}

TEST(ClosedForms, GPipeAndOneFOneBBubbleOfWallTime) {
  for (const Costs& c : kCosts)
    for (int p : kRanks)
      for (int m : kMicroBatches) {
        const CostModel cm = CostModel::uniform(p, c.f, c.b, c.w);
        const double want = (p - 1.0) / (m + p - 1.0);
        EXPECT_NEAR(simulate(gen("gpipe", p, m), cm).bubble_rate, want, 1e-12) << where(p, m, c);
        EXPECT_NEAR(simulate(gen("1f1b", p, m), cm).bubble_rate, want, 1e-12) << where(p, m, c);
      }
}

TEST(ClosedForms, InterleavedBubbleRelativeToIdeal) {
  // Megatron's (p-1)/(v*m), for m a multiple of p (Megatron's requirement).
  for (const Costs& c : kCosts)
    for (int p : kRanks)
      for (int v : {2, 3, 4})
        for (int k : {1, 2, 4}) {
          const int m = k * p;
          const SimulationResult r =
              simulate(gen("interleaved-1f1b", p, m, v), CostModel::uniform(p * v, c.f, c.b, c.w));
          EXPECT_DOUBLE_EQ(r.ideal, v * m * (c.f + c.b + c.w));
          EXPECT_NEAR((r.makespan - r.ideal) / r.ideal, (p - 1.0) / (v * m), 1e-12)
              << where(p, m, c, v);
        }
}

TEST(ClosedForms, ZbH1BubbleTime) {
  // (p-1)(T_F + T_B - T_W), for m >= p and T_W <= T_F (W fits where 1F1B idles for an F).
  for (const Costs& c : kCosts) {
    if (c.w > c.f) continue;
    for (int p : kRanks)
      for (int m : kMicroBatches) {
        if (m < p) continue;
        const SimulationResult r = simulate(gen("zb-h1", p, m), CostModel::uniform(p, c.f, c.b, c.w));
        EXPECT_NEAR(r.makespan - r.ideal, (p - 1) * (c.f + c.b - c.w), 1e-9) << where(p, m, c);
        EXPECT_NEAR(r.max_span, r.makespan, 1e-9) << where(p, m, c);
      }
  }
}

TEST(ClosedForms, ZbH1NeverWorseThanOneFOneB) {
  // Outside T_W <= T_F the closed form is not reached (the W's no longer fit the gaps), but ZB-H1
  // still beats or ties 1F1B.
  for (const Costs& c : kCosts)
    for (int p : kRanks)
      for (int m : kMicroBatches) {
        const CostModel cm = CostModel::uniform(p, c.f, c.b, c.w);
        EXPECT_LE(simulate(gen("zb-h1", p, m), cm).makespan,
                  simulate(gen("1f1b", p, m), cm).makespan + 1e-9)
            << where(p, m, c);
      }
}

TEST(ClosedForms, ZbH2BubbleTime) {
  // (p-1)(T_F + T_B - 2 T_W) where that is >= 0, once the 2p-1 warm-up micro-batches exist. The
  // makespan adds the last rank's start-up (p-1) T_F; the span (the paper's measure) does not.
  for (const Costs& c : kCosts) {
    const double per = c.f + c.b - 2 * c.w;
    if (per < 0) continue;
    for (int p : kRanks)
      for (int m : kMicroBatches) {
        if (m < 2 * p - 1) continue;
        const SimulationResult r = simulate(gen("zb-h2", p, m), CostModel::uniform(p, c.f, c.b, c.w));
        EXPECT_NEAR(r.max_span - r.ideal, (p - 1) * per, 1e-9) << where(p, m, c);
      }
  }
}

TEST(ClosedForms, ZbVIsBubbleFreeWithEqualCosts) {
  // T_F = T_B = T_W: every rank is busy from its first action to the end of its span.
  for (int p : {1, 2, 3, 4, 8})
    for (int m : {2 * p, 4 * p}) {
      const SimulationResult r = simulate(gen("zb-v", p, m), CostModel::uniform(2 * p, 1, 1, 1));
      EXPECT_NEAR(r.max_span, r.ideal, 1e-9) << "p=" << p << " m=" << m;
      EXPECT_NEAR(r.span_bubble_rate, 0.0, 1e-12);
    }
}

TEST(ClosedForms, PeakActivations) {
  for (int p : kRanks)
    for (int m : kMicroBatches) {
      // M_B = 3 bytes per stage, M_W = 1 byte.
      const CostModel cm = CostModel::uniform(p, 1, 1, 1, 0, 3.0, 1.0);
      const SimulationResult g = simulate(gen("gpipe", p, m), cm);
      const SimulationResult a = simulate(gen("1f1b", p, m), cm);
      const SimulationResult h = simulate(gen("zb-h1", p, m), cm);
      for (int s = 0; s < p; ++s) {
        const auto i = static_cast<size_t>(s);
        EXPECT_EQ(g.peak_activations[i], m);
        EXPECT_DOUBLE_EQ(g.peak_activation_bytes[i], 3.0 * m);
        EXPECT_EQ(a.peak_activations[i], std::min(p - s, m)) << "p=" << p << " m=" << m;
        EXPECT_DOUBLE_EQ(a.peak_activation_bytes[i], 3.0 * std::min(p - s, m));
        // ZB-H1: the 1F1B count of forwards in flight; rank s also keeps s W's: (p-s)M_B + s M_W.
        EXPECT_EQ(h.peak_activations[i], std::min(p - s, m)) << "p=" << p << " m=" << m;
        if (m >= p) {
          EXPECT_DOUBLE_EQ(h.peak_activation_bytes[i], 3.0 * (p - s) + 1.0 * s)
              << "p=" << p << " m=" << m << " s=" << s;
        }
        EXPECT_LE(h.peak_activation_bytes[i], 3.0 * p);  // never above 1F1B's worst rank
      }
      if (m >= 2 * p - 1) {
        // ZB-H2, rank s: (2p-2s-1) M_B + 2s M_W; the worst rank holds (2p-1) M_B.
        const SimulationResult h2 = simulate(gen("zb-h2", p, m), cm);
        for (int s = 0; s < p; ++s) {
          const auto i = static_cast<size_t>(s);
          EXPECT_EQ(h2.peak_activations[i], 2 * (p - s) - 1);
          EXPECT_DOUBLE_EQ(h2.peak_activation_bytes[i], 3.0 * (2 * (p - s) - 1) + 2.0 * s)
              << "p=" << p << " m=" << m << " s=" << s;
        }
        EXPECT_DOUBLE_EQ(*std::max_element(h2.peak_activation_bytes.begin(),
                                           h2.peak_activation_bytes.end()),
                         3.0 * (2 * p - 1));
      }
    }
}

TEST(ClosedForms, ZbVPeakIsOneFOneBsWorstRank) {
  // Each chunk is half a 1F1B stage: M_B(chunk) = M_B / 2. ZB-V keeps p M_B on every rank.
  for (int p : {2, 3, 4, 8})
    for (int m : {2 * p, 4 * p}) {
      const double mb = 1.0;
      const SimulationResult r =
          simulate(gen("zb-v", p, m), CostModel::uniform(2 * p, 1, 1, 1, 0, mb / 2, 0.0));
      for (int s = 0; s < p; ++s) {
        EXPECT_LE(r.peak_activation_bytes[static_cast<size_t>(s)], p * mb + 1e-12)
            << "p=" << p << " m=" << m << " s=" << s;
        EXPECT_LE(r.peak_activations[static_cast<size_t>(s)], 2 * p);
      }
      EXPECT_DOUBLE_EQ(*std::max_element(r.peak_activation_bytes.begin(),
                                         r.peak_activation_bytes.end()),
                       p * mb);
    }
}

TEST(ClosedForms, LoweredAndUnloweredTimesAgree) {
  for (const char* name : {"gpipe", "1f1b", "interleaved-1f1b", "bfs", "zb-h1", "zb-h2", "zb-v",
                           "zb-auto"}) {
    for (int p : {1, 2, 3, 4}) {
      for (int m : {1, 3, 4, 8}) {
        const std::string n = name;
        const int v = (n == "interleaved-1f1b" || n == "bfs") ? 2 : 1;
        const Schedule s = gen(n, p, m, v);
        const int stages = s.num_stages();
        // Unequal per-stage costs and a real latency.
        CostModel c;
        for (int i = 0; i < stages; ++i) {
          c.t_f.push_back(1.0 + 0.1 * i);
          c.t_b.push_back(1.5 + 0.05 * (i % 3));
          c.t_w.push_back(0.7 + 0.02 * i);
        }
        c.t_comm = 0.13;
        const Schedule lowered = lower_communication(s);
        ASSERT_TRUE(validate(lowered).ok()) << n;
        const SimulationResult a = simulate(s, c);
        const SimulationResult b = simulate(lowered, c);
        EXPECT_DOUBLE_EQ(a.makespan, b.makespan) << n << " p=" << p << " m=" << m;
        EXPECT_DOUBLE_EQ(a.max_span, b.max_span) << n << " p=" << p << " m=" << m;
        for (int r = 0; r < p; ++r) {
          const auto i = static_cast<size_t>(r);
          EXPECT_DOUBLE_EQ(a.busy[i], b.busy[i]);
          EXPECT_EQ(a.peak_activations[i], b.peak_activations[i]);
        }
        if (p > 1) EXPECT_GT(b.timeline.num_actions(), a.timeline.num_actions());
        else EXPECT_EQ(b.timeline.num_actions(), a.timeline.num_actions());
      }
    }
  }
}

}  // namespace
}  // namespace pf::sched

#include "runtime/schedules/generators.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "runtime/schedules/validator.h"
#include "schedule_test_util.h"

namespace pf::sched {
namespace {

using testing::error_of;
using testing::peak_activations;
using testing::peak_in_flight;
using testing::peak_pending_w;
using testing::rank_text;
using testing::warmup_forwards;

std::vector<std::string> all_ranks(const Schedule& s) {
  std::vector<std::string> out;
  for (int r = 0; r < s.num_ranks(); ++r) out.push_back(rank_text(s, r));
  return out;
}

TEST(Registry, BuiltinsAndErrors) {
  const std::vector<std::string> names = generator_names();
  for (const char* n : {"gpipe", "1f1b", "interleaved-1f1b", "bfs", "zb-h1", "zb-h2", "zb-v"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
    EXPECT_TRUE(has_generator(n));
  }
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  const std::string msg = error_of([] { generate_schedule("2f2b", {4, 8}); });
  EXPECT_HAS(msg, "unknown schedule '2f2b' (known: ");
  EXPECT_HAS(msg, "1f1b, bfs, bitpipe, dualpipe-v, gpipe, interleaved-1f1b, interleaved-zb");
  EXPECT_HAS(msg, "zb-h1, zb-h2, zb-v");
  EXPECT_HAS(error_of([] { register_generator("1f1b", [](const GeneratorOptions&) { return Schedule{}; }); }),
             "schedule '1f1b' is already registered");
  EXPECT_HAS(error_of([] { register_generator("", [](const GeneratorOptions&) { return Schedule{}; }); }),
             "empty schedule name");
  EXPECT_HAS(error_of([] { register_generator("nothing", GeneratorFn{}); }), "no function given for 'nothing'");
}

TEST(Registry, RegisteredGeneratorsAreValidated) {
  register_generator("test-gpipe-copy", [](const GeneratorOptions& o) {
    Schedule s = generate_schedule("gpipe", o);
    s.name.clear();  // generate_schedule names it
    return s;
  });
  EXPECT_TRUE(has_generator("test-gpipe-copy"));
  EXPECT_EQ(generate_schedule("test-gpipe-copy", {2, 3}).name, "test-gpipe-copy");

  register_generator("test-broken", [](const GeneratorOptions& o) {
    Schedule s = generate_schedule("1f1b", o);
    s.ranks[0].pop_back();  // drop a STEP... and the last BW
    s.ranks[0].pop_back();
    return s;
  });
  try {
    generate_schedule("test-broken", {2, 2});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    EXPECT_HAS(e.what(), "generator 'test-broken' (ranks 2, micro_batches 2, chunks 1) produced an invalid schedule");
    EXPECT_HAS(e.what(), "missing the backward of micro-batch 1 on stage 0");
  }
}

// Chunks 0 (the default of every front-end) is the schedule's own: 2 for the looped and V schedules
// (1 would not interleave), 1 for the others. compare used 2 and train 1 for the same name.
TEST(Generators, ZeroChunksIsTheSchedulesDefault) {
  for (const std::string& name : generator_names()) {
    const ScheduleTraits traits = schedule_traits(name);
    if (name.rfind("test-", 0) == 0 || traits.cost_driven || traits.windowed()) continue;
    GeneratorOptions o;
    o.ranks = 2;
    o.micro_batches = 4;
    const Schedule by_default = generate_schedule(name, o);
    o.chunks = traits.default_chunks();
    EXPECT_EQ(by_default.num_stages(), generate_schedule(name, o).num_stages()) << name;
    EXPECT_EQ(traits.default_chunks(), traits.chunks == ChunkRule::kOne ? 1 : 2) << name;
  }
  GeneratorOptions o;
  o.ranks = 2;
  o.micro_batches = 4;
  EXPECT_EQ(generate_schedule("interleaved-1f1b", o).num_stages(), 4);
  EXPECT_EQ(generate_schedule("1f1b", o).num_stages(), 2);
  o.chunks = 3;
  EXPECT_EQ(generate_schedule("interleaved-1f1b", o).num_stages(), 6);
}

TEST(Generators, ImpossibleOptionsSayWhy) {
  EXPECT_HAS(error_of([] { generate_schedule("1f1b", {0, 4}); }), "1f1b: ranks must be >= 1, got 0");
  EXPECT_HAS(error_of([] { generate_schedule("gpipe", {2, 0}); }), "gpipe: micro_batches must be >= 1, got 0");
  EXPECT_HAS(error_of([] { generate_schedule("bfs", {2, 2, -1}); }),
             "bfs: chunks must be >= 1 (or 0 for the schedule's default), got -1");
  for (const char* n : {"gpipe", "1f1b", "zb-h1", "zb-h2"}) {
    EXPECT_HAS(error_of([&] { generate_schedule(n, {4, 8, 2}); }),
               std::string(n) + " places one stage per rank: chunks must be 1, got 2");
  }
  EXPECT_HAS(error_of([] { generate_schedule("zb-v", {4, 8, 3}); }),
             "zb-v always has 2 chunks per rank (V placement); chunks must be 2");
  GeneratorOptions rev{2, 2};
  rev.reverse_backward = true;
  EXPECT_HAS(error_of([&] { generate_schedule("1f1b", rev); }), "reverse_backward applies to bfs only");
  EXPECT_HAS(error_of([] { generate_schedule("1f1b", {1 << 12, 1 << 12}); }),
             "is more than the limit of");
}

TEST(Generators, GPipe) {
  EXPECT_EQ(all_ranks(generate_schedule("gpipe", {2, 3})),
            (std::vector<std::string>{"0F0 0F1 0F2 0BW0 0BW1 0BW2 0STEP", "1F0 1F1 1F2 1BW0 1BW1 1BW2 1STEP"}));
}

TEST(Generators, OneFOneBRanksOfP4M8) {
  const Schedule s = generate_schedule("1f1b", {4, 8});
  EXPECT_EQ(s.placement, Placement::one_per_rank(4));
  EXPECT_EQ(all_ranks(s), (std::vector<std::string>{
                              "0F0 0F1 0F2 0F3 0BW0 0F4 0BW1 0F5 0BW2 0F6 0BW3 0F7 0BW4 0BW5 0BW6 0BW7 0STEP",
                              "1F0 1F1 1F2 1BW0 1F3 1BW1 1F4 1BW2 1F5 1BW3 1F6 1BW4 1F7 1BW5 1BW6 1BW7 1STEP",
                              "2F0 2F1 2BW0 2F2 2BW1 2F3 2BW2 2F4 2BW3 2F5 2BW4 2F6 2BW5 2F7 2BW6 2BW7 2STEP",
                              "3F0 3BW0 3F1 3BW1 3F2 3BW2 3F3 3BW3 3F4 3BW4 3F5 3BW5 3F6 3BW6 3F7 3BW7 3STEP",
                          }));
}

TEST(Generators, OneFOneBFewerMicroBatchesThanRanks) {
  // m < p: the warm-up is capped at m, so the first ranks run GPipe-like.
  EXPECT_EQ(all_ranks(generate_schedule("1f1b", {4, 2})),
            (std::vector<std::string>{"0F0 0F1 0BW0 0BW1 0STEP", "1F0 1F1 1BW0 1BW1 1STEP",
                                      "2F0 2F1 2BW0 2BW1 2STEP", "3F0 3BW0 3F1 3BW1 3STEP"}));
}

TEST(Generators, WarmUpAndPeakInFlight) {
  for (int p = 1; p <= 8; ++p) {
    for (int m : {1, 2, 3, 5, 8, 12, 17}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const Schedule gp = generate_schedule("gpipe", {p, m});
      const Schedule fb = generate_schedule("1f1b", {p, m});
      const Schedule h1 = generate_schedule("zb-h1", {p, m});
      const Schedule h2 = generate_schedule("zb-h2", {p, m});
      const Schedule zv = generate_schedule("zb-v", {p, m});
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(warmup_forwards(gp, s), m);
        EXPECT_EQ(peak_in_flight(gp, s), m);
        // 1f1b: min(p-s-1, m) warm-up forwards plus the first pair's F.
        EXPECT_EQ(warmup_forwards(fb, s), std::min(p - s, m));
        EXPECT_EQ(peak_in_flight(fb, s), std::min(p - s, m));
        // zb-h1: 1F1B's activations, plus up to s pending W's (plus the W of the B just run).
        EXPECT_EQ(warmup_forwards(h1, s), std::min(p - s, m));
        EXPECT_EQ(peak_activations(h1, s), std::min(p - s, m));
        EXPECT_EQ(peak_pending_w(h1, s), std::min(s + 1, m));
        // zb-h2: 2(p-s)-1 forwards in flight when the first B arrives; up to 2s pending W's.
        EXPECT_EQ(warmup_forwards(h2, s), std::min(2 * (p - s) - 1, m));
        EXPECT_EQ(peak_activations(h2, s), std::min(2 * (p - s) - 1, m));
        EXPECT_LE(peak_pending_w(h2, s), std::min(2 * s + 1, m));
        // zb-v: at most 2p chunk activations (= p full-stage activations, like 1F1B's rank 0).
        EXPECT_LE(peak_activations(zv, s), 2 * p);
        if (m >= 2 * p - 1) {
          EXPECT_EQ(peak_activations(zv, s), 2 * p);
        }
      }
      for (int v = 1; v <= 4; ++v) {
        const Schedule bf = generate_schedule("bfs", {p, m, v});
        const Schedule il = generate_schedule("interleaved-1f1b", {p, m, v});
        const int g0 = m % p == 0 ? p : (m < p ? m : m / (m / p) + (m % (m / p) ? 1 : 0));
        for (int s = 0; s < p; ++s) {
          EXPECT_EQ(peak_in_flight(bf, s), v * m);
          const int warm = std::min(2 * (p - s - 1) + (v - 1) * g0, v * m);
          EXPECT_EQ(warmup_forwards(il, s), std::min(warm + 1, v * m)) << "v=" << v << " s=" << s;
          EXPECT_EQ(peak_in_flight(il, s), std::min(warm + 1, v * m)) << "v=" << v << " s=" << s;
        }
      }
    }
  }
}

// Megatron's rule for m % p == 0: the k-th forward uses chunk (k mod pv) div p and micro-batch
// (k div pv) * p + k mod p; the k-th backward chunk v-1-(k mod pv) div p, same micro-batch.
TEST(Generators, InterleavedFollowsMegatronWhenPDividesM) {
  for (int p : {1, 2, 3, 4}) {
    for (int v : {1, 2, 3}) {
      for (int m : {p, 2 * p, 4 * p}) {
        const Schedule s = generate_schedule("interleaved-1f1b", {p, m, v});
        EXPECT_EQ(s.placement, Placement::looped(p, v));
        for (int r = 0; r < p; ++r) {
          int fk = 0, bk = 0;
          for (const Action& a : s.ranks[static_cast<size_t>(r)]) {
            const int k = a.kind == ActionKind::kForward ? fk : bk;
            const int chunk_fwd = (k % (p * v)) / p;
            const int mb = (k / (p * v)) * p + k % p;
            if (a.kind == ActionKind::kForward) {
              EXPECT_EQ(a.stage, chunk_fwd * p + r);
              EXPECT_EQ(a.micro_batch, mb);
              ++fk;
            } else if (a.kind == ActionKind::kBackward) {
              EXPECT_EQ(a.stage, (v - 1 - chunk_fwd) * p + r);
              EXPECT_EQ(a.micro_batch, mb);
              ++bk;
            }
          }
          const int warm = std::min(2 * (p - r - 1) + (v - 1) * p, v * m);
          EXPECT_EQ(warmup_forwards(s, r), std::min(warm + 1, v * m));
        }
      }
    }
  }
}

TEST(Generators, InterleavedSmallExample) {
  EXPECT_EQ(all_ranks(generate_schedule("interleaved-1f1b", {2, 4, 2})),
            (std::vector<std::string>{
                "0F0 0F1 2F0 2F1 0F2 2BW0 0F3 2BW1 2F2 0BW0 2F3 0BW1 2BW2 2BW3 2STEP 0BW2 0BW3 0STEP",
                "1F0 1F1 3F0 3BW0 3F1 3BW1 1F2 1BW0 1F3 1BW1 3F2 3BW2 3F3 3BW3 3STEP 1BW2 1BW3 1STEP"}));
}

// Forward (micro-batch, chunk) sequence of rank 0.
std::vector<std::pair<int, int>> forward_units(const Schedule& s, int p) {
  std::vector<std::pair<int, int>> out;
  for (const Action& a : s.ranks[0]) {
    if (a.kind == ActionKind::kForward) out.emplace_back(a.micro_batch, a.stage / p);
  }
  return out;
}

TEST(Generators, InterleavedNonDivisibleGroups) {
  // m < p: one group of m micro-batches goes through chunk 0, then chunk 1.
  EXPECT_EQ(forward_units(generate_schedule("interleaved-1f1b", {4, 3, 2}), 4),
            (std::vector<std::pair<int, int>>{{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1}, {2, 1}}));
  // m = 9, p = 4: two groups (5, 4), each at least p.
  const auto u = forward_units(generate_schedule("interleaved-1f1b", {4, 9, 2}), 4);
  const std::vector<std::pair<int, int>> expect = {{0, 0}, {1, 0}, {2, 0}, {3, 0}, {4, 0}, {0, 1},
                                                   {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 0}, {6, 0},
                                                   {7, 0}, {8, 0}, {5, 1}, {6, 1}, {7, 1}, {8, 1}};
  EXPECT_EQ(u, expect);
  // m = 10, p = 4: groups of 5, as PyTorch's ScheduleInterleaved1F1B; warm-up 2(p-s-1) + (v-1)*5.
  const Schedule s = generate_schedule("interleaved-1f1b", {4, 10, 2});
  for (int r = 0; r < 4; ++r) EXPECT_EQ(warmup_forwards(s, r), 2 * (4 - r - 1) + 5 + 1);
}

TEST(Generators, Bfs) {
  EXPECT_EQ(all_ranks(generate_schedule("bfs", {2, 2, 2})),
            (std::vector<std::string>{"0F0 0F1 2F0 2F1 2BW0 2BW1 2STEP 0BW0 0BW1 0STEP",
                                      "1F0 1F1 3F0 3F1 3BW0 3BW1 3STEP 1BW0 1BW1 1STEP"}));
  GeneratorOptions o{2, 3, 2};
  o.reverse_backward = true;
  const Schedule rev = generate_schedule("bfs", o);
  EXPECT_EQ(rank_text(rev, 1), "1F0 1F1 1F2 3F0 3F1 3F2 3BW2 3BW1 3BW0 3STEP 1BW2 1BW1 1BW0 1STEP");
  const ValidationReport report = validate(rev);
  EXPECT_TRUE(report.ok());
  ASSERT_EQ(report.notes.size(), 4u);
  EXPECT_HAS(report.notes[0], "stage 0 accumulates weight gradients out of micro-batch order (2 1 0)");
}

TEST(Generators, ZeroBubbleH1MatchesPyTorchOrder) {
  // Rank s keeps s W's pending (PyTorch's zero-bubble 1F1B order for one chunk per rank).
  EXPECT_EQ(all_ranks(generate_schedule("zb-h1", {3, 4})),
            (std::vector<std::string>{"0F0 0F1 0F2 0B0 0W0 0F3 0B1 0W1 0B2 0W2 0B3 0W3 0STEP",
                                      "1F0 1F1 1B0 1F2 1B1 1W0 1F3 1B2 1W1 1B3 1W2 1W3 1STEP",
                                      "2F0 2B0 2F1 2B1 2F2 2B2 2W0 2F3 2B3 2W1 2W2 2W3 2STEP"}));
}

TEST(Generators, ZeroBubbleH2) {
  EXPECT_EQ(all_ranks(generate_schedule("zb-h2", {3, 6})),
            (std::vector<std::string>{
                "0F0 0F1 0F2 0F3 0F4 0B0 0W0 0F5 0B1 0W1 0B2 0W2 0B3 0W3 0B4 0W4 0B5 0W5 0STEP",
                "1F0 1F1 1F2 1B0 1F3 1B1 1F4 1B2 1W0 1F5 1B3 1W1 1B4 1W2 1B5 1W3 1W4 1W5 1STEP",
                "2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3 2F4 2B4 2W0 2F5 2B5 2W1 2W2 2W3 2W4 2W5 2STEP"}));
}

TEST(Generators, ZeroBubbleV) {
  const Schedule s = generate_schedule("zb-v", {3, 5});
  EXPECT_EQ(s.placement, Placement::v_shape(3));
  EXPECT_EQ(all_ranks(s),
            (std::vector<std::string>{
                "0F0 0F1 0F2 0F3 0F4 5F0 5B0 5W0 5F1 5B1 5W1 5F2 5B2 5W2 0B0 0W0 5F3 5B3 5W3 0B1 0W1 "
                "5F4 5B4 5W4 5STEP 0B2 0W2 0B3 0W3 0B4 0W4 0STEP",
                "1F0 1F1 1F2 4F0 1F3 4F1 4B0 4W0 4F2 4B1 4W1 1F4 1B0 1W0 4F3 4B2 4W2 1B1 1W1 4F4 4B3 "
                "4W3 1B2 4B4 1B3 1W2 1B4 1W3 4W4 4STEP 1W4 1STEP",
                "2F0 3F0 2F1 3F1 2F2 3F2 3B0 3W0 2F3 2B0 2W0 3F3 3B1 3W1 2F4 2B1 2W1 3F4 3B2 3W2 2B2 "
                "3B3 2B3 3B4 2B4 2W2 3W3 3W4 3STEP 2W3 2W4 2STEP"}));
  // Chunk 0 warm-up: 2(p-s)-1 forwards before the first chunk-1 forward.
  for (int r = 0; r < 3; ++r) {
    int n = 0;
    for (const Action& a : s.ranks[static_cast<size_t>(r)]) {
      if (a.stage != r) break;
      ++n;
    }
    EXPECT_EQ(n, 2 * (3 - r) - 1);
  }
}

TEST(Generators, StepsAndWeightOrder) {
  for (const std::string name : {"gpipe", "1f1b", "interleaved-1f1b", "bfs", "zb-h1", "zb-h2", "zb-v"}) {
    const bool multi = name == "interleaved-1f1b" || name == "bfs";
    for (int v = 1; v <= (multi ? 3 : 1); ++v) {
      const Schedule s = generate_schedule(name, {4, 6, v});
      for (int st = 0; st < s.num_stages(); ++st) {
        const std::vector<int> order = weight_gradient_order(s, st);
        std::vector<int> expect(6);
        for (int i = 0; i < 6; ++i) expect[static_cast<size_t>(i)] = i;
        EXPECT_EQ(order, expect) << name << " stage " << st;
      }
      for (int r = 0; r < s.num_ranks(); ++r) {
        const auto& list = s.ranks[static_cast<size_t>(r)];
        EXPECT_EQ(list.back().kind, ActionKind::kStep) << name;
        int steps = 0;
        for (const Action& a : list) steps += a.kind == ActionKind::kStep;
        EXPECT_EQ(steps, static_cast<int>(s.placement.stages_of(r).size())) << name;
      }
      EXPECT_TRUE(validate(s).notes.empty()) << name;
    }
  }
}

TEST(Generators, OneRankAndOneMicroBatch) {
  EXPECT_EQ(rank_text(generate_schedule("1f1b", {1, 3}), 0), "0F0 0BW0 0F1 0BW1 0F2 0BW2 0STEP");
  EXPECT_EQ(rank_text(generate_schedule("zb-h2", {1, 2}), 0), "0F0 0B0 0W0 0F1 0B1 0W1 0STEP");
  EXPECT_EQ(rank_text(generate_schedule("zb-v", {1, 2}), 0),
            "0F0 1F0 1B0 1W0 0F1 0B0 0W0 1F1 1B1 1W1 1STEP 0B1 0W1 0STEP");
  EXPECT_EQ(rank_text(generate_schedule("interleaved-1f1b", {1, 2, 2}), 0),
            "0F0 1F0 1BW0 0F1 0BW0 1F1 1BW1 1STEP 0BW1 0STEP");
  EXPECT_EQ(all_ranks(generate_schedule("zb-h1", {3, 1})),
            (std::vector<std::string>{"0F0 0B0 0W0 0STEP", "1F0 1B0 1W0 1STEP", "2F0 2B0 2W0 2STEP"}));
}

}  // namespace
}  // namespace pf::sched

namespace pf::sched {
namespace {

// Unit-cost clock (T_F = T_B = T_W = 1, BW = 2, no transfer time): each rank runs its list in order,
// an action starts when its rank is free and its producer on the neighbouring stage has finished.
// Returns {makespan from time 0, longest per-rank span from first start to last end}.
std::pair<int, int> unit_clock(const Schedule& s) {
  const int R = s.num_ranks();
  std::map<std::tuple<int, int, int>, int> end;  // (kind, stage, mb) -> end time
  std::vector<size_t> ptr(static_cast<size_t>(R), 0);
  std::vector<int> free_at(static_cast<size_t>(R), 0), first(static_cast<size_t>(R), -1);
  auto key = [](ActionKind k, int st, int mb) { return std::make_tuple(static_cast<int>(k), st, mb); };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < R; ++r) {
      const auto& list = s.ranks[static_cast<size_t>(r)];
      size_t& p = ptr[static_cast<size_t>(r)];
      for (; p < list.size(); ++p) {
        const Action& a = list[p];
        int t = free_at[static_cast<size_t>(r)];
        if (a.kind == ActionKind::kForward && a.stage > 0) {
          auto it = end.find(key(ActionKind::kForward, a.stage - 1, a.micro_batch));
          if (it == end.end()) break;
          t = std::max(t, it->second);
        }
        if ((a.kind == ActionKind::kBackwardInput || a.kind == ActionKind::kBackward) &&
            a.stage + 1 < s.num_stages()) {
          auto it = end.find(key(a.kind, a.stage + 1, a.micro_batch));
          if (it == end.end()) break;
          t = std::max(t, it->second);
        }
        const int cost = a.kind == ActionKind::kBackward ? 2 : a.kind == ActionKind::kStep ? 0 : 1;
        if (first[static_cast<size_t>(r)] < 0) first[static_cast<size_t>(r)] = t;
        end[key(a.kind, a.stage, a.micro_batch)] = t + cost;
        free_at[static_cast<size_t>(r)] = t + cost;
        progress = true;
      }
    }
  }
  int makespan = 0, span = 0;
  for (int r = 0; r < R; ++r) {
    EXPECT_EQ(ptr[static_cast<size_t>(r)], s.ranks[static_cast<size_t>(r)].size()) << "stalled";
    makespan = std::max(makespan, free_at[static_cast<size_t>(r)]);
    span = std::max(span, free_at[static_cast<size_t>(r)] - first[static_cast<size_t>(r)]);
  }
  return {makespan, span};
}

TEST(Generators, BubblesOnAUnitCostClock) {
  for (int p = 1; p <= 6; ++p) {
    for (int m : {p, 2 * p, 2 * p + 3, 4 * p}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const int work = 3 * m;  // F + B + W per micro-batch
      EXPECT_EQ(unit_clock(generate_schedule("1f1b", {p, m})).first, work + 3 * (p - 1));
      EXPECT_EQ(unit_clock(generate_schedule("gpipe", {p, m})).first, work + 3 * (p - 1));
      // zb-h1: (p-1)(T_F + T_B - T_W).
      EXPECT_EQ(unit_clock(generate_schedule("zb-h1", {p, m})).first, work + (p - 1));
      if (m >= 2 * p - 1) {
        // zb-h2: (p-1)(T_F + T_B - 2 T_W) = 0 per rank span; the last rank starts (p-1) T_F late.
        const auto [makespan, span] = unit_clock(generate_schedule("zb-h2", {p, m}));
        EXPECT_EQ(span, work);
        EXPECT_EQ(makespan, work + (p - 1));
        // zb-v: two chunks per rank, each costing 1 per F/B/W: zero bubble per rank span.
        EXPECT_EQ(unit_clock(generate_schedule("zb-v", {p, m})).second, 2 * work);
      }
    }
  }
}

}  // namespace
}  // namespace pf::sched

// bitpipe: two mirrored V pipelines over the same ranks (Schedule::pipelines = 2). The placement,
// the micro-batch split, eager ALLREDUCEs with the STEPs last, the memory bound, and its unit-cost
// makespan against the schedules with the same chunk granularity; plus what the validator says
// about two-pipeline schedules that break the rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "runtime/schedules/bitpipe.h"
#include "runtime/schedules/generators.h"
#include "runtime/schedules/lowering.h"
#include "runtime/schedules/pytorch_format.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/text_format.h"
#include "runtime/schedules/validator.h"
#include "schedule_test_util.h"

namespace pf::sched {
namespace {

double makespan(const Schedule& s) { return simulate(s, CostModel::uniform(s.num_stages())).makespan; }

TEST(BitPipe, PlacementMirrorsTwoVs) {
  const Placement pl = bitpipe_placement(4);
  ASSERT_EQ(pl.num_stages(), 16);
  const std::vector<int> down = {0, 1, 2, 3, 3, 2, 1, 0}, up = {3, 2, 1, 0, 0, 1, 2, 3};
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(pl.rank_of(j), down[static_cast<size_t>(j)]) << j;
    EXPECT_EQ(pl.rank_of(8 + j), up[static_cast<size_t>(j)]) << j;
  }
  for (int r = 0; r < 4; ++r) EXPECT_EQ(pl.stages_of(r).size(), 4u);
}

TEST(BitPipe, SplitsTheMicroBatchesAndSynchronisesEagerly) {
  for (int p = 1; p <= 6; ++p) {
    for (int m = 2; m <= 16; m += 2) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const Schedule s = generate_schedule("bitpipe", {p, m, 1});
      ASSERT_EQ(s.pipelines, 2);
      ASSERT_EQ(s.num_stages(), 4 * p);
      ASSERT_TRUE(validate(s).ok()) << validate(s).to_string();
      ASSERT_TRUE(validate(lower_communication(s)).ok());
      for (int r = 0; r < p; ++r) {
        const auto& list = s.ranks[static_cast<size_t>(r)];
        // The four STEPs close the list; each ALLREDUCE follows its stage's last BW at once.
        for (size_t i = list.size() - 4; i < list.size(); ++i) EXPECT_EQ(list[i].kind, ActionKind::kStep);
        for (size_t i = 0; i < list.size(); ++i) {
          const Action& a = list[i];
          if (a.kind == ActionKind::kForward || a.kind == ActionKind::kBackward) {
            EXPECT_EQ(s.pipeline_of_micro_batch(a.micro_batch), s.pipeline_of_stage(a.stage)) << action_to_string(a);
          }
          if (a.kind != ActionKind::kAllReduce) continue;
          const bool after_last_bw = [&] {
            for (size_t k = i; k-- > 0;) {
              if (list[k].kind == ActionKind::kAllReduce) continue;
              return list[k].kind == ActionKind::kBackward && list[k].stage == a.stage &&
                     s.pipeline_of_micro_batch(list[k].micro_batch + 1) != s.pipeline_of_stage(a.stage);
            }
            return false;
          }();
          EXPECT_TRUE(after_last_bw) << "rank " << r << ": " << action_to_string(a) << " is not right after its last BW";
        }
      }
      // Weight gradients in micro-batch order on every stage (bitwise equality with the reference).
      for (int st = 0; st < s.num_stages(); ++st) {
        const std::vector<int> order = weight_gradient_order(s, st);
        EXPECT_TRUE(std::is_sorted(order.begin(), order.end())) << "stage " << st;
        EXPECT_EQ(static_cast<int>(order.size()), m / 2);
      }
    }
  }
}

// A rank holds at most cap (<= p) micro-batches of each pipeline, each on at most two of its
// chunks: 4p chunk contexts, whatever m.
TEST(BitPipe, ActivationMemoryIsBoundedIndependentlyOfTheMicroBatches) {
  for (int p = 1; p <= 8; ++p) {
    for (int m : {2, 8, 32, 64}) {
      const Schedule s = generate_schedule("bitpipe", {p, m, 1});
      const SimulationResult r = simulate(s, CostModel::uniform(4 * p));
      for (int peak : r.peak_activations) EXPECT_LE(peak, 4 * p) << "p=" << p << " m=" << m;
    }
  }
}

// Unit costs per chunk (F 1, BW 2): with an even number of ranks, never longer than the
// interleaved 1F1B with two chunks per rank (the same chunk size) nor than 1F1B.
TEST(BitPipe, NeverLongerThanInterleavedOneFOneB) {
  int shorter = 0;
  for (int p = 2; p <= 8; p += 2) {
    for (int m = p; m <= 4 * p; m += 2) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const double bit = makespan(generate_schedule("bitpipe", {p, m, 1}));
      const double interleaved = makespan(generate_schedule("interleaved-1f1b", {p, m, 2}));
      // 1F1B's stages are two chunks each: the same model, the same unit.
      const double one_f_one_b =
          simulate(generate_schedule("1f1b", {p, m, 1}), CostModel::uniform(p, 2.0, 2.0, 2.0)).makespan;
      EXPECT_LE(bit, interleaved);
      EXPECT_LE(bit, one_f_one_b);
      shorter += bit < interleaved;
    }
  }
  EXPECT_GT(shorter, 0);
}

TEST(BitPipe, KnownMakespans) {
  // Ideal 3 m (2p chunks x 3 units x m micro-batches / p ranks / 2 ... = 6 m / 2): p = 2 has no bubble.
  EXPECT_EQ(makespan(generate_schedule("bitpipe", {2, 8, 1})), 48.0);
  EXPECT_EQ(makespan(generate_schedule("bitpipe", {4, 4, 1})), 28.0);  // zb-v 30, interleaved-1f1b 33
}

TEST(BitPipe, TextFormCarriesThePipelines) {
  const Schedule s = lower_communication(generate_schedule("bitpipe", {2, 4, 1}));
  const std::string text = schedule_to_text(s);
  EXPECT_NE(text.find("pipelines: 2"), std::string::npos) << text;
  EXPECT_EQ(parse_schedule(text), s);
}

TEST(BitPipe, PyTorchCsvRefusesTwoPipelines) {
  try {
    schedule_to_pytorch_csv(generate_schedule("bitpipe", {2, 4, 1}), false);
    FAIL() << "written";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 pipelines"), std::string::npos) << e.what();
  }
}

TEST(BitPipe, RefusesOddMicroBatchesAndOtherChunks) {
  try {
    generate_schedule("bitpipe", {2, 3, 1});
    FAIL() << "odd m accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("micro_batches must be even"), std::string::npos) << e.what();
  }
  EXPECT_THROW(generate_schedule("bitpipe", {2, 4, 3}), Error);
}

// Two pipelines of two stages each on two ranks, one micro-batch each.
Schedule two_pipelines(const std::vector<std::string>& lists) {
  Schedule s = testing::from_lists(lists, 2, Placement::custom(2, {0, 1, 1, 0}));
  s.pipelines = 2;
  return s;
}

TEST(BitPipeValidator, AcceptsTheSmallestCase) {
  const Schedule s = two_pipelines({"0F0 3F1 3BW1 3ALLREDUCE 0BW0 0ALLREDUCE 0STEP 3STEP",
                                    "1F0 2F1 1BW0 1ALLREDUCE 2BW1 2ALLREDUCE 1STEP 2STEP"});
  EXPECT_TRUE(validate(s).ok()) << validate(s).to_string();
  EXPECT_TRUE(validate(lower_communication(s)).ok());
}

TEST(BitPipeValidator, NamesTheBrokenRules) {
  auto errors = [](const Schedule& s) { return validate(s).to_string(); };
  // A micro-batch of the first pipeline on a stage of the second.
  EXPECT_NE(errors(two_pipelines({"0F0 3F0 3BW0 3ALLREDUCE 0BW0 0ALLREDUCE 0STEP 3STEP",
                                  "1F0 2F1 1BW0 1ALLREDUCE 2BW1 2ALLREDUCE 1STEP 2STEP"}))
                .find("micro-batch 0 belongs to pipeline 0 but stage 3 to pipeline 1"),
            std::string::npos);
  // A stage without its ALLREDUCE: its copy would step on half the gradient.
  EXPECT_NE(errors(two_pipelines({"0F0 3F1 3BW1 3ALLREDUCE 0BW0 0STEP 3STEP",
                                  "1F0 2F1 1BW0 1ALLREDUCE 2BW1 2ALLREDUCE 1STEP 2STEP"}))
                .find("stage 0 has no 0ALLREDUCE"),
            std::string::npos);
  // A SEND across the pipelines' boundary.
  Schedule cross = lower_communication(two_pipelines({"0F0 3F1 3BW1 3ALLREDUCE 0BW0 0ALLREDUCE 0STEP 3STEP",
                                                      "1F0 2F1 1BW0 1ALLREDUCE 2BW1 2ALLREDUCE 1STEP 2STEP"}));
  cross.ranks[1].insert(cross.ranks[1].begin() + 1, Action{ActionKind::kSendF, 1, 0});
  EXPECT_NE(errors(cross).find("stage 1 has no"), std::string::npos) << errors(cross);
  // STEP waits for the sibling's ALLREDUCE: each rank stepping one stage before it sends the
  // gradients the other rank's STEP waits for deadlocks.
  const std::string dead = errors(two_pipelines({"0F0 3F1 3BW1 0BW0 0ALLREDUCE 0STEP 3ALLREDUCE 3STEP",
                                                 "1F0 2F1 1BW0 2BW1 1ALLREDUCE 1STEP 2ALLREDUCE 2STEP"}));
  EXPECT_NE(dead.find("deadlock"), std::string::npos) << dead;
}

}  // namespace
}  // namespace pf::sched

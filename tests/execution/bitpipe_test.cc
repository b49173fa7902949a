// BitPipe (schedule "bitpipe", two pipelines over the same ranks): the two copies of the model
// train on half of the micro-batches each and add each other's gradients, which is the arithmetic
// SequentialTrainer does for two data-parallel replicas (replicas 2, micro_batches m/2). So the
// parameters after every step must be bitwise equal to that reference, and the second copy's to
// the first's.
#include <gtest/gtest.h>

#include <string>

#include "runtime/checkpoint/sharded_checkpoint.h"
#include "runtime/execution/pipeline_trainer.h"
#include "tests/execution/test_util.h"

namespace pf::exec {
namespace {

using testing::data_for;

// The MLP, the GPT, or the GPT with its head tied to the token embedding (GPT-2's form: the pair
// on the first and the last stage of each copy).
enum class Kind { kMlp, kGpt, kTiedGpt };
std::shared_ptr<Model> make_model(Kind kind) {
  return kind == Kind::kMlp ? testing::tiny_mlp(8) : testing::tiny_gpt(8, 0, kind == Kind::kTiedGpt);
}
std::shared_ptr<Model> make_model(bool gpt) { return make_model(gpt ? Kind::kGpt : Kind::kMlp); }

// The reference of a bitpipe run with m micro-batches: two replicas of m/2.
TrainerOptions reference_options(const TrainerOptions& base) {
  TrainerOptions o = base;
  o.micro_batches = base.micro_batches / 2;
  o.replicas = 2;
  return o;
}

PipelineOptions bitpipe_options(int ranks, int m, int variant) {
  PipelineOptions o;
  o.base = testing::varied_options(m, variant);
  o.schedule = "bitpipe";
  o.ranks = ranks;
  return o;
}

// "" when `steps` steps of both trainers give the same losses, norms and parameters bitwise.
std::string compare(Kind kind, const PipelineOptions& popts, int steps = 3) {
  SequentialTrainer ref(make_model(kind), reference_options(popts.base));
  PipelineTrainer pipe(make_model(kind), popts);
  for (int step = 0; step < steps; ++step) {
    const Batch batch = data_for(ref.model(), popts.base.micro_batches, step);
    const StepResult a = ref.step(batch);
    const StepResult b = pipe.step(batch);
    if (a.loss != b.loss)
      return "loss differs at step " + std::to_string(step) + ": " + std::to_string(a.loss) + " vs " +
             std::to_string(b.loss);
    if (a.grad_norm != b.grad_norm) return "grad norm differs at step " + std::to_string(step);
  }
  std::string diff;
  if (!testing::parameters_bitwise_equal(ref.model(), pipe.model(), &diff)) return "parameter " + diff + " differs";
  if (pipe.parts().stages.copy() == nullptr) return "no second copy of the model";
  if (!testing::parameters_bitwise_equal(pipe.model(), *pipe.parts().stages.copy(), &diff))
    return "the second copy's " + diff + " differs from the first's";
  return "";
}
std::string compare(bool gpt, const PipelineOptions& popts, int steps = 3) {
  return compare(gpt ? Kind::kGpt : Kind::kMlp, popts, steps);
}

class BitPipeEquivalence : public ::testing::TestWithParam<std::tuple<bool, int, int>> {};

TEST_P(BitPipeEquivalence, BitwiseEqualToTwoReplicas) {
  const auto [gpt, ranks, m] = GetParam();
  for (int variant = 0; variant < 4; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    EXPECT_EQ(compare(gpt, bitpipe_options(ranks, m, variant)), "");
  }
}

INSTANTIATE_TEST_SUITE_P(Settings, BitPipeEquivalence,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(1, 2, 3, 4), ::testing::Values(2, 4, 8)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "gpt" : "mlp") + "_p" +
                                  std::to_string(std::get<1>(info.param)) + "_m" + std::to_string(std::get<2>(info.param));
                         });

// Weights tied across stages: each copy's head and token embedding get the sum of the two
// pipelines' gradients from the sibling exchange, then their pair's sum at the barrier — what
// SequentialTrainer does for two replicas (replicas first, then the pair): bitwise, and the second
// copy's tied pair stays equal to the first's.
TEST(BitPipe, TiedHeadBitwiseEqualToTwoReplicas) {
  for (int ranks : {1, 2, 3, 4})
    for (int m : {2, 4}) {
      SCOPED_TRACE("p " + std::to_string(ranks) + ", m " + std::to_string(m));
      for (int variant = 0; variant < 4; ++variant)
        EXPECT_EQ(compare(Kind::kTiedGpt, bitpipe_options(ranks, m, variant)), "") << "variant " << variant;
    }
}

// The sibling exchange is what keeps the copies equal: a bitpipe schedule is a different
// arithmetic from one pipeline over all micro-batches, and the test can tell them apart.
TEST(BitPipe, DiffersFromOneReplicaOfAllMicroBatches) {
  PipelineOptions popts = bitpipe_options(2, 4, 0);
  popts.base.optimizer.clip_norm = 0.0f;
  SequentialTrainer one_replica(make_model(true), popts.base);
  PipelineTrainer pipe(make_model(true), popts);
  for (int step = 0; step < 3; ++step) {
    const Batch batch = data_for(one_replica.model(), 4, step);
    one_replica.step(batch);
    pipe.step(batch);
  }
  std::string diff;
  EXPECT_FALSE(testing::parameters_bitwise_equal(one_replica.model(), pipe.model(), &diff));
}

TEST(BitPipe, ActivationPoliciesKeepBitwiseEquality) {
  for (const char* policy : {"recompute", "offload-host"}) {
    SCOPED_TRACE(policy);
    PipelineOptions popts = bitpipe_options(2, 4, 1);
    popts.activation_policy = policy;
    EXPECT_EQ(compare(true, popts), "");
  }
}

// A checkpoint holds the first copy; loading it brings the second copy (values and optimizer
// state) along before the next step, so a resumed run continues bitwise.
TEST(BitPipe, ResumesFromACheckpointBitwise) {
  PipelineOptions popts = bitpipe_options(2, 4, 0);  // AdamW: optimizer state matters
  PipelineTrainer first(make_model(true), popts);
  for (int step = 0; step < 2; ++step) first.step(data_for(first.model(), 4, step));
  const std::string path = ::testing::TempDir() + "/bitpipe.ckpt";
  save_trainer_checkpoint(first, path);
  PipelineTrainer resumed(make_model(true), popts);
  load_trainer_checkpoint(resumed, path);
  for (int step = 2; step < 4; ++step) {
    const Batch batch = data_for(first.model(), 4, step);
    EXPECT_EQ(first.step(batch).loss, resumed.step(batch).loss) << "step " << step;
  }
  std::string diff;
  EXPECT_TRUE(testing::parameters_bitwise_equal(first.model(), resumed.model(), &diff)) << diff;
  EXPECT_TRUE(testing::parameters_bitwise_equal(*first.parts().stages.copy(), *resumed.parts().stages.copy(), &diff)) << diff;
}

TEST(BitPipe, EvaluatesWithTheFirstCopy) {
  PipelineOptions popts = bitpipe_options(2, 4, 0);
  SequentialTrainer ref(make_model(false), reference_options(popts.base));
  PipelineTrainer pipe(make_model(false), popts);
  for (int step = 0; step < 2; ++step) {
    const Batch batch = data_for(ref.model(), 4, step);
    ref.step(batch);
    pipe.step(batch);
  }
  testing::TeacherSource a(3, 12, 4), b(3, 12, 4);
  a.seek(1000);
  b.seek(1000);
  const EvalResult want = ref.evaluate(a, 5);
  const EvalResult got = pipe.evaluate(b, 5);
  EXPECT_EQ(want.loss, got.loss);
  EXPECT_EQ(want.accuracy, got.accuracy);
  EXPECT_EQ(want.targets, got.targets);
}

// The error a constructor throws (a test failure when it does not).
template <typename Fn>
Error error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return Error(ErrorCode::kInternal, "no error");
}

TEST(BitPipe, RefusesWhatItCannotDoYet) {
  PipelineOptions odd = bitpipe_options(2, 3, 0);
  const Error e = error_of([&] { PipelineTrainer t(make_model(false), odd); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("micro_batches must be even"), std::string::npos) << e.what();

  PipelineOptions selective = bitpipe_options(2, 4, 0);
  selective.activation_policy = "selective";
  selective.activation_budget_bytes = 1e6;
  const Error e2 = error_of([&] { PipelineTrainer t(make_model(false), selective); });
  EXPECT_EQ(e2.code(), ErrorCode::kUnimplemented);
  EXPECT_NE(std::string(e2.what()).find("pipelines 2"), std::string::npos) << e2.what();
}

}  // namespace
}  // namespace pf::exec

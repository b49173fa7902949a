// Overlapping steps (TrainingConfig::overlap_steps): a rank begins step t + 1 while later ranks
// finish step t, and the results stay bitwise those of SequentialTrainer — losses, gradient norms
// (clipping on in half of the cases) and parameters after every step — for every synchronous
// schedule, p = 2 and 4, MLP and GPT; a step begun ahead and then abandoned changes nothing; the
// options that end a step on every rank together are refused naming overlap_steps.
#include <gtest/gtest.h>

#include <functional>

#include "runtime/execution/pipeline_trainer.h"
#include "runtime/run/capabilities.h"
#include "runtime/run/training_loop.h"
#include "tests/execution/test_util.h"

namespace pf::exec {
namespace {

using testing::data_for;

enum class ModelKind { kMlp, kGpt };

std::shared_ptr<Model> make_model(ModelKind kind) {
  return kind == ModelKind::kMlp ? testing::tiny_mlp(6) : testing::tiny_gpt(5);
}

// Micro-batch `position` of a fixed stream (one row pair per micro-batch, as data_for's).
class StreamSource : public DataSource {
 public:
  explicit StreamSource(const Model& model) : model_(&model) {}
  Batch next() override { return data_for(*model_, 1, static_cast<int>(position_++)); }
  int64_t position() const override { return position_; }
  void seek(int64_t position) override { position_ = position; }

 private:
  const Model* model_;
  int64_t position_ = 0;
};

PipelineOptions overlap_options(const std::string& schedule, int p, int chunks, int m, int variant) {
  PipelineOptions o;
  o.schedule = schedule;
  o.ranks = p;
  o.chunks = chunks;
  o.base = testing::varied_options(m, variant);
  o.overlap_steps = true;
  return o;
}

// Runs `steps` steps of `ref` and (overlapped, back to back) of `pipe` on the same stream; "" when
// every step's loss, norm, counts and data position and the final parameters match bitwise.
std::string run_both(Trainer& ref, PipelineTrainer& pipe, int steps) {
  StreamSource ref_source(ref.model()), pipe_source(pipe.model());
  pipe.expect_steps(steps);
  for (int step = 0; step < steps; ++step) {
    const StepResult a = ref.step(ref_source);
    const StepResult b = pipe.step(pipe_source);
    if (a.loss != b.loss) return "loss differs at step " + std::to_string(step);
    if (a.grad_norm != b.grad_norm) return "grad norm differs at step " + std::to_string(step);
    if (a.samples != b.samples || a.tokens != b.tokens) return "counts differ";
    if (pipe.metrics().data_position != ref_source.position()) return "data position differs";
  }
  std::string diff;
  if (!testing::parameters_bitwise_equal(ref.model(), pipe.model(), &diff)) return "parameter " + diff + " differs";
  if (pipe_source.position() != ref_source.position()) return "the source moved past the run";
  return "";
}

// Overlapped steps against the sequential reference.
std::string compare(ModelKind kind, const PipelineOptions& o, int steps, int64_t* begun_early = nullptr) {
  SequentialTrainer ref(make_model(kind), o.base);
  PipelineTrainer pipe(make_model(kind), o);
  const std::string problems = run_both(ref, pipe, steps);
  if (begun_early) *begun_early = pipe.steps_begun_early();
  return problems;
}

using Case = testing::ScheduleCase;
class Overlap : public ::testing::TestWithParam<std::tuple<Case, ModelKind>> {};

TEST_P(Overlap, BitwiseEqualToSequential) {
  const Case c = std::get<0>(GetParam());
  const ModelKind kind = std::get<1>(GetParam());
  int variant = 0;
  for (int p : {2, 4}) {
    const int m = 2 * p;  // every generator takes it (interleaving: m % p == 0)
    for (int v = 0; v < 2; ++v, ++variant) {
      // Variant 0: AdamW with clipping; 1: SGD with momentum, no clipping (varied_options).
      const PipelineOptions o = overlap_options(c.schedule, p, c.chunks, m, 3 * v);
      SCOPED_TRACE(c.schedule + " p=" + std::to_string(p) + " variant " + std::to_string(3 * v));
      EXPECT_EQ(compare(kind, o, 4), "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, Overlap,
    ::testing::Combine(::testing::ValuesIn(testing::synchronous_schedules()),
                       ::testing::Values(ModelKind::kMlp, ModelKind::kGpt)),
    [](const auto& info) {
      return testing::test_name(std::get<0>(info.param).schedule,
                                std::get<1>(info.param) == ModelKind::kMlp ? "mlp" : "gpt");
    });

// Sequence slices change the loss's rounding (a sum over slices), so the reference is seq1f1b
// with the barrier.
TEST(OverlapTest, SequenceSlicedBitwiseToTheBarrier) {
  for (int variant : {0, 1}) {
    PipelineOptions o = overlap_options("seq1f1b", 2, 1, 4, variant);
    o.seq_slices = 2;
    PipelineOptions barrier = o;
    barrier.overlap_steps = false;
    PipelineTrainer ref(make_model(ModelKind::kGpt), barrier), pipe(make_model(ModelKind::kGpt), o);
    EXPECT_EQ(run_both(ref, pipe, 3), "") << "variant " << variant;
  }
}

// The last rank slowed down: the first rank finishes its part of each step well before the last
// rank, so it begins the next step early — and the results are still those of the barrier.
TEST(OverlapTest, EarlyRanksBeginTheNextStep) {
  PipelineOptions o = overlap_options("1f1b", 2, 1, 4, 1);
  o.slow_rank = 1;
  o.slow_factor = 4.0;
  int64_t early = 0;
  EXPECT_EQ(compare(ModelKind::kMlp, o, 5, &early), "");
  EXPECT_GE(early, 2) << "rank 0 never began a step before rank 1 finished the previous one";
}

// Post-validation: with clipping the ranks update before the global norm is known. A clip norm
// that every step exceeds redoes every update (and the step begun on it); one that no step
// reaches redoes none. Both bitwise equal to the sequential trainer.
TEST(OverlapTest, PostValidationRollsBackWhereClippingApplies) {
  for (float clip : {1e-3f, 1e3f}) {
    PipelineOptions o = overlap_options("zb-h1", 2, 1, 4, 0);
    o.base.optimizer.clip_norm = clip;
    SequentialTrainer ref(make_model(ModelKind::kMlp), o.base);
    PipelineTrainer pipe(make_model(ModelKind::kMlp), o);
    EXPECT_EQ(run_both(ref, pipe, 5), "") << "clip norm " << clip;
    EXPECT_EQ(pipe.rollbacks(), clip < 1.0f ? 5 : 0) << "clip norm " << clip;
  }
}

// A step begun ahead and then abandoned (the caller evaluated instead) leaves no trace: the
// parameters and the source are where the barrier leaves them, and training goes on equal.
TEST(OverlapTest, AbandonedStepChangesNothing) {
  for (const char* schedule : {"1f1b", "zb-v"}) {
    SCOPED_TRACE(schedule);
    const PipelineOptions o = overlap_options(schedule, 2, std::string(schedule) == "zb-v" ? 2 : 1, 4, 0);
    SequentialTrainer ref(make_model(ModelKind::kMlp), o.base);
    PipelineTrainer pipe(make_model(ModelKind::kMlp), o);
    StreamSource ref_source(ref.model()), pipe_source(pipe.model());
    pipe.expect_steps(10);  // more than it gets
    for (int step = 0; step < 2; ++step) {
      ref.step(ref_source);
      pipe.step(pipe_source);
    }
    StreamSource held_ref(ref.model()), held_pipe(pipe.model());
    const EvalResult a = ref.evaluate(held_ref, 2);
    const EvalResult b = pipe.evaluate(held_pipe, 2);  // settles: step 3, begun ahead, is abandoned
    EXPECT_EQ(a.loss, b.loss);
    EXPECT_EQ(pipe_source.position(), ref_source.position());
    EXPECT_EQ(pipe.metrics().data_position, ref_source.position());
    std::string diff;
    EXPECT_TRUE(testing::parameters_bitwise_equal(ref.model(), pipe.model(), &diff)) << diff;
    for (int step = 0; step < 2; ++step) EXPECT_EQ(ref.step(ref_source).loss, pipe.step(pipe_source).loss);
    pipe.expect_steps(0);
    EXPECT_TRUE(testing::parameters_bitwise_equal(ref.model(), pipe.model(), &diff)) << diff;
  }
}

// The training loop runs back-to-back steps up to each evaluation and checkpoint: the same losses,
// evaluations and parameters as the sequential trainer's loop.
TEST(OverlapTest, TrainingLoopWithEvaluations) {
  const PipelineOptions o = overlap_options("zb-h1", 2, 1, 4, 0);
  SequentialTrainer ref(make_model(ModelKind::kMlp), o.base);
  PipelineTrainer pipe(make_model(ModelKind::kMlp), o);
  StreamSource ref_source(ref.model()), pipe_source(pipe.model());
  StreamSource ref_held(ref.model()), pipe_held(pipe.model());
  TrainingLoopOptions loop;
  loop.steps = 7;
  loop.eval_every = 3;
  loop.eval_micro_batches = 2;
  std::vector<double> ref_losses, pipe_losses;
  run_training(ref, ref_source, &ref_held, loop, [&](const pf::StepReport& r) {
    ref_losses.push_back(r.result.loss);
    if (r.eval) ref_losses.push_back(r.eval->loss);
    return true;
  });
  run_training(pipe, pipe_source, &pipe_held, loop, [&](const pf::StepReport& r) {
    pipe_losses.push_back(r.result.loss);
    if (r.eval) pipe_losses.push_back(r.eval->loss);
    return true;
  });
  EXPECT_EQ(ref_losses, pipe_losses);
  EXPECT_EQ(pipe_losses.size(), 7u + 3u);
  std::string diff;
  EXPECT_TRUE(testing::parameters_bitwise_equal(ref.model(), pipe.model(), &diff)) << diff;
  EXPECT_EQ(pipe_source.position(), ref_source.position());
}

// A step that fails (a micro-batch with a label out of range) is reported; the source goes back to
// where that step began.
TEST(OverlapTest, FailedStepRewindsTheSource) {
  const PipelineOptions o = overlap_options("1f1b", 2, 1, 4, 1);
  PipelineTrainer pipe(testing::tiny_mlp(6), o);
  testing::TeacherSource source(2, 12, 4);
  source.bad_label_at = 9;  // in step 3 (micro-batches 8..11)
  pipe.expect_steps(5);
  pipe.step(source);
  pipe.step(source);
  EXPECT_THROW(pipe.step(source), Error);
  EXPECT_EQ(source.position(), 8);
}

TEST(OverlapTest, RefusalsNameTheOption) {
  auto refusal = [](PipelineOptions o) -> std::string {
    try {
      PipelineTrainer t(testing::tiny_mlp(6), o);
      return "";
    } catch (const Error& e) {
      return e.what();
    }
  };
  PipelineOptions o = overlap_options("1f1b", 2, 1, 4, 1);
  // Data parallelism needs processes (the table's rule as a world of replicas would meet it).
  CapabilityFacts replicas;
  replicas.pipelined = true;
  replicas.overlap_steps = true;
  replicas.replicas = 2;
  replicas.placement = RankPlacement::kProcesses;
  replicas.data_parallel_world = true;
  const Refusal r = find_refusal(replicas, Operation::kTrain);
  EXPECT_EQ(r.code, ErrorCode::kUnimplemented);
  EXPECT_NE(r.message.find("overlap_steps with replicas 2"), std::string::npos) << r.message;
  PipelineOptions policy = o;
  policy.activation_policy = "recompute";
  EXPECT_NE(refusal(policy).find("overlap_steps with activation_policy 'recompute'"), std::string::npos);
  PipelineOptions windowed = o;
  windowed.schedule = "pipedream";
  EXPECT_NE(refusal(windowed).find("overlap_steps applies to synchronous schedules"), std::string::npos)
      << refusal(windowed);
  PipelineOptions two = o;
  two.schedule = "bitpipe";
  two.chunks = 0;
  EXPECT_NE(refusal(two).find("overlap_steps with"), std::string::npos) << refusal(two);
}

}  // namespace
}  // namespace pf::exec

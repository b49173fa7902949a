// The optimizer on the ranks (docs/EXECUTION.md, "The optimizer on the ranks"): each rank's
// worker clips and steps its own stages' parameters. Results stay bitwise those of
// SequentialTrainer and of the main-thread path (PipelineOptions::rank_optimizer false), with
// and without clipping, with AdamW and SGD, and across a checkpoint.
#include <gtest/gtest.h>

#include <cstring>
#include <ostream>
#include <string>
#include <tuple>

#include "runtime/checkpoint/sharded_checkpoint.h"
#include "runtime/execution/pipeline_trainer.h"
#include "tests/execution/test_util.h"

namespace pf::exec {
namespace {

using testing::data_for;

std::shared_ptr<Model> make_model(bool gpt) { return gpt ? testing::tiny_gpt(6) : testing::tiny_mlp(8); }

// AdamW or SGD with momentum (the suites' varied options), weight decay, a small clip norm or none.
TrainerOptions options(int m, bool adamw, bool clip) {
  TrainerOptions o = testing::varied_options(m, adamw ? 0 : 1);
  o.optimizer.weight_decay = adamw ? 0.01f : 1e-4f;
  o.optimizer.clip_norm = clip ? 0.05f : 0.0f;  // small: clipping really happens
  return o;
}

std::string state_diff(const Optimizer& a_in, const Optimizer& b_in) {
  auto& a = const_cast<Optimizer&>(a_in).state();
  auto& b = const_cast<Optimizer&>(b_in).state();
  if (a.size() != b.size()) return "optimizer state sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  for (const auto& [key, t] : a) {
    auto it = b.find(key);
    if (it == b.end()) return "optimizer state " + key + " missing";
    if (t.nbytes() != it->second.nbytes() || std::memcmp(t.data<char>(), it->second.data<char>(), t.nbytes()) != 0)
      return "optimizer state " + key + " differs";
  }
  if (a_in.steps_taken() != b_in.steps_taken()) return "steps taken differ";
  return "";
}

// `steps` steps of the sequential reference, the workers' path and the main thread's: "" when
// losses, norms, parameters and optimizer state agree bitwise (and the paths are the ones asked).
std::string compare(bool gpt, PipelineOptions popts, int steps = 3) {
  SequentialTrainer ref(make_model(gpt), popts.base);
  popts.rank_optimizer = true;
  PipelineTrainer workers(make_model(gpt), popts);
  popts.rank_optimizer = false;
  PipelineTrainer main_thread(make_model(gpt), popts);
  if (!workers.parts().optimizer.on_workers()) return "the workers do not step";
  if (main_thread.parts().optimizer.on_workers()) return "rank_optimizer false still steps on the workers";
  for (int step = 0; step < steps; ++step) {
    const Batch batch = data_for(ref.model(), popts.base.micro_batches, step);
    const StepResult a = ref.step(batch);
    const StepResult b = workers.step(batch);
    const StepResult c = main_thread.step(batch);
    const std::string at = " at step " + std::to_string(step);
    if (a.loss != b.loss || a.loss != c.loss) return "loss differs" + at;
    if (a.grad_norm != b.grad_norm || a.grad_norm != c.grad_norm) return "grad norm differs" + at;
    if (popts.base.optimizer.clip_norm == 0.0f && b.grad_norm != 0.0) return "a grad norm without clipping" + at;
    if (popts.base.optimizer.clip_norm > 0.0f && !(b.grad_norm > 0.0)) return "no grad norm with clipping" + at;
    for (const RankStats& rs : workers.last_stats().ranks)
      if (!(rs.optimizer_us > 0.0)) return "a rank's worker did not step" + at;
    if (!workers.last_stats().optimizer_on_workers) return "stats: not on the workers" + at;
    for (const RankStats& rs : main_thread.last_stats().ranks)
      if (rs.optimizer_us != 0.0) return "a worker stepped on the main-thread path" + at;
  }
  std::string diff;
  if (!testing::parameters_bitwise_equal(ref.model(), workers.model(), &diff)) return "parameter " + diff + " differs";
  if (!testing::parameters_bitwise_equal(ref.model(), main_thread.model(), &diff))
    return "main thread: parameter " + diff + " differs";
  const std::string s = state_diff(ref.optimizer(), workers.optimizer());
  if (!s.empty()) return s;
  return state_diff(ref.optimizer(), main_thread.optimizer());
}

struct Case {
  std::string schedule;
  int ranks, chunks, m;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.schedule << " p" << c.ranks << " m" << c.m; }

class RankOptimizer : public ::testing::TestWithParam<std::tuple<Case, bool, bool, bool>> {};

TEST_P(RankOptimizer, BitwiseEqualToSequentialAndToTheMainThread) {
  const auto& [c, gpt, adamw, clip] = GetParam();
  PipelineOptions o;
  o.schedule = c.schedule;
  o.ranks = c.ranks;
  o.chunks = c.chunks;
  o.base = options(c.m, adamw, clip);
  EXPECT_EQ(compare(gpt, o), "");
}

INSTANTIATE_TEST_SUITE_P(Schedules, RankOptimizer,
                         ::testing::Combine(::testing::Values(Case{"1f1b", 2, 1, 4}, Case{"1f1b", 4, 1, 6},
                                                              Case{"gpipe", 3, 1, 3}, Case{"zb-h1", 3, 1, 4},
                                                              Case{"zb-v", 2, 2, 4}, Case{"interleaved-1f1b", 2, 2, 4},
                                                              Case{"dualpipe-v", 2, 2, 4}),
                                            ::testing::Bool(), ::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           const Case& c = std::get<0>(info.param);
                           return testing::test_name(c.schedule, "p" + std::to_string(c.ranks)) +
                                  (std::get<1>(info.param) ? "_gpt" : "_mlp") +
                                  (std::get<2>(info.param) ? "_adamw" : "_sgd") +
                                  (std::get<3>(info.param) ? "_clip" : "_noclip");
                         });

// Two pipelines (bitpipe): each rank steps both copies' parameters of its stages once the
// sibling gradients are in; the reference is two data-parallel replicas of m/2.
TEST(RankOptimizerBitPipe, BothCopiesEqualTwoReplicas) {
  for (bool clip : {false, true}) {
    PipelineOptions o;
    o.schedule = "bitpipe";
    o.ranks = 2;
    o.base = options(4, true, clip);
    TrainerOptions ref_opts = o.base;
    ref_opts.micro_batches = 2;
    ref_opts.replicas = 2;
    SequentialTrainer ref(make_model(false), ref_opts);
    PipelineTrainer pipe(make_model(false), o);
    ASSERT_TRUE(pipe.parts().optimizer.on_workers());
    for (int step = 0; step < 3; ++step) {
      const Batch batch = data_for(ref.model(), 4, step);
      const StepResult a = ref.step(batch), b = pipe.step(batch);
      EXPECT_EQ(a.loss, b.loss) << "step " << step;
      EXPECT_EQ(a.grad_norm, b.grad_norm) << "step " << step;
    }
    std::string diff;
    EXPECT_TRUE(testing::parameters_bitwise_equal(ref.model(), pipe.model(), &diff)) << diff;
    EXPECT_TRUE(testing::parameters_bitwise_equal(pipe.model(), *pipe.parts().stages.copy(), &diff)) << diff;
  }
}

// Save after two steps, load into a new trainer, go on: bitwise the run that never stopped.
TEST(RankOptimizer, ResumesFromACheckpointBitwise) {
  for (bool clip : {false, true}) {
    PipelineOptions o;
    o.schedule = "1f1b";
    o.ranks = 2;
    o.base = options(4, true, clip);
    PipelineTrainer first(make_model(true), o);
    ASSERT_TRUE(first.parts().optimizer.on_workers());
    for (int step = 0; step < 2; ++step) first.step(data_for(first.model(), 4, step));
    const std::string path = ::testing::TempDir() + "/rank_optimizer.ckpt";
    save_trainer_checkpoint(first, path);
    PipelineTrainer resumed(make_model(true), o);
    load_trainer_checkpoint(resumed, path);
    for (int step = 2; step < 4; ++step) {
      const Batch batch = data_for(first.model(), 4, step);
      const StepResult a = first.step(batch), b = resumed.step(batch);
      EXPECT_EQ(a.loss, b.loss) << "step " << step;
      EXPECT_EQ(a.grad_norm, b.grad_norm) << "step " << step;
    }
    std::string diff;
    EXPECT_TRUE(testing::parameters_bitwise_equal(first.model(), resumed.model(), &diff)) << diff;
    EXPECT_EQ(state_diff(first.optimizer(), resumed.optimizer()), "");
  }
}

// Asynchronous schedules update per stage themselves: the option changes nothing there.
TEST(RankOptimizer, AsynchronousSchedulesKeepTheirOwnUpdates) {
  PipelineOptions o;
  o.schedule = "pipedream";
  o.ranks = 2;
  o.base = options(4, true, false);
  PipelineTrainer pipe(make_model(false), o);
  EXPECT_FALSE(pipe.parts().optimizer.on_workers());
}

}  // namespace
}  // namespace pf::exec

// Fail-slow adaptation with one process per rank (run under mpirun -np N, one rank per process):
// 1F1B with rank 1 four times slower. Every process decides to move layers off rank 1 at the same
// step, the parameters and AdamW state move between processes over the world, and every step's
// loss, the final parameters and the optimizer state stay bitwise equal to the sequential trainer
// that each process also runs on the same data. A parameter whose shape differs on the new owner is
// an error naming it on every process.
// A peer that never joins the move is a timeout naming the rank and the parameter, and the
// others stop at the abort.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/checkpoint/parameter_checksum.h"
#include "runtime/comm/mpi_world.h"
#include "runtime/core/error.h"
#include "runtime/models/builders.h"
#include "runtime/planner/fail_slow.h"
#include "runtime/planner/repartition.h"
#include "runtime/train/sequential_trainer.h"
#include "tests/execution/test_util.h"

namespace pf::plan {
namespace {

using exec::testing::data_for;

using exec::testing::tiny_gpt;

// As the CLI builds it under mpirun: nothing allocated until the trainer places its stages.
// tiny_gpt: 8 top-level layers (5 blocks).
std::shared_ptr<Model> deferred_gpt(int64_t mlp_hidden = 0) {
  DeferParameterAllocation defer;
  return tiny_gpt(5, mlp_hidden);
}

exec::PipelineOptions slow_rank_1(int m) {
  exec::PipelineOptions o;
  o.schedule = "1f1b";
  o.world = comm::MpiWorld::world();
  o.ranks = o.world->size();
  o.base.micro_batches = m;
  o.base.seed = 7;
  o.base.optimizer.weight_decay = 0.01f;  // AdamW (the default kind)
  o.base.optimizer.clip_norm = 0.5f;
  o.slow_rank = 1;
  o.slow_factor = 4.0;
  o.partition = PartitionKind::kEven;  // every rank starts with a layer or more to give up
  o.recv_timeout_seconds = 60;
  return o;
}

MicroBatchCosts costs_for(int m) {
  auto model = tiny_gpt();
  return measure_micro_batch(*model, data_for(*model, m, 0).micro_batch(0, m), 3);
}

std::string text(const std::vector<int64_t>& v) {
  std::string out;
  for (int64_t x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
  return "{" + out + "}";
}

// Steps until a step throws (10 at most): its code and message (kOk, "" when none did).
std::pair<ErrorCode, std::string> first_error(AdaptiveTrainer& adaptive, int m) {
  for (int step = 0; step < 10; ++step) {
    try {
      adaptive.step(data_for(adaptive.model(), m, step));
    } catch (const Error& e) {
      return {e.code(), e.what()};
    }
  }
  return {ErrorCode::kOk, ""};
}

// Every process makes the same collective calls whatever it finds: EXPECT, never ASSERT.
TEST(ProcessAdaptation, MovesLayersOffTheSlowRankBitwiseEqualToSequential) {
  const int m = 8, steps = 10;
  const exec::PipelineOptions options = slow_rank_1(m);
  comm::World& world = *options.world;
  AdaptiveTrainer adaptive(deferred_gpt(), options, costs_for(m), FailSlowOptions{1.5, 2});
  auto reference = tiny_gpt();
  SequentialTrainer sequential(reference, options.base);
  const std::vector<int> before = adaptive.layers_per_stage();
  for (int step = 0; step < steps; ++step) {
    const Batch batch = data_for(*reference, m, step);
    const StepResult a = adaptive.step(batch);
    const StepResult b = sequential.step(batch);
    EXPECT_EQ(a.loss, b.loss) << "step " << step << " " << world.describe();
    EXPECT_EQ(a.grad_norm, b.grad_norm) << "step " << step;
  }
  const std::vector<Adaptation>& moves = adaptive.adaptations();
  EXPECT_FALSE(moves.empty()) << "rank 1 at 4x never triggered a re-partition on " << world.describe();
  // The first move: off rank 1, and the same step and partition on every process.
  std::vector<int64_t> first = {-1};
  if (!moves.empty()) {
    EXPECT_EQ(moves.front().from, before);
    EXPECT_LT(moves.front().to[1], moves.front().from[1]) << "the slow rank should get fewer layers";
    first = {moves.front().step};
    first.insert(first.end(), moves.front().to.begin(), moves.front().to.end());
  }
  first.resize(1 + before.size(), -1);
  const std::vector<int64_t> all = comm::all_gather_int64s(world, first, 60);
  for (int r = 0; r < world.size(); ++r) {
    const std::vector<int64_t> theirs(all.begin() + r * static_cast<std::ptrdiff_t>(first.size()),
                                      all.begin() + (r + 1) * static_cast<std::ptrdiff_t>(first.size()));
    EXPECT_EQ(theirs, first) << "rank " << r << " moved at step/to " << text(theirs) << ", rank " << world.rank()
                             << " at " << text(first);
  }
  EXPECT_EQ(adaptive.metrics().step, steps);
  EXPECT_EQ(adaptive.optimizer().steps_taken(), sequential.optimizer().steps_taken());
  // This process holds exactly its new stages' parameters and their AdamW state, bitwise the
  // sequential trainer's; every other parameter is released and has no state here.
  const exec::PipelineTrainer& pipe = adaptive.pipeline();
  const auto& mine = adaptive.model().parameters();
  const auto& theirs = reference->parameters();
  auto& state = adaptive.optimizer().state();
  const auto& reference_state = sequential.optimizer().state();
  size_t local = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    const bool owned = pipe.parts().ownership.is_local_rank(pipe.parts().ownership.owner(mine[i]));
    EXPECT_EQ(mine[i]->allocated(), owned) << mine[i]->name;
    for (const std::string slot : {"exp_avg", "exp_avg_sq"}) {
      const std::string key = mine[i]->name + "/" + slot;
      const auto it = state.find(key);
      EXPECT_EQ(it != state.end(), owned) << key;
      if (!owned || it == state.end()) continue;
      const Tensor& expected = reference_state.at(key);
      EXPECT_EQ(std::memcmp(it->second.data<char>(), expected.data<char>(), expected.nbytes()), 0) << key;
    }
    if (!owned || !mine[i]->allocated()) continue;
    ++local;
    EXPECT_EQ(std::memcmp(mine[i]->value.data<char>(), theirs[i]->value.data<char>(), theirs[i]->value.nbytes()), 0)
        << "parameter " << mine[i]->name << " differs on " << world.describe();
  }
  EXPECT_EQ(local, pipe.local_parameters().size());
  EXPECT_EQ(pipe.parameter_checksum(), parameter_checksum(reference->parameters()));
}

// Every rank but rank 1 builds its blocks with another MLP width: the stages train, but a block
// moving off rank 1 does not fit where it arrives. Every process throws the same kInvalidArgument naming the parameter, and the
// trainer refuses later steps.
TEST(ProcessAdaptation, AParameterOfAnotherShapeOnTheNewOwnerIsAnErrorNamingIt) {
  const int m = 8;
  const exec::PipelineOptions options = slow_rank_1(m);
  comm::World& world = *options.world;
  AdaptiveTrainer adaptive(deferred_gpt(world.rank() == 1 ? 0 : 32), options, costs_for(m), FailSlowOptions{1.5, 2});
  const auto [code, error] = first_error(adaptive, m);
  EXPECT_EQ(code, ErrorCode::kInvalidArgument) << error;
  EXPECT_NE(error.find("repartition to {"), std::string::npos) << error;
  EXPECT_NE(error.find(" found: parameter 'blocks."), std::string::npos) << error;
  EXPECT_NE(error.find("from rank 1 to rank"), std::string::npos) << error;
  EXPECT_NE(error.find(" values, rank "), std::string::npos) << error;
  // The same words on every process.
  std::string rank_0s = error;
  comm::broadcast_string(world, &rank_0s, 0, 60);
  EXPECT_EQ(error, rank_0s);
  try {
    adaptive.step(data_for(adaptive.model(), m, 10));
    ADD_FAILURE() << "stepped after a failed move";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition) << e.what();
  }
}

// Processes that would decide differently (here rank 1 with another patience) stop at the step
// where they first disagree with kInternal naming the ranks and both decisions, instead of one
// waiting in a move the others never start. Rank 1 is 8x slower and the others decide at the first
// slow step, so that a busy machine (4 processes on 2 cores, under ASan in CI) cannot hide it.
TEST(ProcessAdaptation, ProcessesThatDecideDifferentlyStopNamingTheRanks) {
  const int m = 8;
  exec::PipelineOptions options = slow_rank_1(m);
  options.slow_factor = 8.0;
  comm::World& world = *options.world;
  const FailSlowOptions fail_slow{1.5, world.rank() == 1 ? 1000 : 1};
  AdaptiveTrainer adaptive(deferred_gpt(), options, costs_for(m), fail_slow);
  const auto [code, error] = first_error(adaptive, m);
  std::string busy;  // the last step's busy microseconds per rank, for a failure's message
  for (const exec::RankStats& r : adaptive.pipeline().last_stats().ranks) busy += " " + std::to_string(r.busy_us);
  EXPECT_EQ(code, ErrorCode::kInternal) << error << "; the last step's busy us:" << busy;
  EXPECT_NE(error.find("fail-slow at step "), std::string::npos) << error;
  EXPECT_NE(error.find(" decided {-1,"), std::string::npos) << error;
  EXPECT_TRUE(adaptive.adaptations().empty());
}

// A peer that never joins the move (rank 1 waits on a message instead): rank 0 times out in the
// move within its timeout, with an error naming itself, the move and the parameter, and aborts
// the world, which ends rank 1's wait with kCancelled naming rank 0. Run in a launch of its own
// (an aborted world stays aborted), 2 processes.
TEST(ProcessAdaptationFailures, APeerThatNeverJoinsTheMoveEndsItNamingTheRankAndTheParameter) {
  exec::PipelineOptions options = slow_rank_1(4);
  if (options.world->size() != 2) GTEST_SKIP() << "needs 2 processes";
  options.slow_rank = -1;
  options.recv_timeout_seconds = 1.0;
  comm::World& world = *options.world;
  auto trainer = std::make_unique<exec::PipelineTrainer>(deferred_gpt(), options);
  trainer->step(data_for(trainer->model(), 4, 0));
  const auto t0 = std::chrono::steady_clock::now();
  try {
    if (world.rank() == 1) {
      world.endpoint().recv(0, comm::MessageKey{}, 30);
    } else {
      repartition(&trainer, {6, 2});
    }
    ADD_FAILURE() << world.describe() << ": nothing failed";
  } catch (const Error& e) {
    const std::string what = e.what();
    if (world.rank() == 0) {
      EXPECT_EQ(e.code(), ErrorCode::kTimeout) << what;
      EXPECT_EQ(what.rfind("rank 0: repartition to {6,2} at step 1: moving parameter 'blocks.", 0), 0u) << what;
      EXPECT_NE(what.find("' from rank 1 to rank 0: "), std::string::npos) << what;
    } else {
      EXPECT_EQ(e.code(), ErrorCode::kCancelled) << what;
      EXPECT_NE(what.find("rank 0 failed: rank 0: repartition to {6,2}"), std::string::npos) << what;
    }
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
}

}  // namespace
}  // namespace pf::plan

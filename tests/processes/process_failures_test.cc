// One process per rank, failures (run under mpirun -np 2, one test per launch: an aborted launch
// stays aborted): a rank that throws and a stuck rank end every process's step within the timeout
// with an error naming the failed rank and what each waited for.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "runtime/comm/mpi_world.h"
#include "runtime/comm/process_grid.h"
#include "runtime/core/error.h"
#include "runtime/execution/pipeline_trainer.h"
#include "tests/execution/test_util.h"

namespace pf::exec {
namespace {

using testing::data_for;

// 2 ranks over `world` of the probe model, fc0 probe0 fc1 | probe1 head: probe0 on rank 0, probe1
// on rank 1; SGD on m micro-batches.
PipelineOptions probe_pipeline(const char* schedule, int m, std::shared_ptr<comm::World> world,
                               double timeout_seconds) {
  PipelineOptions o;
  o.schedule = schedule;
  o.ranks = 2;
  o.base.micro_batches = m;
  o.base.optimizer.kind = OptimizerConfig::Kind::kSgd;
  o.base.optimizer.lr = 0.1f;
  o.layers_per_stage = {3, 2};
  o.world = std::move(world);
  o.recv_timeout_seconds = timeout_seconds;
  return o;
}


TEST(ProcessFailures, ARankThatThrowsEndsEveryProcessStepNamingIt) {
  testing::ProbeLayer* probe0 = nullptr;
  testing::ProbeLayer* probe1 = nullptr;
  auto model = testing::probe_model(&probe0, &probe1);
  const PipelineOptions o = probe_pipeline("1f1b", 4, comm::MpiWorld::world(), 30);
  PipelineTrainer pipe(model, o);
  const int me = o.world->rank();
  if (me == 1) probe1->fail_backward = true;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    pipe.step(data_for(*model, 4, 0));
    ADD_FAILURE() << "rank " << me << ": the step did not fail";
  } catch (const Error& e) {
    const std::string what = e.what();
    if (me == 1) {
      EXPECT_EQ(e.code(), ErrorCode::kCallbackError) << what;
      EXPECT_NE(what.find("injected backward failure"), std::string::npos) << what;
    } else {
      EXPECT_EQ(e.code(), ErrorCode::kCancelled) << what;
      EXPECT_NE(what.find("rank 1 failed"), std::string::npos) << what;
      EXPECT_NE(what.find("injected backward failure"), std::string::npos) << what;
    }
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
}

TEST(ProcessFailures, AStuckRankTimesOutNamingWhatEachWaitedFor) {
  testing::ProbeLayer* probe0 = nullptr;
  testing::ProbeLayer* probe1 = nullptr;
  auto model = testing::probe_model(&probe0, &probe1);
  const PipelineOptions o = probe_pipeline("gpipe", 2, comm::MpiWorld::world(), 1.0);
  PipelineTrainer pipe(model, o);
  const int me = o.world->rank();
  if (me == 0) probe0->forward_sleep_ms = 3000;  // rank 1's RECV_F waits past its timeout
  try {
    pipe.step(data_for(*model, 2, 0));
    ADD_FAILURE() << "rank " << me << ": the step did not fail";
  } catch (const Error& e) {
    const std::string what = e.what();
    if (me == 1) {
      EXPECT_EQ(e.code(), ErrorCode::kTimeout) << what;
      EXPECT_NE(what.find("1RECV_F0"), std::string::npos) << what;
      EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
    } else {
      EXPECT_EQ(e.code(), ErrorCode::kCancelled) << what;
      EXPECT_NE(what.find("rank 1 failed"), std::string::npos) << what;
    }
  }
}

// Rank 1 (the last stage) is still in its weight passes, after sending every input gradient, when
// rank 0 has finished its part of the step: rank 0 times out waiting for the step's losses, and its
// error says so, naming rank 1.
TEST(ProcessFailures, ALastStageLateWithTheLossesTimesOutNamingIt) {
  testing::ProbeLayer* probe0 = nullptr;
  testing::ProbeLayer* probe1 = nullptr;
  auto model = testing::probe_model(&probe0, &probe1);
  const PipelineOptions o = probe_pipeline("zb-h1", 2, comm::MpiWorld::world(), 1.0);
  PipelineTrainer pipe(model, o);
  const int me = o.world->rank();
  if (me == 1) probe1->weight_sleep_ms = 3000;  // its W passes come after it sent every B
  try {
    pipe.step(data_for(*model, 2, 0));
    ADD_FAILURE() << "rank " << me << ": the step did not fail";
  } catch (const Error& e) {
    const std::string what = e.what();
    if (me == 0) {
      EXPECT_EQ(e.code(), ErrorCode::kTimeout) << what;
      EXPECT_NE(what.find("the step's losses from rank 1 (its last stage)"), std::string::npos) << what;
    }
  }
}

// Weights tied across the two processes (the head's weight a copy of fc0's), but the two processes
// disagree on its size (rank 1 built a wider model): the barrier's tied-gradient swap fails on both,
// naming the parameter, the peer and both sizes, and tells the group, so neither steps again. A rank
// whose peer found the mismatch first fails with kCancelled carrying the peer's message.
TEST(ProcessFailures, AFailedTiedSwapEndsBothNamingIt) {
  testing::ProbeLayer* probe0 = nullptr;
  testing::ProbeLayer* probe1 = nullptr;
  const int me = comm::MpiWorld::world()->rank();
  auto model = testing::probe_model(&probe0, &probe1, true, me == 1 ? 2 : 1);
  const PipelineOptions o = probe_pipeline("1f1b", 2, comm::MpiWorld::world(), 20);
  PipelineTrainer pipe(model, o);
  try {
    pipe.step(data_for(*model, 2, 0));
    ADD_FAILURE() << "rank " << me << ": the step did not fail";
  } catch (const Error& e) {
    const std::string what = e.what();
    // Rank r's own finding: "rank r: the tied gradient of '<its parameter>' from rank <peer> has N values, expected M".
    const auto finding = [](int r) {
      return "rank " + std::to_string(r) + ": the tied gradient of '" + std::string(r == 0 ? "fc0.weight" : "head.weight") +
             "' from rank " + std::to_string(1 - r) + (r == 0 ? " has 128 values, expected 64" : " has 64 values, expected 128");
    };
    if (e.code() == ErrorCode::kCancelled) {
      EXPECT_NE(what.find("rank " + std::to_string(1 - me) + " failed: " + finding(1 - me)), std::string::npos) << what;
    } else {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << what;
      EXPECT_NE(what.find(finding(me)), std::string::npos) << what;
    }
  }
  EXPECT_THROW(pipe.step(data_for(*model, 2, 1)), Error) << "rank " << me << ": a step after the failed swap ran";
}

TEST(ProcessFailures, ADataParallelRankThatThrowsEndsEveryReplica) {
  // 2 replicas x 2 ranks: rank 1 of replica 0 throws in its backward. Its pipeline peer learns it
  // from the pipeline group, replica 1 from the data-parallel groups; nobody waits for a timeout.
  const comm::ProcessGrid grid = comm::make_process_grid(*comm::MpiWorld::world(), 1, 2, 2);
  testing::ProbeLayer* probe0 = nullptr;
  testing::ProbeLayer* probe1 = nullptr;
  auto model = testing::probe_model(&probe0, &probe1);
  PipelineOptions o = probe_pipeline("1f1b", 4, grid.pipeline, 60);
  o.base.replicas = 2;
  o.data_parallel_world = grid.data_parallel;
  PipelineTrainer pipe(model, o);
  const bool culprit = grid.replica == 0 && grid.pipeline_rank == 1;
  if (culprit) probe1->fail_backward = true;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    pipe.step(data_for(*model, 8, 0));
    ADD_FAILURE() << "replica " << grid.replica << " rank " << grid.pipeline_rank << ": the step did not fail";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), culprit ? ErrorCode::kCallbackError : ErrorCode::kCancelled)
        << "replica " << grid.replica << " rank " << grid.pipeline_rank << ": " << what;
    EXPECT_NE(what.find("injected backward failure"), std::string::npos) << what;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
}

TEST(ProcessFailures, AnAsynchronousRankThatThrowsMidStreamEndsEveryProcess) {
  // pipedream, 2 processes: the first step leaves micro-batches in flight; in the second, rank 1
  // throws in a backward while rank 0 waits for gradients that cross the step boundary. Every
  // process ends the step naming it within the timeout, and later steps and the drain refuse.
  testing::ProbeLayer* probe0 = nullptr;
  testing::ProbeLayer* probe1 = nullptr;
  auto model = testing::probe_model(&probe0, &probe1);
  const PipelineOptions o = probe_pipeline("pipedream", 4, comm::MpiWorld::world(), 30);
  PipelineTrainer pipe(model, o);
  const int me = o.world->rank();
  pipe.step(data_for(*model, 4, 0));
  ASSERT_FALSE(pipe.parts().async.pipeline_empty());
  if (me == 1) probe1->fail_backward = true;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    pipe.step(data_for(*model, 4, 1));
    ADD_FAILURE() << "rank " << me << ": the step did not fail";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), me == 1 ? ErrorCode::kCallbackError : ErrorCode::kCancelled) << what;
    EXPECT_NE(what.find("injected backward failure"), std::string::npos) << what;
    if (me == 0) {
      EXPECT_NE(what.find("rank 1 failed"), std::string::npos) << what;
    }
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  for (auto attempt : {0, 1}) {
    try {
      if (attempt == 0) pipe.drain();
      else pipe.step(data_for(*model, 4, 2));
      ADD_FAILURE() << "rank " << me << ": a " << (attempt == 0 ? "drain" : "step") << " after the failure ran";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition) << e.what();
      EXPECT_NE(std::string(e.what()).find("mid-window"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace pf::exec

// One GPU per process under real mpirun processes (run_gtest_under_mpirun.sh 2; tools/gpu_check.sh
// with mpirun on the PATH), the path `mpirun -np 2 pipeforge train --devices cuda --stages 2` takes:
// each process takes the GPU of its node-local rank (OMPI_COMM_WORLD_LOCAL_RANK), NCCL is set up
// over MPI, and 1F1B and ZB-V over the 2 processes are bitwise the one-process CUDA pipeline on
// cuda:0 and cuda:1 (losses, gradient norms, parameter checksum), which rank 0 also runs.
// Without 2 GPUs on every process it skips, after checking that each process names its device
// (the resolver's refusal, no longer the capability table's); launched without mpirun, it skips.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/mpi_launch.h"
#include "runtime/comm/mpi_world.h"
#include "runtime/core/error.h"
#include "runtime/run/resolve.h"
#include "tests/gpu/process_pipeline.h"

namespace pf::exec::gpu_process_test {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::shared_ptr<comm::World> launch_world() { return comm::MpiWorld::world(); }

#define PF_REQUIRE_MPIRUN_2()                                                                        \
  do {                                                                                               \
    if (!comm::launched_by_mpi()) GTEST_SKIP() << "run under mpirun -np 2";                          \
    if (launch_world()->size() != 2) GTEST_SKIP() << "run under mpirun -np 2, got " << launch_world()->size(); \
  } while (0)

// The fewest CUDA devices any process sees (a collective: every process skips alike).
int64_t fewest_gpus() {
  const std::vector<int64_t> counts =
      comm::all_gather_int64s(*launch_world(), {static_cast<int64_t>(probe_cuda().device_count)}, 60);
  int64_t fewest = counts.front();
  for (int64_t c : counts) fewest = std::min(fewest, c);
  return fewest;
}

TEST(MpirunPipelineGpu, WithoutAGpuEachProcessNamesItsDevice) {
  PF_REQUIRE_MPIRUN_2();
  if (fewest_gpus() > 0) GTEST_SKIP() << "GPUs are visible";
  PipelineOptions o = options(Case{"1f1b", 2, false});
  o.world = launch_world();
  o.devices = {Device::cuda(0)};  // `--devices cuda`
  const int me = o.world->rank();
  try {
    resolve(*testing::tiny_mlp(), o);
    ADD_FAILURE() << "resolved without a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    // mpirun -np 2 on one node: local rank r, cuda:r.
    EXPECT_TRUE(contains(e.what(), "devices (rank " + std::to_string(me) + ", MPI rank " + std::to_string(me)))
        << e.what();
    EXPECT_TRUE(contains(e.what(), "cuda:" + std::to_string(me) + " is not available")) << e.what();
    EXPECT_FALSE(contains(e.what(), "one process per rank yet")) << e.what();
  }
}

TEST(MpirunPipelineGpu, TwoProcessesAreTheOneProcessPipelineBitwise) {
  PF_REQUIRE_MPIRUN_2();
  const int64_t gpus = fewest_gpus();
  if (gpus < 2) GTEST_SKIP() << "needs 2 CUDA devices on every process, found " << gpus << " (" << probe_cuda().reason << ")";
  const std::shared_ptr<comm::World> world = launch_world();
  for (const Case& c : {Case{"1f1b", 2, false}, Case{"1f1b", 2, true}, Case{"zb-v", 2, true}}) {
    SCOPED_TRACE(name_of(c));
    PipelineOptions o = options(c);
    o.devices = {Device::cuda(0)};  // `--devices cuda`: each process the GPU of its local rank
    o.world = world;
    std::string problem;
    try {
      const PipelineRun got = train(c, o);
      if (world->rank() == 0) {
        PipelineOptions one = options(c);
        one.devices = {Device::cuda(0), Device::cuda(1)};
        problem = differences(got, train(c, one));
      }
    } catch (const Error& e) {
      problem = e.what();
      if (!world->aborted()) world->abort(problem);
    }
    if (world->aborted()) {
      ADD_FAILURE() << "rank " << world->rank() << ": " << (problem.empty() ? world->abort_cause() : problem);
      return;  // an aborted world stays aborted
    }
    comm::broadcast_string(*world, &problem, 0, 600);  // rank 0's verdict (its reference ran alone)
    EXPECT_EQ(problem, "") << "rank " << world->rank();
  }
}

}  // namespace
}  // namespace pf::exec::gpu_process_test

// sequential_device (runtime/run/resolve.h): the device of a run without a pipeline schedule, and a
// tensor-parallel member's choice as a pipeline rank in its own process makes it. Without a GPU the
// choices are seen in the refusals, which name the member and the device it asked for.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "runtime/backend/cuda_backend.h"
#include "runtime/comm/thread_world.h"
#include "runtime/core/error.h"
#include "runtime/run/resolve.h"

namespace pf {
namespace {

// Member `member` of a T = 2 group of threads with `devices`.
TrainingConfig member_config(comm::ThreadWorld& world, int member, std::vector<Device> devices) {
  TrainingConfig c;
  c.tensor_parallel = 2;
  c.tensor_parallel_world = std::shared_ptr<comm::World>(&world.member(member), [](comm::World*) {});
  c.devices = std::move(devices);
  return c;
}

// The device it chose, or the refusal's text.
std::string choice(const TrainingConfig& c) {
  try {
    return sequential_device(c).to_string();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
}

struct LocalRankVariable {
  explicit LocalRankVariable(const char* value) { setenv("OMPI_COMM_WORLD_LOCAL_RANK", value, 1); }
  ~LocalRankVariable() { unsetenv("OMPI_COMM_WORLD_LOCAL_RANK"); }
};

TEST(SequentialDevice, TheConfigsDeviceWithoutTensorParallelismOrOnTheCpu) {
  TrainingConfig c;
  c.devices = {Device::cuda(3)};
  EXPECT_EQ(choice(c), "cuda:3");  // no member to choose for: as given, not probed
  comm::ThreadWorld world(2);
  EXPECT_EQ(choice(member_config(world, 1, {Device::cpu()})), Device::cpu().to_string());
}

TEST(SequentialDevice, MembersAsThreadsShareTheNamedDevice) {
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  comm::ThreadWorld world(2);
  EXPECT_EQ(choice(member_config(world, 1, {Device::cuda(0)})), "cuda:0");
}

TEST(SequentialDevice, OneDevicePerMemberGivesEachItsOwn) {
  comm::ThreadWorld world(2);
  const std::string got = choice(member_config(world, 1, {Device::cuda(0), Device::cuda(1)}));
  if (probe_cuda().device_count >= 2) {
    EXPECT_EQ(got, "cuda:1");
  } else {
    EXPECT_NE(got.find("devices (tensor-parallel member 1, "), std::string::npos) << got;
    EXPECT_NE(got.find("cuda:1"), std::string::npos) << got;
  }
}

// Under a launcher a member with one `cuda` entry takes its node-local rank's GPU (modulo the GPUs).
TEST(SequentialDevice, AMemberInItsOwnProcessTakesItsNodeLocalGpu) {
  const LocalRankVariable local("1");
  comm::ThreadWorld world(2);
  const std::string got = choice(member_config(world, 0, {Device::cuda(0)}));
  const int gpus = probe_cuda().device_count;
  if (gpus >= 1) {
    EXPECT_EQ(got, Device::cuda(1 % gpus).to_string());
  } else {
    EXPECT_NE(got.find("devices (tensor-parallel member 0, "), std::string::npos) << got;
    EXPECT_NE(got.find("cuda:1 is not available"), std::string::npos) << got;
  }
  // One entry other than `cuda` is refused by the same rule as a pipeline rank's.
  const std::string named = choice(member_config(world, 0, {Device::cuda(2)}));
  EXPECT_NE(named.find("names cuda:2: with one process per rank a single entry is `cuda`"), std::string::npos)
      << named;
}

}  // namespace
}  // namespace pf

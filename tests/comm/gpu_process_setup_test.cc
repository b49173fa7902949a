// One GPU per process, the parts that need no GPU (runtime/comm/gpu_process_setup.h): the
// launcher's node-local rank, the device each process takes from it (and the refusals), the NCCL
// channels a pipeline needs, the refusal of two talking ranks on one device of one host, and the
// collectives that gather the placements and broadcast the communicators' ids from rank 0 (over a
// ThreadWorld, whose collectives have MpiWorld's contract).
#include "runtime/comm/gpu_process_setup.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/thread_world.h"
#include "runtime/core/error.h"

namespace pf::comm {
namespace {

// An environment of `vars` only.
std::function<const char*(const char*)> env(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

// The error `fn` throws (code kOk and "" when it does not).
Error error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  return Error(ErrorCode::kOk, "");
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Runs fn(rank) on one thread per member of `world`; each member's error message ("" when none).
std::vector<std::string> run_members(ThreadWorld& world, const std::function<void(World&)>& fn) {
  std::vector<std::string> out(static_cast<size_t>(world.size()));
  std::vector<std::thread> threads;
  for (int r = 0; r < world.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        fn(world.member(r));
      } catch (const Error& e) {
        out[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

TEST(GpuProcessSetup, TheLocalRankComesFromTheFirstLauncherVariableSet) {
  EXPECT_EQ(launcher_local_rank(env({})).rank, -1);
  const LocalRank ompi = launcher_local_rank(env({{"OMPI_COMM_WORLD_LOCAL_RANK", "3"}, {"SLURM_LOCALID", "1"}}));
  EXPECT_EQ(ompi.rank, 3);
  EXPECT_EQ(ompi.variable, "OMPI_COMM_WORLD_LOCAL_RANK");
  const LocalRank slurm = launcher_local_rank(env({{"SLURM_LOCALID", "1"}}));
  EXPECT_EQ(slurm.rank, 1);
  EXPECT_EQ(slurm.variable, "SLURM_LOCALID");
  EXPECT_EQ(launcher_local_rank(env({{"MPI_LOCALRANKID", "0"}})).variable, "MPI_LOCALRANKID");
  for (const char* bad : {"", "-1", "x", "1.5", "9999999"}) {
    const Error e = error_of([&] { launcher_local_rank(env({{"MPI_LOCALRANKID", bad}})); });
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << bad;
    EXPECT_TRUE(contains(e.what(), "MPI_LOCALRANKID is '" + std::string(bad) + "'")) << e.what();
  }
}

TEST(GpuProcessSetup, OneCudaEntryTakesTheDeviceOfTheLocalRankModuloTheVisibleOnes) {
  const std::vector<Device> cuda = {Device::cuda(0)};
  std::vector<int> got;
  for (int local = 0; local < 5; ++local) got.push_back(process_device(cuda, 0, 2, LocalRank{local, "X"}, 2));
  EXPECT_EQ(got, (std::vector<int>{0, 1, 0, 1, 0}));
  EXPECT_EQ(process_device(cuda, 1, 2, LocalRank{5, "X"}, 8), 5);
  // The pipeline rank does not matter, only the node-local one (replicas share nodes).
  EXPECT_EQ(process_device(cuda, 1, 4, LocalRank{0, "X"}, 4), 0);
}

TEST(GpuProcessSetup, OneEntryPerRankIsRankRsDeviceOnItsOwnNode) {
  const std::vector<Device> list = {Device::cuda(3), Device::cuda(1)};
  EXPECT_EQ(process_device(list, 0, 2, LocalRank{}, 4), 3);
  EXPECT_EQ(process_device(list, 1, 2, LocalRank{0, "X"}, 4), 1);
  // With one rank, an entry other than cuda:0 names its device (no local rank needed).
  EXPECT_EQ(process_device({Device::cuda(2)}, 0, 1, LocalRank{}, 4), 2);
}

TEST(GpuProcessSetup, AmbiguousOrUnplaceableEntriesAreRefusedNamingTheOption) {
  Error e = error_of([] { process_device({Device::cuda(1)}, 0, 2, LocalRank{0, "X"}, 2, "--devices"); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "--devices names cuda:1")) << e.what();
  EXPECT_TRUE(contains(e.what(), "node-local rank")) << e.what();
  e = error_of([] { process_device({Device::cuda(0), Device::cuda(1), Device::cuda(0)}, 0, 2, LocalRank{0, "X"}, 2, "--devices"); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "--devices: 3 entries for the schedule's 2 ranks")) << e.what();
  e = error_of([] { process_device({Device::cuda(0)}, 1, 2, LocalRank{}, 2, "--devices"); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "rank 1 cannot tell which GPU is its own")) << e.what();
  for (const char* name : local_rank_variables()) EXPECT_TRUE(contains(e.what(), name)) << e.what();
  e = error_of([] { process_device({Device::cuda(0)}, 0, 2, LocalRank{0, "X"}, 0); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
}

TEST(GpuProcessSetup, ChannelsAreBothDirectionsOfEveryTalkingPairWithoutSelfSends) {
  EXPECT_EQ(nccl_channels({{1, 0}, {0, 1}, {1, 2}, {2, 2}, {1, 2}}),
            (std::vector<std::pair<int, int>>{{0, 1}, {1, 0}, {1, 2}, {2, 1}}));
  EXPECT_TRUE(nccl_channels({{3, 3}}).empty());
}

TEST(GpuProcessSetup, TalkingRanksOnOneDeviceOfOneHostAreRefused) {
  const auto channels = nccl_channels({{0, 1}, {1, 2}});
  EXPECT_EQ(shared_device_problem({{"a", 0, 10}, {"a", 1, 11}, {"a", 0, 12}}, channels), "");  // 0 and 2 do not talk
  EXPECT_EQ(shared_device_problem({{"a", 0, 10}, {"b", 0, 11}, {"c", 0, 12}}, channels), "");  // other hosts
  const std::string problem = shared_device_problem({{"a", 0, 10}, {"b", 1, 11}, {"b", 1, 12}}, channels);
  EXPECT_TRUE(contains(problem, "ranks 1 and 2 (processes 11 and 12)")) << problem;
  EXPECT_TRUE(contains(problem, "both on cuda:1 of host b")) << problem;
}

TEST(GpuProcessSetup, PlacementsAreGatheredInRankOrderOnEveryMember) {
  ThreadWorld world(3);
  const std::string long_host(300, 'h');
  std::vector<std::vector<ProcessPlacement>> got(3);
  const auto errors = run_members(world, [&](World& w) {
    const ProcessPlacement mine{w.rank() == 2 ? long_host : "host" + std::to_string(w.rank()), 2 - w.rank(),
                                100 + w.rank()};
    got[static_cast<size_t>(w.rank())] = gather_placements(w, mine, 10);
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  const std::vector<ProcessPlacement> want = {
      {"host0", 2, 100}, {"host1", 1, 101}, {std::string(kMaxHostBytes, 'h'), 0, 102}};
  for (int r = 0; r < 3; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], want) << "member " << r;
  const ProcessPlacement here = this_process(5);
  EXPECT_FALSE(here.host.empty());
  EXPECT_EQ(here.device, 5);
  EXPECT_GT(here.pid, 0);
}

TEST(GpuProcessSetup, RankZeroMakesTheIdsAndEveryMemberGetsTheSameBytes) {
  ThreadWorld world(3);
  std::atomic<int> made{0};
  std::vector<std::vector<NcclId>> got(3);
  const auto errors = run_members(world, [&](World& w) {
    got[static_cast<size_t>(w.rank())] = broadcast_nccl_ids(
        w, 4,
        [&](NcclId* id) {
          const int n = made++;
          for (size_t i = 0; i < kNcclIdBytes; ++i) (*id)[i] = static_cast<char>(n * 31 + static_cast<int>(i));
        },
        10);
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(made.load(), 4);  // on rank 0 only
  ASSERT_EQ(got[0].size(), 4u);
  EXPECT_NE(got[0][0], got[0][1]);
  EXPECT_EQ(got[0][3][1], static_cast<char>(3 * 31 + 1));
  for (int r = 1; r < 3; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], got[0]) << "member " << r;
  // A pipeline whose ranks only send to themselves (one rank of ZB-V) needs none: still collective.
  const auto none = run_members(world, [&](World& w) {
    EXPECT_TRUE(broadcast_nccl_ids(w, 0, [](NcclId*) { ADD_FAILURE() << "made an id"; }, 10).empty());
  });
  for (const std::string& e : none) EXPECT_EQ(e, "");
}

TEST(GpuProcessSetup, MembersAskingForOtherChannelCountsAllFailNamingTheOddRank) {
  ThreadWorld world(3);
  const auto errors = run_members(world, [&](World& w) {
    broadcast_nccl_ids(w, w.rank() == 1 ? 2 : 4, [](NcclId* id) { id->fill('x'); }, 10);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(contains(errors[static_cast<size_t>(r)], "rank 1")) << "member " << r << ": " << errors[static_cast<size_t>(r)];
  }
}

}  // namespace
}  // namespace pf::comm

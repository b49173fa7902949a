// One GPU per process (docs/CUDA.md, "GPU ranks in separate processes"), with the processes played
// by threads of one ThreadWorld (whose collectives have MpiWorld's contract), so that it runs where
// tools/gpu_check.sh runs the GPU tests, without mpirun; the same under real mpirun processes is
// mpirun_pipeline_gpu_test.cc.
//
// CPU-runnable: the harness itself (ranks as threads of a world on the CPU are bitwise the
// one-process pipeline), and the refusals of the devices option with one process per rank.
// 1 GPU: two talking ranks on one device are refused on every member; a pipeline of one rank in a
// world of one process is bitwise the one-process pipeline on that device.
// 2 GPUs: NcclProcessTransport's exchange (bitwise, both directions, out of order, to itself), a
// timed-out receive aborting its channel and the other member ending with kCancelled naming it,
// cancel(); 1F1B and ZB-V (a rank sending to itself) over 2 "processes" bitwise the one-process
// CUDA pipeline on cuda:0 and cuda:1 (losses, gradient norms, parameter checksum).
#include <gtest/gtest.h>

#include <stdlib.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/thread_world.h"
#include "runtime/core/error.h"
#include "runtime/run/resolve.h"
#include "tests/gpu/process_pipeline.h"

namespace pf::exec::gpu_process_test {
namespace {

using comm::MessageKey;
using comm::MessageKind;
using comm::ThreadWorld;
using comm::World;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Member r of `world` as a World a config can hold (the ThreadWorld outlives it).
std::shared_ptr<World> member(ThreadWorld& world, int r) {
  return std::shared_ptr<World>(&world.member(r), [](World*) {});
}

// Runs fn(rank) on one thread per member; a member that throws aborts its world (as a failing
// process does), so the others stop waiting. Each member's error ("" when none).
std::vector<std::string> run_members(ThreadWorld& world, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(static_cast<size_t>(world.size()));
  std::vector<std::thread> threads;
  for (int r = 0; r < world.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
        if (!world.aborted()) world.member(r).abort(e.what());
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

// Every rank of `c` as a thread of one world with `o` (devices as given): each one's run.
std::vector<PipelineRun> train_as_members(const Case& c, const PipelineOptions& o) {
  ThreadWorld world(c.ranks);
  std::vector<PipelineRun> runs(static_cast<size_t>(c.ranks));
  const auto errors = run_members(world, [&](int r) {
    PipelineOptions mine = o;
    mine.world = member(world, r);
    runs[static_cast<size_t>(r)] = train(c, mine);
  });
  for (int r = 0; r < c.ranks; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
  return runs;
}

void expect_members_match(const Case& c, const PipelineOptions& o) {
  SCOPED_TRACE(name_of(c));
  const PipelineRun want = train(c, o);
  const std::vector<PipelineRun> got = train_as_members(c, o);
  for (int r = 0; r < c.ranks; ++r)
    EXPECT_EQ(differences(got[static_cast<size_t>(r)], want), "") << "rank " << r << " of " << name_of(c);
}

// ---- CPU-runnable ----

// The harness: ranks as threads of a world are the one-process pipeline, bitwise, on the CPU (so
// that a difference on the GPUs is the GPUs' and not the test's).
TEST(ProcessPipelineGpu, RanksOfAThreadWorldAreTheOneProcessPipelineOnTheCpu) {
  for (const Case& c : {Case{"1f1b", 2, false}, Case{"zb-v", 2, true}, Case{"1f1b", 1, true}})
    expect_members_match(c, options(c));
}

Error resolve_error(const TrainingConfig& config) {
  try {
    resolve(*testing::tiny_mlp(), config);
  } catch (const Error& e) {
    return e;
  }
  return Error(ErrorCode::kOk, "resolved");
}

// The devices option with one process per rank: its shape is refused whatever the machine.
TEST(ProcessPipelineGpu, AmbiguousDevicesWithProcessesAreRefusedNamingTheRule) {
  ThreadWorld world(2);
  PipelineOptions o = options(Case{"1f1b", 2, false});
  o.world = member(world, 1);
  o.devices = {Device::cuda(1)};
  Error e = resolve_error(o);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "devices names cuda:1: with one process per rank a single entry is `cuda`")) << e.what();
  o.devices = {Device::cuda(0), Device::cuda(1), Device::cuda(0)};
  e = resolve_error(o);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "3 entries for the schedule's 2 ranks")) << e.what();
  o.devices = {Device::cuda(0), Device::cpu()};
  e = resolve_error(o);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "devices[1] (rank 1) is cpu:0")) << e.what();
}

// CUDA ranks in processes are no longer refused by the capability table: without a GPU the
// resolver says which device this rank could not have.
TEST(ProcessPipelineGpu, WithoutAGpuEachRankNamesItsDevice) {
  if (probe_cuda().device_count > 0) GTEST_SKIP() << "a GPU is visible";
  ThreadWorld world(2);
  PipelineOptions o = options(Case{"1f1b", 2, false});
  o.world = member(world, 1);
  o.devices = {Device::cuda(0), Device::cuda(1)};
  const Error e = resolve_error(o);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "devices (rank 1, thread rank 1 of 2): cuda:1 is not available")) << e.what();
  EXPECT_TRUE(contains(e.what(), "no CUDA device is visible")) << e.what();
  EXPECT_FALSE(contains(e.what(), "one process per rank yet")) << e.what();
}

// ---- 1 GPU ----

TEST(ProcessPipelineGpu, TwoTalkingRanksOnOneDeviceAreRefusedOnEveryMember) {
  PF_REQUIRE_GPUS(1);
  ThreadWorld world(2);
  const auto errors = run_members(world, [&](int r) {
    cuda_backend().new_process_gpu_transport(member(world, r), 0, {{0, 1}}, 8, 60);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(contains(errors[static_cast<size_t>(r)], "ranks 0 and 1")) << errors[static_cast<size_t>(r)];
    EXPECT_TRUE(contains(errors[static_cast<size_t>(r)], "both on cuda:0")) << errors[static_cast<size_t>(r)];
  }
  EXPECT_FALSE(world.aborted());  // every member refused alike: nothing to tell the others
}

// One rank in a world of one process: the process path (its device only, the update per process
// with the gathered norm, sends to itself with ZB-V's two stages) on one GPU.
// Sets an environment variable for a scope (before any thread reads it).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST(ProcessPipelineGpu, OneRankInAWorldOfOneIsTheOneProcessPipeline) {
  PF_REQUIRE_GPUS(1);
  ScopedEnv local_rank("OMPI_COMM_WORLD_LOCAL_RANK", "0");  // `cuda`: as mpirun -np 1 would start it
  for (const Case& c : {Case{"1f1b", 1, true}, Case{"zb-v", 1, true}}) {
    PipelineOptions o = options(c);
    o.devices = {Device::cuda(0)};
    expect_members_match(c, o);
  }
}

// ---- 2 GPUs ----

// A rank's worker: its device and its own current stream.
struct Worker {
  explicit Worker(int device)
      : scope(cuda_backend().device_scope(device)),
        stream(cuda_backend().new_stream(device)),
        current(cuda_backend().stream_scope(*stream)) {}
  std::unique_ptr<BackendScope> scope;
  std::unique_ptr<DeviceStream> stream;
  std::unique_ptr<BackendScope> current;
};

MessageKey fwd(int micro_batch, int stage) { return MessageKey{MessageKind::kActivation, micro_batch, stage}; }
MessageKey bwd(int micro_batch, int stage) { return MessageKey{MessageKind::kGradient, micro_batch, stage}; }

Tensor values(const Shape& shape, float base, int device) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + 0.25f * static_cast<float>(i);
  return Tensor::from_vector(shape, v).to_device(Device::cuda(device));
}

// Two "processes" (threads of `world`), rank r on cuda:r, each with its NCCL process transport
// (ranks 0 and 1 talk, and rank 1 to itself) and its worker context: fn(rank, transport).
std::vector<std::string> with_transports(ThreadWorld& world,
                                         const std::function<void(int, comm::GpuTransportGroup&)>& fn) {
  return run_members(world, [&](int r) {
    auto transport = cuda_backend().new_process_gpu_transport(member(world, r), r, {{0, 1}, {1, 1}}, 8, 60);
    Worker worker(r);
    fn(r, *transport);
  });
}

TEST(NcclProcessTransportGpu, ExchangesBitwiseInBothDirectionsOutOfOrderAndToItself) {
  PF_REQUIRE_GPUS(2);
  ThreadWorld world(2);
  const std::vector<Shape> shapes = {{3, 5}, {}, {0, 4}, {2, 3, 4}};
  const auto errors = with_transports(world, [&](int r, comm::GpuTransportGroup& transport) {
    comm::Transport& t = transport.endpoint(r);
    EXPECT_EQ(t.rank(), r);
    EXPECT_EQ(t.num_ranks(), 2);
    EXPECT_EQ(transport.nccl_pair_count(), 1);
    EXPECT_TRUE(transport.uses_nccl(0, 1));
    if (r == 0) {
      for (int mb = 0; mb < 4; ++mb) t.send(1, fwd(mb, 1), values(shapes[static_cast<size_t>(mb)], 10.0f * mb, 0), 60);
      for (int mb = 0; mb < 4; ++mb) {
        const Tensor got = t.recv(1, bwd(mb, 0), 60);
        EXPECT_EQ(got.device(), Device::cuda(0));
        EXPECT_EQ(got.to_vector(), values(shapes[static_cast<size_t>(mb)], -1.0f * mb, 1).to_vector()) << mb;
      }
    } else {
      for (int mb : {3, 0, 2, 1}) {  // out of order: the others wait in the stash
        const Tensor got = t.recv(0, fwd(mb, 1), 60);
        EXPECT_EQ(got.shape(), shapes[static_cast<size_t>(mb)]);
        EXPECT_EQ(got.to_vector(), values(shapes[static_cast<size_t>(mb)], 10.0f * mb, 0).to_vector()) << mb;
      }
      const Tensor ids = Tensor::from_ints({2, 2}, {1, -2, 3, 2147483647}).to_device(Device::cuda(1));
      t.send(1, fwd(0, 2), ids, 60);  // to itself
      EXPECT_EQ(t.recv(1, fwd(0, 2), 60).to_vector(), ids.to_vector());
      for (int mb = 0; mb < 4; ++mb) t.send(0, bwd(mb, 0), values(shapes[static_cast<size_t>(mb)], -1.0f * mb, 1), 60);
    }
    world.member(r).barrier(60);  // both sides done before the transports go
    EXPECT_EQ(transport.pending_messages(), 0u);
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
}

TEST(NcclProcessTransportGpu, ATimedOutReceiveEndsTheOtherMemberNamingIt) {
  PF_REQUIRE_GPUS(2);
  ThreadWorld world(2);
  std::vector<Error> seen(2, Error(ErrorCode::kOk, ""));
  std::vector<double> seconds(2, 0);
  with_transports(world, [&](int r, comm::GpuTransportGroup& transport) {
    const auto start = std::chrono::steady_clock::now();
    try {
      if (r == 1) transport.endpoint(1).recv(0, fwd(7, 1), 0.5);  // never sent
      else transport.endpoint(0).recv(1, bwd(2, 0), 60);          // never sent either: ended by rank 1
    } catch (const Error& e) {
      seen[static_cast<size_t>(r)] = e;
      seconds[static_cast<size_t>(r)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (r == 1) world.member(1).abort(e.what());  // as the trainer's failed step does
    }
  });
  EXPECT_EQ(seen[1].code(), ErrorCode::kTimeout) << seen[1].what();
  EXPECT_TRUE(contains(seen[1].what(), "rank 1: 1RECV_F7 (micro-batch 7) waited more than 0.5 s for rank 0"))
      << seen[1].what();
  EXPECT_EQ(seen[0].code(), ErrorCode::kCancelled) << seen[0].what();
  EXPECT_TRUE(contains(seen[0].what(), "rank 0: 0RECV_B2 (peer rank 1) cancelled: rank 1 failed: ")) << seen[0].what();
  EXPECT_LT(seconds[0], 30.0);
}

TEST(NcclProcessTransportGpu, CancelEndsAWaitAndLaterCallsUntilReset) {
  PF_REQUIRE_GPUS(2);
  ThreadWorld world(2);
  const auto errors = with_transports(world, [&](int r, comm::GpuTransportGroup& transport) {
    if (r == 0) {
      std::thread canceller([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        transport.cancel("stop here");
      });
      try {
        transport.endpoint(0).recv(1, bwd(0, 0), 60);
        ADD_FAILURE() << "the receive was not cancelled";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kCancelled);
        EXPECT_TRUE(contains(e.what(), "rank 0: 0RECV_B0 (peer rank 1) cancelled: stop here")) << e.what();
      }
      canceller.join();
      EXPECT_TRUE(transport.cancelled());
      EXPECT_THROW(transport.endpoint(0).send(1, fwd(0, 1), values({2}, 1, 0), 1), Error);
      transport.reset();  // the receive's channel was aborted: the transport stays cancelled
      EXPECT_TRUE(transport.cancelled());
    }
    world.member(r).barrier(60);
    if (r == 1) transport.cancel("rank 0 stopped");  // its channel's other end is gone: abort, not finalize
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
}

TEST(NcclProcessTransportGpu, SendsOnlyCudaTensorsOfItsDevice) {
  PF_REQUIRE_GPUS(2);
  ThreadWorld world(2);
  const auto errors = with_transports(world, [&](int r, comm::GpuTransportGroup& transport) {
    if (r == 0) {
      try {
        transport.endpoint(0).send(1, fwd(0, 1), Tensor::from_vector({2}, {1, 2}), 5);
        ADD_FAILURE() << "a CPU tensor was sent";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        EXPECT_TRUE(contains(e.what(), "this process's device cuda:0, got a tensor on cpu:0")) << e.what();
      }
      EXPECT_THROW(transport.endpoint(1), Error);  // rank 1 runs elsewhere
    }
    world.member(r).barrier(60);
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
}

TEST(ProcessPipelineGpu, TwoRanksInTwoProcessesAreTheOneProcessPipelineBitwise) {
  PF_REQUIRE_GPUS(2);
  for (const Case& c : {Case{"1f1b", 2, false}, Case{"1f1b", 2, true}, Case{"zb-v", 2, true}}) {
    PipelineOptions o = options(c);
    o.devices = {Device::cuda(0), Device::cuda(1)};  // rank r on cuda:r, in either form
    expect_members_match(c, o);
  }
}

}  // namespace
}  // namespace pf::exec::gpu_process_test

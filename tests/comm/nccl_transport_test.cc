// The NCCL transport: loopback on one GPU, exchanges between two GPUs (skipped with fewer), matching
// out of order, timeouts (channel aborted, rebuilt by reset()), cancel, and undelivered messages.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/devices/cuda/device_scope.h"
#include "runtime/comm/nccl_transport.h"
#include "runtime/devices/cuda/runtime.h"
#include "runtime/devices/cuda/stream.h"
#include "runtime/comm/transport.h"
#include "runtime/tensor/tensor.h"
#include "tests/devices/gpu_test_util.h"

namespace pf::cuda {
namespace {

using comm::MessageKey;
using comm::NcclTransport;
using comm::MessageKind;
using testing::catch_error;
using testing::contains;
using testing::pattern;

MessageKey fwd(int micro_batch, int stage) { return MessageKey{MessageKind::kActivation, micro_batch, stage}; }
MessageKey bwd(int micro_batch, int stage) { return MessageKey{MessageKind::kGradient, micro_batch, stage}; }

// Bounded set-up and reset waits, so that a hang fails the test in a minute, not five.
NcclTransport::Options test_options() {
  NcclTransport::Options o;
  o.init_timeout_seconds = 60;
  return o;
}

// A rank's worker context: its device current and its own current stream.
struct Worker {
  explicit Worker(int device) : scope(device), stream(device), current(stream) {}
  DeviceScope scope;
  CudaStream stream;
  CurrentStreamScope current;
};

Tensor on_device(const std::vector<float>& values, const Shape& shape, int device) {
  return Tensor::from_vector(shape, values).to_device(Device::cuda(device));
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor ha = a.device().kind == DeviceKind::kCpu ? a : a.to_device(Device::cpu());
  Tensor hb = b.device().kind == DeviceKind::kCpu ? b : b.to_device(Device::cpu());
  return std::memcmp(ha.data<char>(), hb.data<char>(), ha.nbytes()) == 0;
}

// Runs one function per rank on its own thread (each with a Worker) and rethrows the first failure.
void run_ranks(const std::vector<int>& devices, const std::function<void(int rank)>& body) {
  std::vector<std::future<void>> done;
  for (int r = 0; r < static_cast<int>(devices.size()); ++r) {
    done.push_back(std::async(std::launch::async, [&, r] {
      Worker w(devices[r]);
      body(r);
    }));
  }
  for (auto& f : done) f.get();
}

// ---- one GPU: loopback ------------------------------------------------------------------------------

TEST(NcclTransportLoopback, SelfSendsArriveIntactAndMatchByKey) {
  PF_REQUIRE_GPUS(1);
  NcclTransport transport({0}, test_options());
  comm::Transport& ep = transport.endpoint(0);
  EXPECT_EQ(ep.rank(), 0);
  EXPECT_EQ(ep.num_ranks(), 1);
  Worker w(0);
  Tensor a = on_device(pattern(20, 1), {4, 5}, 0);
  Tensor b = Tensor::from_vector({3}, {1.5f, -2.0f, 3.25f}).to(DType::kBF16).to_device(Device::cuda(0));
  Tensor c = Tensor::from_ints({2, 2}, {7, -8, 9, 10}).to_device(Device::cuda(0));
  Tensor e = Tensor::zeros({0, 3}, DType::kF32, Device::cuda(0));
  ep.send(0, fwd(0, 1), a, 10);
  ep.send(0, fwd(1, 1), b, 10);
  ep.send(0, bwd(0, 0), c, 10);
  ep.send(0, bwd(1, 0), e, 10);
  EXPECT_EQ(transport.pending_messages(), 4u);
  Tensor rb = ep.recv(0, fwd(1, 1), 10);  // out of order
  Tensor re = ep.recv(0, bwd(1, 0), 10);
  Tensor rc = ep.recv(0, bwd(0, 0), 10);
  Tensor ra = ep.recv(0, fwd(0, 1), 10);
  EXPECT_EQ(transport.pending_messages(), 0u);
  for (const Tensor* t : {&ra, &rb, &rc, &re}) EXPECT_EQ(t->device(), Device::cuda(0));
  EXPECT_NE(ra.storage(), a.storage());  // NCCL delivered a copy
  EXPECT_TRUE(same_bits(ra, a));
  EXPECT_TRUE(same_bits(rb, b));
  EXPECT_TRUE(same_bits(rc, c));
  EXPECT_EQ(re.shape(), Shape({0, 3}));
}

TEST(NcclTransportLoopback, SendsOnlyCudaTensorsOfTheRanksDevice) {
  PF_REQUIRE_GPUS(1);
  NcclTransport transport({0}, test_options());
  Worker w(0);
  Error e = catch_error([&] { transport.endpoint(0).send(0, fwd(3, 1), Tensor::from_vector({2}, {1, 2}), 10); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "cpu:0")) << e.what();
  EXPECT_TRUE(contains(e.what(), "cuda:0")) << e.what();
  EXPECT_TRUE(contains(e.what(), "0SEND_F3")) << e.what();
  EXPECT_EQ(catch_error([&] { transport.endpoint(0).send(1, fwd(3, 1), on_device({1}, {1}, 0), 10); }).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(catch_error([&] { NcclTransport twice({0, 0}); }).code(), ErrorCode::kInvalidArgument);
}

TEST(NcclTransportLoopback, RecvTimesOutNamingRankActionMicroBatchAndPeer) {
  PF_REQUIRE_GPUS(1);
  NcclTransport transport({0}, test_options());
  Worker w(0);
  auto t0 = std::chrono::steady_clock::now();
  Error e = catch_error([&] { transport.endpoint(0).recv(0, fwd(7, 1), 0.2); });
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  EXPECT_TRUE(contains(e.what(), "rank 0: 1RECV_F7 (micro-batch 7)")) << e.what();
  EXPECT_TRUE(contains(e.what(), "for rank 0")) << e.what();
  EXPECT_GE(waited, 0.19);
  EXPECT_LT(waited, 10.0);
}

TEST(NcclTransportLoopback, CancelWakesAWaitingRecvAndResetRestores) {
  PF_REQUIRE_GPUS(1);
  NcclTransport transport({0}, test_options());
  auto waiter = std::async(std::launch::async, [&] {
    Worker w(0);
    return catch_error([&] { transport.endpoint(0).recv(0, bwd(2, 0), 60); });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto t0 = std::chrono::steady_clock::now();
  transport.cancel("rank 0 failed: test");
  Error e = waiter.get();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_EQ(e.code(), ErrorCode::kCancelled);
  EXPECT_TRUE(contains(e.what(), "0RECV_B2")) << e.what();
  EXPECT_TRUE(contains(e.what(), "rank 0 failed: test")) << e.what();
  EXPECT_TRUE(transport.cancelled());
  Worker w(0);
  EXPECT_EQ(catch_error([&] { transport.endpoint(0).send(0, fwd(0, 1), on_device({1}, {1}, 0), 10); }).code(),
            ErrorCode::kCancelled);
  transport.reset();
  EXPECT_FALSE(transport.cancelled());
  Tensor x = on_device({4, 5, 6}, {3}, 0);
  transport.endpoint(0).send(0, fwd(0, 1), x, 10);
  EXPECT_TRUE(same_bits(transport.endpoint(0).recv(0, fwd(0, 1), 10), x));
}

// ---- two GPUs ------------------------------------------------------------------------------------

TEST(NcclTransportTwoGpus, ActivationsForwardGradientsBackInAnyOrder) {
  PF_REQUIRE_GPUS(2);
  NcclTransport transport({0, 1}, test_options());
  const int m = 4;
  const Shape shape = {256, 1024};  // 1 MiB per message: several NCCL chunks
  std::vector<std::vector<float>> acts, grads;
  for (int i = 0; i < m; ++i) {
    acts.push_back(pattern(256 * 1024, 100 + i));
    grads.push_back(pattern(256 * 1024, 200 + i));
  }
  run_ranks({0, 1}, [&](int rank) {
    comm::Transport& ep = transport.endpoint(rank);
    if (rank == 0) {
      for (int i = 0; i < m; ++i) ep.send(1, fwd(i, 1), on_device(acts[i], shape, 0), 30);
      for (int i = m - 1; i >= 0; --i) {  // reverse order: the stash must hold the others
        Tensor g = ep.recv(1, bwd(i, 0), 30);
        EXPECT_EQ(g.device(), Device::cuda(0));
        EXPECT_EQ(g.to_vector(), grads[i]) << "gradient " << i;
      }
    } else {
      for (int i : {1, 0, 3, 2}) {
        Tensor a = ep.recv(0, fwd(i, 1), 30);
        EXPECT_EQ(a.device(), Device::cuda(1));
        EXPECT_EQ(a.shape(), shape);
        EXPECT_EQ(a.to_vector(), acts[i]) << "activation " << i;
      }
      for (int i = 0; i < m; ++i) ep.send(0, bwd(i, 0), on_device(grads[i], shape, 1), 30);
    }
  });
  EXPECT_EQ(transport.pending_messages(), 0u);
}

TEST(NcclTransportTwoGpus, CrossingSendsDoNotDeadlock) {
  PF_REQUIRE_GPUS(2);
  NcclTransport transport({0, 1}, test_options());
  // Rank 0 sends F1 then waits for B0; rank 1 sends B0 then waits for F1: with one stream or one
  // communicator per rank pair this would deadlock.
  run_ranks({0, 1}, [&](int rank) {
    comm::Transport& ep = transport.endpoint(rank);
    for (int round = 0; round < 20; ++round) {
      if (rank == 0) {
        ep.send(1, fwd(round, 1), on_device(pattern(4096, round), {4096}, 0), 30);
        EXPECT_EQ(ep.recv(1, bwd(round, 0), 30).to_vector(), pattern(4096, 1000 + round));
      } else {
        ep.send(0, bwd(round, 0), on_device(pattern(4096, 1000 + round), {4096}, 1), 30);
        EXPECT_EQ(ep.recv(0, fwd(round, 1), 30).to_vector(), pattern(4096, round));
      }
    }
  });
  EXPECT_EQ(transport.pending_messages(), 0u);
}

TEST(NcclTransportTwoGpus, RecvTimeoutAbortsTheChannelAndResetRebuildsIt) {
  PF_REQUIRE_GPUS(2);
  NcclTransport transport({0, 1}, test_options());
  Error e = [&] {
    Worker w(1);
    return catch_error([&] { transport.endpoint(1).recv(0, fwd(5, 1), 0.3); });
  }();
  EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  EXPECT_TRUE(contains(e.what(), "rank 1: 1RECV_F5 (micro-batch 5)")) << e.what();
  EXPECT_TRUE(contains(e.what(), "for rank 0")) << e.what();
  // The aborted channel refuses until reset().
  {
    Worker w(0);
    EXPECT_EQ(catch_error([&] { transport.endpoint(0).send(1, fwd(5, 1), on_device({1}, {1}, 0), 10); }).code(),
              ErrorCode::kNcclError);
  }
  transport.reset();
  EXPECT_GE(transport.rebuilt_channels(), 1);
  run_ranks({0, 1}, [&](int rank) {
    if (rank == 0) transport.endpoint(0).send(1, fwd(5, 1), on_device({1, 2, 3}, {3}, 0), 30);
    if (rank == 1) {
      EXPECT_EQ(transport.endpoint(1).recv(0, fwd(5, 1), 30).to_vector(), std::vector<float>({1, 2, 3}));
    }
  });
}

TEST(NcclTransportTwoGpus, CancelWakesAReceiverWaitingOnAnotherGpu) {
  PF_REQUIRE_GPUS(2);
  NcclTransport transport({0, 1}, test_options());
  auto waiter = std::async(std::launch::async, [&] {
    Worker w(1);
    return catch_error([&] { transport.endpoint(1).recv(0, fwd(0, 1), 60); });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto t0 = std::chrono::steady_clock::now();
  transport.cancel("rank 0 failed");
  Error e = waiter.get();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_EQ(e.code(), ErrorCode::kCancelled);
  EXPECT_TRUE(contains(e.what(), "rank 1: 1RECV_F0 (peer rank 0) cancelled: rank 0 failed")) << e.what();
  transport.reset();
  run_ranks({0, 1}, [&](int rank) {
    if (rank == 0) transport.endpoint(0).send(1, fwd(0, 1), on_device({9}, {1}, 0), 30);
    if (rank == 1) {
      EXPECT_EQ(transport.endpoint(1).recv(0, fwd(0, 1), 30).to_vector(), std::vector<float>({9}));
    }
  });
}

TEST(NcclTransportTwoGpus, ResetDropsUndeliveredMessages) {
  PF_REQUIRE_GPUS(2);
  NcclTransport transport({0, 1}, test_options());
  {
    Worker w(0);
    transport.endpoint(0).send(1, fwd(0, 1), on_device({1, 1}, {2}, 0), 30);
  }
  EXPECT_EQ(transport.pending_messages(), 1u);
  transport.reset();
  EXPECT_EQ(transport.pending_messages(), 0u);
  run_ranks({0, 1}, [&](int rank) {
    if (rank == 0) transport.endpoint(0).send(1, fwd(0, 1), on_device({2, 2}, {2}, 0), 30);
    if (rank == 1) {
      EXPECT_EQ(transport.endpoint(1).recv(0, fwd(0, 1), 30).to_vector(), std::vector<float>({2, 2}));
    }
  });
}

TEST(NcclTransportTwoGpus, TensorsMustBeOnTheSendersDevice) {
  PF_REQUIRE_GPUS(2);
  NcclTransport transport({0, 1}, test_options());
  Worker w(0);
  Error e = catch_error([&] { transport.endpoint(0).send(1, fwd(0, 1), on_device({1}, {1}, 1), 10); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "cuda:1")) << e.what();
}

}  // namespace
}  // namespace pf::cuda

// Run under mpirun with 2 or 4 processes (tests/comm/mpi_test.sh). Every rank runs every test in
// the same order: the tests are collective. `pair()` is a 2-member world: the whole launch with 2
// processes, ranks {0,1} and {2,3} with 4 (so a sub-world is tested too).
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/mpi_world.h"
#include "runtime/core/error.h"
#include "runtime/core/limits.h"
#include "runtime/tensor/memory_tracker.h"

namespace pf::comm {
namespace {

std::unique_ptr<MpiWorld> g_pair;
MpiWorld& world() { return *MpiWorld::world(); }
MpiWorld& pair() { return *g_pair; }

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

MessageKey act(int mb, int stage) { return MessageKey{MessageKind::kActivation, mb, stage}; }
MessageKey grad(int mb, int stage) { return MessageKey{MessageKind::kGradient, mb, stage}; }

// A tensor whose bytes are a function of `seed` (any bit pattern, NaNs included).
Tensor patterned(const Shape& shape, DType dtype, int seed) {
  Tensor t = Tensor::empty(shape, dtype);
  std::mt19937 gen(seed);
  unsigned char* p = t.data<unsigned char>();
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(gen());
  return t;
}

void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.nbytes(), want.nbytes()) << what;
  EXPECT_EQ(std::memcmp(got.data<char>(), want.data<char>(), got.nbytes()), 0) << what << ": bytes differ";
}

template <typename F>
Error expect_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no pf::Error thrown";
  return Error(ErrorCode::kOk, "");
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(MpiWorld, RanksAndDescription) {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  ASSERT_NE(size, nullptr);
  ASSERT_NE(rank, nullptr);
  EXPECT_TRUE(launched_by_mpi());
  EXPECT_EQ(world().size(), std::atoi(size));
  EXPECT_EQ(world().rank(), std::atoi(rank));
  EXPECT_EQ(world().endpoint().rank(), world().rank());
  EXPECT_EQ(world().endpoint().num_ranks(), world().size());
  const std::string d = world().describe();
  EXPECT_TRUE(contains(d, "MPI rank " + std::string(rank) + " of " + size + " (host ")) << d;
  EXPECT_TRUE(contains(d, "pid " + std::to_string(getpid()) + ")")) << d;
  EXPECT_EQ(pair().size(), 2);
  EXPECT_EQ(pair().rank(), world().rank() % 2);
  if (world().size() == 4) {
    EXPECT_TRUE(contains(pair().describe(), "world rank " + std::string(rank))) << pair().describe();
  }
}

TEST(MpiTransport, TensorsRoundTripBitwise) {
  const std::vector<Shape> shapes = {{1}, {7}, {3, 5}, {2, 3, 4}, {0, 4}, {}, {1, 1, 1, 1, 1, 1, 1, 2}};
  const std::vector<DType> dtypes = {DType::kF32, DType::kI32, DType::kBF16};
  Transport& t = pair().endpoint();
  int i = 0;
  for (const Shape& shape : shapes) {
    for (DType dtype : dtypes) {
      const int seed = 1000 * (world().rank() / 2) + i;  // the same on both members of a pair
      const std::string what = shape_to_string(shape) + " " + dtype_name(dtype);
      if (pair().rank() == 0) {
        t.send(1, act(i, 1), patterned(shape, dtype, seed), 10.0);
        expect_same(t.recv(1, grad(i, 0), 10.0), patterned(shape, dtype, seed + 1), what + " back");
      } else {
        expect_same(t.recv(0, act(i, 1), 10.0), patterned(shape, dtype, seed), what);
        t.send(0, grad(i, 0), patterned(shape, dtype, seed + 1), 10.0);
      }
      ++i;
    }
  }
  pair().transport().drain(10.0);
  EXPECT_EQ(pair().transport().pending_sends(), 0u);
}

TEST(MpiTransport, MessagesAreMatchedByKeyNotByOrder) {
  Transport& t = pair().endpoint();
  if (pair().rank() == 0) {
    for (int mb = 0; mb < 6; ++mb) t.send(1, act(mb, 1), Tensor::from_vector({1}, {float(mb)}), 10.0);
    t.send(1, MessageKey{MessageKind::kContextOut, 2, 0}, Tensor::from_ints({2}, {7, 8}), 10.0);
    t.send(1, grad(4, 1), Tensor::from_vector({1}, {-4.0f}), 10.0);
  } else {
    EXPECT_EQ(t.recv(0, grad(4, 1), 10.0).to_vector(), std::vector<float>{-4.0f});
    for (int mb : {5, 3, 1, 0, 2, 4}) EXPECT_EQ(t.recv(0, act(mb, 1), 10.0).to_vector(), std::vector<float>{float(mb)});
    Tensor ctx = t.recv(0, MessageKey{MessageKind::kContextOut, 2, 0}, 10.0);
    EXPECT_EQ(ctx.dtype(), DType::kI32);
    EXPECT_EQ(ctx.i32()[0], 7);
    EXPECT_EQ(ctx.i32()[1], 8);
  }
  pair().transport().drain(10.0);
  pair().barrier(10.0);
}

TEST(MpiTransport, FourMebibyteTensorSentBeforeTheReceiveIsPosted) {
  const Shape shape = {1024, 1024};  // 4 MiB of f32
  Transport& t = pair().endpoint();
  if (pair().rank() == 0) {
    t.send(1, act(0, 1), patterned(shape, DType::kF32, 42), 10.0);
    EXPECT_GE(pair().transport().pending_sends(), 1u);  // too large to go out before the receive
    pair().barrier(10.0);
    pair().transport().drain(10.0);
    EXPECT_EQ(pair().transport().pending_sends(), 0u);
  } else {
    pair().barrier(10.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    expect_same(t.recv(0, act(0, 1), 10.0), patterned(shape, DType::kF32, 42), "4 MiB");
  }
  pair().barrier(10.0);
}

TEST(MpiTransport, ReceivePostedBeforeTheSend) {
  Transport& t = pair().endpoint();
  pair().barrier(10.0);
  if (pair().rank() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    t.send(1, act(3, 2), patterned({1024, 1024}, DType::kF32, 7), 10.0);
    t.send(1, act(4, 2), patterned({5}, DType::kI32, 8), 10.0);
    pair().transport().drain(10.0);
  } else {
    const auto start = std::chrono::steady_clock::now();
    expect_same(t.recv(0, act(3, 2), 10.0), patterned({1024, 1024}, DType::kF32, 7), "large");
    EXPECT_GE(seconds_since(start), 0.15);  // it really waited for the send
    expect_same(t.recv(0, act(4, 2), 10.0), patterned({5}, DType::kI32, 8), "small");
  }
  pair().barrier(10.0);
}

TEST(MpiTransport, PointToPointOnAWorkerThreadWhileTheMainThreadRunsCollectives) {
  constexpr int kRounds = 20;
  std::thread worker([&] {
    Transport& t = pair().endpoint();
    for (int mb = 0; mb < kRounds; ++mb) {
      if (pair().rank() == 0) {
        t.send(1, act(mb, 1), Tensor::from_vector({3}, {float(mb), 1, 2}), 10.0);
        EXPECT_EQ(t.recv(1, grad(mb, 0), 10.0).to_vector()[0], float(-mb));
      } else {
        EXPECT_EQ(t.recv(0, act(mb, 1), 10.0).to_vector()[0], float(mb));
        t.send(0, grad(mb, 0), Tensor::from_vector({1}, {float(-mb)}), 10.0);
      }
    }
  });
  for (int i = 0; i < kRounds; ++i) {
    double x = pair().rank() + i;
    pair().all_reduce_sum(&x, 1, 10.0);
    EXPECT_EQ(x, 1.0 + 2 * i);
  }
  worker.join();
  pair().transport().drain(10.0);
  pair().barrier(10.0);
}

TEST(MpiWorld, CollectivesGiveTheSameResultOnEveryRank) {
  MpiWorld& w = world();
  const int n = w.size();
  // all_gather
  const int32_t mine[2] = {w.rank(), 3 * w.rank() + 1};
  const std::vector<char> g = w.all_gather(mine, sizeof(mine), 10.0);
  ASSERT_EQ(g.size(), n * sizeof(mine));
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(reinterpret_cast<const int32_t*>(g.data())[2 * r], r);
    EXPECT_EQ(reinterpret_cast<const int32_t*>(g.data())[2 * r + 1], 3 * r + 1);
  }
  // broadcast from the last rank
  std::vector<double> b(1000, -1.0);
  if (w.rank() == n - 1) {
    for (size_t i = 0; i < b.size(); ++i) b[i] = std::sqrt(double(i));
  }
  w.broadcast(b.data(), b.size() * sizeof(double), n - 1, 10.0);
  for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], std::sqrt(double(i))) << i;
  std::string text = w.rank() == 0 ? "plan: 1f1b, 4 micro-batches" : "";
  broadcast_string(w, &text, 0, 10.0);
  EXPECT_EQ(text, "plan: 1f1b, 4 micro-batches");
  // all_reduce_sum: integer-valued floats sum exactly; random ones give the same bits everywhere.
  std::vector<float> ints(4096);
  for (size_t i = 0; i < ints.size(); ++i) ints[i] = float(i % 97) * float(w.rank() + 1);
  w.all_reduce_sum(ints.data(), ints.size(), 10.0);
  for (size_t i = 0; i < ints.size(); ++i) ASSERT_EQ(ints[i], float(i % 97) * float(n * (n + 1) / 2)) << i;
  std::mt19937 gen(w.rank());
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> f(10000);
  std::vector<double> d(3000);
  std::vector<double> expected_d(d.size(), 0.0);
  for (float& x : f) x = dist(gen);
  for (double& x : d) {
    const double a = dist(gen) * 1e-3;
    x = a + dist(gen);
  }
  for (int r = 0; r < n; ++r) {
    std::mt19937 other(r);
    for (size_t i = 0; i < f.size(); ++i) dist(other);
    for (size_t i = 0; i < d.size(); ++i) {
      const double a = dist(other) * 1e-3;
      expected_d[i] += a + dist(other);
    }
  }
  w.all_reduce_sum(f.data(), f.size(), 10.0);
  w.all_reduce_sum(d.data(), d.size(), 10.0);
  for (size_t i = 0; i < d.size(); ++i) ASSERT_NEAR(d[i], expected_d[i], 1e-12) << i;
  const std::vector<char> all_f = w.all_gather(f.data(), f.size() * sizeof(float), 10.0);
  const std::vector<char> all_d = w.all_gather(d.data(), d.size() * sizeof(double), 10.0);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(std::memcmp(all_f.data() + r * f.size() * sizeof(float), f.data(), f.size() * sizeof(float)), 0)
        << "float sums differ between rank " << r << " and rank " << w.rank();
    EXPECT_EQ(std::memcmp(all_d.data() + r * d.size() * sizeof(double), d.data(), d.size() * sizeof(double)), 0)
        << "double sums differ between rank " << r << " and rank " << w.rank();
  }
  // reduce_scatter_sum: member r gets block r of the sum (integer-valued: exact), block r of every
  // member's contribution holding (i % 89 + r) * (its rank + 1).
  const size_t count = 1000;
  std::vector<float> blocks(count * static_cast<size_t>(n)), scattered(count, -1.0f);
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) blocks[r * count + i] = float(i % 89 + r) * float(w.rank() + 1);
  w.reduce_scatter_sum(blocks.data(), count, scattered.data(), 10.0);
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(scattered[i], float(i % 89 + w.rank()) * float(n * (n + 1) / 2)) << i;
  // all_gather_doubles and the pair world
  const std::vector<double> gd = all_gather_doubles(pair(), {0.25 * world().rank()}, 10.0);
  const int base = world().rank() - pair().rank();
  EXPECT_EQ(gd, (std::vector<double>{0.25 * base, 0.25 * (base + 1)}));
}

TEST(MpiWorld, DisagreeingSizesFailOnEveryRankNamingTheRank) {
  char data[8] = {};
  const Error e = expect_error([&] { world().all_gather(data, world().rank() == 1 ? 4 : 8, 10.0); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "rank " + std::to_string(world().rank()) +
                                     ": all_gather: rank 1 contributes 4 bytes where the others contribute 8"))
      << e.what();
  const Error e2 = expect_error([&] {
    if (world().rank() == 0) {
      world().barrier(10.0);
    } else {
      float x = 0;
      world().all_reduce_sum(&x, 1, 10.0);
    }
  });
  EXPECT_TRUE(contains(e2.what(), "collectives out of step")) << e2.what();
  world().barrier(10.0);  // still in step
}

TEST(MpiTransport, ReceiveTimeoutNamesRankActionMicroBatchAndPeer) {
  Transport& t = pair().endpoint();
  if (pair().rank() == 1) {
    const auto start = std::chrono::steady_clock::now();
    const Error e = expect_error([&] { t.recv(0, act(5, 1), 0.3); });
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_EQ(std::string(e.what()), "rank 1: 1RECV_F5 (micro-batch 5) waited more than 0.3 s for rank 0");
    EXPECT_GE(seconds_since(start), 0.3);
    EXPECT_LT(seconds_since(start), 2.0);
  }
  pair().barrier(10.0);
  // The receive given up on took nothing: the message sent now arrives intact.
  if (pair().rank() == 0) {
    t.send(1, act(5, 1), Tensor::from_vector({2}, {5, 6}), 10.0);
    pair().transport().drain(10.0);
  } else {
    EXPECT_EQ(t.recv(0, act(5, 1), 10.0).to_vector(), (std::vector<float>{5, 6}));
  }
  pair().barrier(10.0);
}

TEST(MpiTransport, HostileHeadersAreRefusedBeforeAllocating) {
  MpiTransport& t = pair().transport();
  std::vector<WireHeader> headers(4);
  for (int i = 0; i < 4; ++i) {
    headers[i].micro_batch = 10 + i;
    headers[i].stage = 1;
    headers[i].dtype = static_cast<int32_t>(DType::kF32);
  }
  headers[0].ndim = 3;  // (2^31 - 1)^3 elements
  for (int i = 0; i < 3; ++i) headers[0].dims[i] = limits::kMaxDimension;
  headers[0].payload_bytes = 4;
  headers[1].ndim = 2;  // 2^40 elements: valid dimensions, 4 TiB
  headers[1].dims[0] = headers[1].dims[1] = int64_t{1} << 20;
  headers[1].payload_bytes = uint64_t{1} << 42;
  headers[2].magic = 0xdeadbeef;
  headers[3].ndim = 1;
  headers[3].dims[0] = 4;
  headers[3].payload_bytes = 8;  // 4 floats are 16 bytes
  if (pair().rank() == 0) {
    for (const WireHeader& h : headers) {
      const MessageKey key = act(h.micro_batch, 1);
      ASSERT_EQ(MPI_Send(&h, sizeof(h), MPI_BYTE, 1, t.tags().header(key), pair().point_to_point_comm()), MPI_SUCCESS);
    }
  } else {
    MemoryTracker& memory = memory_tracker(Device::cpu());
    memory.reset_peaks();
    const int64_t before = memory.stats().total_current;
    const std::vector<std::string> why = {"needs more than the limit", "needs more than the limit", "magic",
                                          "announces 8 payload bytes"};
    for (int i = 0; i < 4; ++i) {
      const Error e = expect_error([&] { t.recv(0, act(10 + i, 1), 10.0); });
      EXPECT_EQ(e.code(), ErrorCode::kDataLoss) << e.what();
      EXPECT_TRUE(contains(e.what(), "rank 1: 1RECV_F" + std::to_string(10 + i) + " from rank 0")) << e.what();
      EXPECT_TRUE(contains(e.what(), why[i])) << e.what();
    }
    EXPECT_LT(memory.stats().total_peak, before + (1 << 20));
  }
  pair().barrier(10.0);
}

TEST(MpiTransport, OutOfLayoutKeysAndOversizedTagLayoutsAreRefused) {
  Transport& t = pair().endpoint();
  const Error e = expect_error([&] { t.send(1 - pair().rank(), act(0, 1024), Tensor::from_vector({1}, {1}), 1.0); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "stage 1024 is outside this transport's [0, 1024)")) << e.what();
  MpiTransport::Options huge;
  huge.max_stages = limits::kMaxStages;
  huge.max_micro_batches = limits::kMaxMicroBatches;
  const Error e2 = expect_error([&] { world().split(0, world().rank(), huge, 10.0); });
  EXPECT_EQ(e2.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e2.what(), "MPI_TAG_UB")) << e2.what();
  world().barrier(10.0);
}

TEST(MpiWorld, AbortCancelsTheOtherRanksWithinTwoSeconds) {
  // A world of its own: an aborted world stays aborted.
  std::unique_ptr<MpiWorld> sub = world().split(0, world().rank(), 10.0);
  ASSERT_NE(sub, nullptr);
  sub->barrier(10.0);
  const auto start = std::chrono::steady_clock::now();
  if (sub->rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    sub->abort("injected failure");
    EXPECT_TRUE(sub->aborted());
  } else if (sub->rank() == 3) {
    const Error e = expect_error([&] { sub->barrier(30.0); });
    EXPECT_EQ(e.code(), ErrorCode::kCancelled);
    EXPECT_EQ(std::string(e.what()), "rank 3: barrier cancelled: rank 1 failed: injected failure");
    EXPECT_LT(seconds_since(start), 2.3);
  } else {
    const Error e = expect_error([&] { sub->endpoint().recv(1, act(2, 1), 30.0); });
    EXPECT_EQ(e.code(), ErrorCode::kCancelled);
    EXPECT_EQ(std::string(e.what()), "rank " + std::to_string(sub->rank()) +
                                         ": 1RECV_F2 (peer rank 1) cancelled: rank 1 failed: injected failure");
    EXPECT_LT(seconds_since(start), 2.3);
  }
  EXPECT_TRUE(sub->aborted());
  EXPECT_EQ(expect_error([&] { sub->barrier(1.0); }).code(), ErrorCode::kCancelled);
  const int peer = sub->rank() == 0 ? 1 : 0;
  EXPECT_EQ(expect_error([&] { sub->endpoint().send(peer, act(0, 1), Tensor::from_vector({1}, {1}), 1.0); }).code(),
            ErrorCode::kCancelled);
  sub.reset();
  world().barrier(10.0);  // the parent world is unaffected
  EXPECT_FALSE(world().aborted());
}

}  // namespace
}  // namespace pf::comm

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int code = 1;
  try {
    auto& world = *pf::comm::MpiWorld::world();
    pf::comm::g_pair = world.split(world.rank() / 2, world.rank(), 30.0);
    code = RUN_ALL_TESTS();
    pf::comm::g_pair.reset();
  } catch (const pf::Error& e) {
    std::fprintf(stderr, "mpi_world_test: %s\n", e.what());
  }
  return code;
}

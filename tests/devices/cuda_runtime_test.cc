// The CUDA device runtime on a GPU: caching allocator (reuse, the cross-stream rule, out-of-memory,
// accounting), streams and events, pinned memory, tensor copies. Every test skips without a GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/devices/cuda/caching_allocator.h"
#include "runtime/devices/cuda/cuda_status.h"
#include "runtime/devices/cuda/device_copy.h"
#include "runtime/devices/cuda/device_scope.h"
#include "runtime/devices/cuda/pinned_host.h"
#include "runtime/devices/cuda/runtime.h"
#include "runtime/devices/cuda/stream.h"
#include "runtime/tensor/memory_tracker.h"
#include "runtime/tensor/tensor.h"
#include "tests/devices/gpu_test_util.h"

namespace pf::cuda {
namespace {

using testing::catch_error;
using testing::contains;
using testing::pattern;
using testing::StreamGate;

// ---- caching allocator ------------------------------------------------------------------------------

TEST(CachingAllocator, ReusesFreedBlocksOfTheSameRoundedSize) {
  PF_REQUIRE_GPUS(1);
  CachingAllocator a(0);
  void* p = a.allocate(1000);
  ASSERT_NE(p, nullptr);
  CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.bytes_in_use, 1024u);
  EXPECT_EQ(s.bytes_reserved, 1024u);
  EXPECT_EQ(s.cuda_mallocs, 1);
  a.deallocate(p, 1000);
  s = a.stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_reserved, 1024u);  // cached, not returned
  EXPECT_EQ(s.bytes_cached, 1024u);

  void* q = a.allocate(600);  // rounds to 1024 as well
  EXPECT_EQ(q, p);
  s = a.stats();
  EXPECT_EQ(s.cache_hits, 1);
  EXPECT_EQ(s.cuda_mallocs, 1);

  void* big = a.allocate(8192);
  EXPECT_NE(big, q);
  a.deallocate(big, 8192);
  void* small = a.allocate(2048);  // the 8192 block is more than 1.25x: not handed out
  EXPECT_NE(small, big);
  EXPECT_EQ(a.stats().cuda_mallocs, 3);
  a.deallocate(q, 600);
  a.deallocate(small, 2048);
  EXPECT_EQ(a.stats().peak_bytes_in_use, 1024u + 8192u);

  a.empty_cache();
  s = a.stats();
  EXPECT_EQ(s.bytes_reserved, 0u);
  EXPECT_EQ(s.cuda_frees, 3);
  EXPECT_EQ(s.blocks_free, 0);
}

TEST(CachingAllocator, AFreedBlockIsReusedOnlyAfterItsStreamPassedTheFree) {
  PF_REQUIRE_GPUS(1);
  DeviceScope device(0);
  CachingAllocator a(0);
  CudaStream stream(0);
  CurrentStreamScope current(stream);
  // Two blocks; one is freed and reusable before the stream is held back (no cudaMalloc while the
  // stream is gated).
  void* p = a.allocate(4096);
  void* x = a.allocate(4096);
  a.deallocate(x, 4096);
  stream.synchronize(30, "allocator test");
  StreamGate gate(stream.get());  // the stream is "busy" until released
  a.deallocate(p, 4096);          // reuse event recorded behind the gate
  void* q = a.allocate(4096);
  EXPECT_EQ(a.stats().blocks_pending, 1);  // p: still waiting for the gated stream
  EXPECT_EQ(q, x);
  EXPECT_NE(q, p) << "a block was reused while its stream had not passed the free";
  EXPECT_EQ(a.stats().cuda_mallocs, 2);
  gate.release();
  stream.synchronize(30, "allocator test");
  void* r = a.allocate(4096);
  EXPECT_EQ(r, p);
  EXPECT_EQ(a.stats().blocks_pending, 0);
  a.deallocate(q, 4096);
  a.deallocate(r, 4096);
  stream.synchronize(30, "allocator test");
}

TEST(CachingAllocator, OutOfMemoryEmptiesTheCacheRetriesThenNamesSizeAndDevice) {
  PF_REQUIRE_GPUS(1);
  CachingAllocator a(0);
  a.set_reserve_limit(8192);
  void* p = a.allocate(4096);
  a.deallocate(p, 4096);
  void* q = a.allocate(8192);  // 4096 cached + 8192 > limit: the cache is emptied, then it fits
  CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.oom_retries, 1);
  EXPECT_EQ(s.bytes_reserved, 8192u);
  EXPECT_EQ(s.cuda_frees, 1);
  Error e = catch_error([&] { a.allocate(1000); });
  EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
  EXPECT_TRUE(contains(e.what(), "1000 bytes")) << e.what();
  EXPECT_TRUE(contains(e.what(), "cuda:0")) << e.what();
  a.deallocate(q, 8192);
}

TEST(CachingAllocator, RealOutOfMemoryIsAnError) {
  PF_REQUIRE_GPUS(1);
  CachingAllocator a(0);
  size_t free_bytes = 0, total = 0;
  {
    DeviceScope d(0);
    check_cuda(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo");
  }
  Error e = catch_error([&] { a.allocate(total * 4); });
  EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory) << e.what();
  EXPECT_TRUE(contains(e.what(), std::to_string(total * 4) + " bytes")) << e.what();
  // Still usable afterwards.
  void* p = a.allocate(1 << 20);
  a.deallocate(p, 1 << 20);
}

TEST(CachingAllocator, CudaTensorsUseItAndAreChargedPerCategory) {
  PF_REQUIRE_GPUS(1);
  EXPECT_EQ(&allocator_for(Device::cuda(0)), static_cast<Allocator*>(&caching_allocator(0)));
  MemoryTracker& tracker = memory_tracker(Device::cuda(0));
  const int params = static_cast<int>(MemoryCategory::kParameters);
  const int acts = static_cast<int>(MemoryCategory::kActivations);
  MemoryStats before = tracker.stats();
  CachingAllocatorStats abefore = caching_allocator(0).stats();
  {
    Tensor w, x;
    {
      MemoryCategoryScope scope(MemoryCategory::kParameters);
      w = Tensor::empty({100, 10}, DType::kF32, Device::cuda(0));  // 4000 bytes
    }
    {
      MemoryCategoryScope scope(MemoryCategory::kActivations);
      x = Tensor::empty({3000}, DType::kBF16, Device::cuda(0));  // 6000 bytes
    }
    MemoryStats during = tracker.stats();
    EXPECT_EQ(during.current[params] - before.current[params], 4000);
    EXPECT_EQ(during.current[acts] - before.current[acts], 6000);
    EXPECT_EQ(during.total_current - before.total_current, 10000);
    EXPECT_GE(during.peak[acts], before.current[acts] + 6000);
    EXPECT_EQ(caching_allocator(0).stats().bytes_in_use - abefore.bytes_in_use, 4096u + 6144u);
  }
  MemoryStats after = tracker.stats();
  EXPECT_EQ(after.current[params], before.current[params]);
  EXPECT_EQ(after.current[acts], before.current[acts]);
  EXPECT_GE(after.peak[acts], before.current[acts] + 6000);  // peaks stay
  EXPECT_EQ(caching_allocator(0).stats().bytes_in_use, abefore.bytes_in_use);
}

TEST(CachingAllocator, ManyThreadsAllocateAndFreeConcurrently) {
  PF_REQUIRE_GPUS(1);
  CachingAllocator a(0);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      try {
        DeviceScope d(0);
        CudaStream s(0);
        CurrentStreamScope cs(s);
        for (int i = 0; i < 200; ++i) {
          size_t n = 512 * (1 + (i + t) % 7);
          void* p = a.allocate(n);
          check_cuda(cudaMemsetAsync(p, t, n, s.get()), "memset");
          a.deallocate(p, n);
        }
        s.synchronize(60, "threads");
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(a.stats().bytes_in_use, 0u);
  EXPECT_EQ(a.stats().blocks_in_use, 0);
}

// ---- streams and events --------------------------------------------------------------------------

TEST(Streams, EventsOrderWorkAcrossStreams) {
  PF_REQUIRE_GPUS(1);
  DeviceScope d(0);
  CudaStream a(0), b(0);
  PinnedHostBuffer host(4096);
  std::memset(host.data(), 0, host.size());
  void* buf = nullptr;
  check_cuda(cudaMalloc(&buf, 4096), "cudaMalloc");
  CudaEvent on_a(0), on_b(0);
  {
    StreamGate gate(a.get());
    check_cuda(cudaMemsetAsync(buf, 7, 4096, a.get()), "memset");
    on_a.record(a);
    on_a.make_stream_wait(b.get());
    check_cuda(cudaMemcpyAsync(host.data(), buf, 4096, cudaMemcpyDeviceToHost, b.get()), "copy");
    on_b.record(b);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(on_a.query());
    EXPECT_FALSE(on_b.query()) << "stream b ran ahead of the event it waits for";
    EXPECT_FALSE(a.query());
    EXPECT_FALSE(b.query());
    EXPECT_EQ(host.as<unsigned char>()[0], 0);
    gate.release();
    on_b.synchronize(30, "waiting for stream b");
  }
  EXPECT_TRUE(on_a.query());
  EXPECT_TRUE(b.query());
  for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(host.as<unsigned char>()[i], 7) << i;
  check_cuda(cudaFree(buf), "cudaFree");
}

TEST(Streams, HostWaitsTimeOutAndHonourCancel) {
  PF_REQUIRE_GPUS(1);
  CudaStream s(0);
  CudaEvent e(0);
  StreamGate gate(s.get());
  e.record(s);
  auto t0 = std::chrono::steady_clock::now();
  Error err = catch_error([&] { e.synchronize(0.1, "waiting for the gated stream"); });
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(err.code(), ErrorCode::kTimeout);
  EXPECT_TRUE(contains(err.what(), "waiting for the gated stream")) << err.what();
  EXPECT_TRUE(contains(err.what(), "timed out")) << err.what();
  EXPECT_GE(waited, 0.09);
  EXPECT_LT(waited, 5.0);
  EXPECT_EQ(catch_error([&] { s.synchronize(0.05, "stream sync"); }).code(), ErrorCode::kTimeout);

  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    cancel = true;
  });
  EXPECT_EQ(e.wait(30, &cancel, "cancellable"), WaitResult::kCancelled);
  canceller.join();
  gate.release();
  EXPECT_EQ(e.wait(30, nullptr, "after release"), WaitResult::kDone);
}

TEST(Streams, CurrentStreamScopesNestAndDeviceScopesRestore) {
  PF_REQUIRE_GPUS(1);
  EXPECT_EQ(current_stream().device, -1);
  CudaStream s1(0), s2(0);
  {
    CurrentStreamScope a(s1);
    EXPECT_EQ(current_stream().stream, s1.get());
    EXPECT_EQ(current_stream_for(0), s1.get());
    EXPECT_EQ(current_stream_for(1), nullptr);
    {
      CurrentStreamScope b(s2);
      EXPECT_EQ(current_stream().stream, s2.get());
    }
    EXPECT_EQ(current_stream().stream, s1.get());
  }
  EXPECT_EQ(current_stream().device, -1);
  const int before = current_device();
  {
    DeviceScope scope(device_count() - 1);
    EXPECT_EQ(current_device(), device_count() - 1);
  }
  EXPECT_EQ(current_device(), before);
  EXPECT_EQ(catch_error([] { DeviceScope bad(device_count()); }).code(), ErrorCode::kInvalidArgument);
}

// ---- pinned memory -------------------------------------------------------------------------------

TEST(PinnedHost, BuffersArePinnedMovableAndCopyAsynchronously) {
  PF_REQUIRE_GPUS(1);
  PinnedHostBuffer a(1 << 20);
  EXPECT_EQ(a.size(), static_cast<size_t>(1 << 20));
  EXPECT_TRUE(is_pinned_host_memory(a.data()));
  std::vector<char> pageable(16);
  EXPECT_FALSE(is_pinned_host_memory(pageable.data()));
  void* raw = a.data();
  PinnedHostBuffer b(std::move(a));
  EXPECT_EQ(b.data(), raw);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_TRUE(a.empty());

  // host (pinned) -> device -> host (pinned), on one stream.
  DeviceScope d(0);
  CudaStream s(0);
  std::vector<float> values = pattern(1000, 3);
  PinnedHostBuffer in(values.size() * sizeof(float)), out(values.size() * sizeof(float));
  std::memcpy(in.data(), values.data(), in.size());
  Tensor dev = Tensor::empty({1000}, DType::kF32, Device::cuda(0));
  copy_from_host_async(dev, in.data(), in.size(), s.get());
  copy_to_host_async(dev, out.data(), out.size(), s.get());
  s.synchronize(30, "pinned round trip");
  EXPECT_EQ(std::memcmp(out.data(), values.data(), out.size()), 0);
  EXPECT_EQ(catch_error([&] { copy_to_host_async(dev, out.data(), 16, s.get()); }).code(),
            ErrorCode::kInvalidArgument);
}

// ---- tensor copies -------------------------------------------------------------------------------

// Bit patterns that must survive: signed zero, denormals, infinities, NaN payloads.
std::vector<uint32_t> special_f32_bits() {
  return {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x7f800000u, 0xff800000u,
          0x7fc00001u, 0xffbadbadu, 0x3f800000u, 0xc2f6e979u, 0x7f7fffffu, 0x33d6bf95u};
}

TEST(TensorCopies, F32AndBf16RoundTripsAreBitExact) {
  PF_REQUIRE_GPUS(1);
  DeviceScope d(0);
  CudaStream s(0);
  CurrentStreamScope current(s);
  std::vector<uint32_t> bits = special_f32_bits();
  std::vector<float> values = pattern(4096 - bits.size(), 11);
  Tensor host = Tensor::empty({64, 64});
  std::memcpy(host.data<char>(), bits.data(), bits.size() * 4);
  std::memcpy(host.data<char>() + bits.size() * 4, values.data(), values.size() * 4);

  Tensor dev = host.to_device(Device::cuda(0));
  EXPECT_EQ(dev.device(), Device::cuda(0));
  EXPECT_EQ(dev.shape(), host.shape());
  Tensor back = dev.to_device(Device::cpu());
  EXPECT_EQ(std::memcmp(back.data<char>(), host.data<char>(), host.nbytes()), 0);

  Tensor host16 = host.to(DType::kBF16);
  Tensor dev16 = host16.to_device(Device::cuda(0));
  Tensor back16 = dev16.to_device(Device::cpu());
  EXPECT_EQ(back16.dtype(), DType::kBF16);
  EXPECT_EQ(std::memcmp(back16.data<char>(), host16.data<char>(), host16.nbytes()), 0);

  // Asynchronous variants on an explicit stream.
  Tensor dev2 = to_device_async(host, Device::cuda(0), s.get());
  Tensor back2 = Tensor::zeros({64, 64});
  copy_tensor_async(back2, dev2, s.get());
  s.synchronize(30, "async round trip");
  EXPECT_EQ(std::memcmp(back2.data<char>(), host.data<char>(), host.nbytes()), 0);
}

TEST(TensorCopies, HostOperationsWorkOnCudaTensors) {
  PF_REQUIRE_GPUS(1);
  DeviceScope d(0);
  CudaStream s(0);
  CurrentStreamScope current(s);
  Tensor z = Tensor::zeros({5, 7}, DType::kF32, Device::cuda(0));
  EXPECT_EQ(z.to_vector(), std::vector<float>(35, 0.0f));
  z.fill(1.25f);
  EXPECT_EQ(z.to_vector(), std::vector<float>(35, 1.25f));
  Tensor host = Tensor::from_vector({5, 7}, pattern(35, 5));
  z.copy_from(host);
  EXPECT_EQ(z.to_vector(), host.to_vector());
  Tensor c = z.clone();
  EXPECT_EQ(c.device(), Device::cuda(0));
  EXPECT_NE(c.storage(), z.storage());
  z.fill(0.0f);  // the clone is independent
  EXPECT_EQ(c.to_vector(), host.to_vector());
  Tensor h = c.to(DType::kBF16);
  EXPECT_EQ(h.device(), Device::cuda(0));
  EXPECT_EQ(h.to_vector(), host.to(DType::kBF16).to_vector());
  Tensor rows = c.slice_rows(2, 4);  // offsets inside device storage
  EXPECT_EQ(rows.to_vector(), host.slice_rows(2, 4).to_vector());
  Tensor ids = Tensor::from_ints({3}, {1, -2, 3}).to_device(Device::cuda(0));
  EXPECT_EQ(ids.to_vector(), std::vector<float>({1, -2, 3}));
  Tensor empty = Tensor::zeros({0, 4}, DType::kF32, Device::cuda(0));
  EXPECT_TRUE(empty.to_vector().empty());
}

TEST(TensorCopies, WithoutACurrentStreamCopiesUseTheDefaultStream) {
  PF_REQUIRE_GPUS(1);
  Tensor host = Tensor::from_vector({4}, {1, 2, 3, 4});
  Tensor dev = host.to_device(Device::cuda(0));
  Tensor z = Tensor::zeros({4}, DType::kF32, Device::cuda(0));
  z.copy_from(dev);
  EXPECT_EQ(z.to_vector(), host.to_vector());
}

TEST(TensorCopies, BetweenTwoGpus) {
  PF_REQUIRE_GPUS(2);
  Tensor host = Tensor::from_vector({1000}, pattern(1000, 9));
  Tensor on0 = host.to_device(Device::cuda(0));
  Tensor on1 = on0.to_device(Device::cuda(1));
  EXPECT_EQ(on1.device(), Device::cuda(1));
  EXPECT_EQ(on1.to_vector(), host.to_vector());
  Tensor z = Tensor::zeros({1000}, DType::kF32, Device::cuda(0));
  z.copy_from(on1);
  EXPECT_EQ(z.to_vector(), host.to_vector());
}

}  // namespace
}  // namespace pf::cuda

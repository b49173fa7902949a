// The caching CPU allocator (runtime/tensor/cpu_allocator.h): size classes, reuse, alignment, the
// cap, the disabled mode, release, stats, the environment variable, concurrent use, and that the
// memory tracker still sees the requested bytes whether or not a block came from the cache.
#include "runtime/tensor/cpu_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/tensor/memory_tracker.h"
#include "runtime/tensor/tensor.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PF_TEST_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define PF_TEST_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define PF_TEST_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define PF_TEST_TSAN 1
#endif

namespace pf {
namespace {

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % CpuAllocator::kAlignment == 0; }

TEST(CpuAllocator, SizeClassesRoundUpByAtMostAnEighth) {
  EXPECT_EQ(CpuAllocator::class_size(0), 64u);
  EXPECT_EQ(CpuAllocator::class_size(1), 64u);
  EXPECT_EQ(CpuAllocator::class_size(64), 64u);
  EXPECT_EQ(CpuAllocator::class_size(65), 128u);
  EXPECT_EQ(CpuAllocator::class_size(1024), 1024u);
  EXPECT_EQ(CpuAllocator::class_size(1025), 1152u);
  EXPECT_EQ(CpuAllocator::class_size(2048), 2048u);
  EXPECT_EQ(CpuAllocator::class_size(2049), 2304u);
  EXPECT_EQ(CpuAllocator::class_size(size_t{3} << 20), size_t{3} << 20);
  for (size_t bytes = 1; bytes < (size_t{1} << 24); bytes = bytes * 5 / 4 + 7) {
    const size_t c = CpuAllocator::class_size(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_EQ(c % 64, 0u) << bytes;
    EXPECT_LE(c, bytes + bytes / 8 + 64) << bytes;
    EXPECT_EQ(CpuAllocator::class_size(c), c) << bytes;  // a class size is its own class
  }
}

TEST(CpuAllocator, ReusesAFreedBlockOfTheSameClass) {
  CpuAllocator a(1 << 20);
  void* p = a.allocate(1000);
  a.deallocate(p, 1000);
  EXPECT_EQ(a.stats().cached_blocks, 1);
  EXPECT_EQ(a.stats().cached_bytes, 1024u);
  void* q = a.allocate(980);  // same 1 KiB class
  EXPECT_EQ(q, p);
  void* r = a.allocate(1000);  // the cache is empty again
  EXPECT_NE(r, p);
  const CpuAllocatorStats s = a.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.returned, 0);
  EXPECT_EQ(s.cached_blocks, 0);
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.limit_bytes, size_t{1} << 20);
  a.deallocate(q, 980);
  a.deallocate(r, 1000);
}

TEST(CpuAllocator, BlocksOfAnotherClassAreNotReused) {
  CpuAllocator a(1 << 20);
  void* p = a.allocate(4096);
  a.deallocate(p, 4096);
  void* q = a.allocate(8192);
  EXPECT_EQ(a.stats().hits, 0);
  EXPECT_EQ(a.stats().cached_blocks, 1);
  a.deallocate(q, 8192);
}

TEST(CpuAllocator, EveryBlockIsAlignedAndWritableToItsRequestedSize) {
  CpuAllocator a(64 << 20);
  std::vector<std::pair<void*, size_t>> blocks;
  for (int round = 0; round < 3; ++round) {  // round 0 misses, later rounds hit
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{100}, size_t{4097}, size_t{65536 + 5},
                         size_t{3} << 20}) {
      void* p = a.allocate(bytes);
      EXPECT_TRUE(aligned(p)) << bytes;
      std::memset(p, 0xab, bytes);
      blocks.emplace_back(p, bytes);
    }
    for (auto& [p, bytes] : blocks) a.deallocate(p, bytes);
    blocks.clear();
  }
  EXPECT_EQ(a.stats().misses, 7);
  EXPECT_EQ(a.stats().hits, 14);
}

TEST(CpuAllocator, CachedBytesNeverExceedTheCap) {
  CpuAllocator a(10000);
  std::vector<void*> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(a.allocate(4096));
  for (void* p : blocks) a.deallocate(p, 4096);
  CpuAllocatorStats s = a.stats();
  EXPECT_EQ(s.cached_blocks, 2);
  EXPECT_EQ(s.cached_bytes, 8192u);
  EXPECT_EQ(s.returned, 3);
  void* big = a.allocate(20000);  // larger than the cap: never cached
  a.deallocate(big, 20000);
  s = a.stats();
  EXPECT_EQ(s.cached_bytes, 8192u);
  EXPECT_EQ(s.returned, 4);
}

TEST(CpuAllocator, ZeroLimitDisablesCaching) {
  CpuAllocator a(0);
  for (int i = 0; i < 3; ++i) {
    void* p = a.allocate(256);
    EXPECT_TRUE(aligned(p));
    a.deallocate(p, 256);
  }
  const CpuAllocatorStats s = a.stats();
  EXPECT_EQ(s.hits, 0);
  EXPECT_EQ(s.misses, 3);
  EXPECT_EQ(s.returned, 3);
  EXPECT_EQ(s.cached_blocks, 0);
  EXPECT_EQ(s.cached_bytes, 0u);
}

TEST(CpuAllocator, ReleaseCacheAndALowerLimitReturnBlocks) {
  CpuAllocator a(1 << 20);
  std::vector<void*> small, large;
  for (int i = 0; i < 4; ++i) small.push_back(a.allocate(512));
  for (int i = 0; i < 4; ++i) large.push_back(a.allocate(65536));
  for (void* p : small) a.deallocate(p, 512);
  for (void* p : large) a.deallocate(p, 65536);
  EXPECT_EQ(a.stats().cached_bytes, 4u * 512 + 4u * 65536);
  a.set_cache_limit(4096);  // the large class goes first
  EXPECT_LE(a.stats().cached_bytes, 4096u);
  EXPECT_EQ(a.stats().cached_blocks, 4);
  EXPECT_EQ(a.stats().limit_bytes, 4096u);
  a.release_cache();
  EXPECT_EQ(a.stats().cached_bytes, 0u);
  EXPECT_EQ(a.stats().cached_blocks, 0);
  EXPECT_EQ(a.stats().returned, 8);
  void* p = a.allocate(512);  // still usable, and caches again under the new limit
  a.deallocate(p, 512);
  EXPECT_EQ(a.stats().cached_blocks, 1);
}

TEST(CpuAllocator, OutOfMemoryEmptiesTheCacheThenFailsWithTheErrorStatus) {
#if defined(PF_TEST_ASAN) || defined(PF_TEST_TSAN)
  GTEST_SKIP() << "the sanitizer's allocator reports an impossible allocation instead of returning null";
#else
  CpuAllocator a(1 << 20);
  void* p = a.allocate(1000);
  a.deallocate(p, 1000);
  ASSERT_EQ(a.stats().cached_blocks, 1);
  const size_t huge = size_t{1} << 62;
  try {
    a.allocate(huge);
    FAIL() << "allocating 2^62 bytes succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    EXPECT_NE(std::string(e.what()).find(std::to_string(huge)), std::string::npos) << e.what();
  }
  EXPECT_EQ(a.stats().cached_blocks, 0);  // released before the retry
#endif
}

TEST(CpuAllocator, LimitFromTheEnvironment) {
  const char* name = "PF_CPU_ALLOCATOR_CACHE_BYTES";
  const char* saved = std::getenv(name);
  const std::string saved_value = saved ? saved : "";
  unsetenv(name);
  const size_t by_default = CpuAllocator::limit_from_environment();
  EXPECT_EQ(by_default, CpuAllocator::address_sanitizer_present() ? 0u : CpuAllocator::kDefaultCacheBytes);
#ifdef PF_TEST_ASAN
  EXPECT_TRUE(CpuAllocator::address_sanitizer_present());
#else
  EXPECT_FALSE(CpuAllocator::address_sanitizer_present());
#endif
  setenv(name, "12345", 1);
  EXPECT_EQ(CpuAllocator::limit_from_environment(), 12345u);
  setenv(name, "0", 1);
  EXPECT_EQ(CpuAllocator::limit_from_environment(), 0u);
  for (const char* bad : {"-1", "1GiB", "0x100", " 5", "99999999999999999999999"}) {
    setenv(name, bad, 1);
    EXPECT_EQ(CpuAllocator::limit_from_environment(), by_default) << bad;
  }
  if (saved) setenv(name, saved_value.c_str(), 1); else unsetenv(name);
}

// Under AddressSanitizer a cached block stays poisoned, so a use after free is still reported.
TEST(CpuAllocatorDeathTest, UnderAsanAUseOfACachedBlockIsReported) {
#ifndef PF_TEST_ASAN
  GTEST_SKIP() << "only meaningful in an AddressSanitizer build (tools/sanitize.sh asan)";
#else
  CpuAllocator a(1 << 20);
  volatile char* p = static_cast<char*>(a.allocate(1000));
  a.deallocate(const_cast<char*>(p), 1000);
  ASSERT_EQ(a.stats().cached_blocks, 1);
  EXPECT_DEATH(p[10] = 1, "use-after-poison");
  a.release_cache();
#endif
}

// Threads allocate, fill with their own pattern, check it and hand blocks to each other, so that
// most frees happen on another thread than the allocation. A block handed out twice, or one reused
// while still owned, breaks a pattern.
TEST(CpuAllocator, ConcurrentAllocateAndFreeFromSeveralThreads) {
  CpuAllocator a(256 << 10);  // small enough that some frees go back to the system
  constexpr int kThreads = 4, kIterations = 3000;
  struct Block {
    unsigned char* data;
    size_t bytes;
    unsigned char pattern;
  };
  std::mutex mutex;
  std::deque<Block> shared;
  std::vector<int> errors(kThreads, 0);
  auto check_and_free = [&](const Block& b, int& err) {
    for (size_t i = 0; i < b.bytes; ++i) err += b.data[i] != b.pattern;
    a.deallocate(b.data, b.bytes);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      uint32_t x = 12345u + static_cast<uint32_t>(t);
      for (int i = 0; i < kIterations; ++i) {
        x = x * 1664525u + 1013904223u;
        const size_t bytes = 1 + (x >> 8) % 20000;
        Block b{static_cast<unsigned char*>(a.allocate(bytes)), bytes, static_cast<unsigned char>(x >> 24)};
        if (!aligned(b.data)) ++errors[t];
        std::memset(b.data, b.pattern, bytes);
        Block other{nullptr, 0, 0};
        {
          std::lock_guard<std::mutex> lock(mutex);
          shared.push_back(b);
          if (shared.size() > 8) {
            other = shared.front();
            shared.pop_front();
          }
        }
        if (other.data != nullptr) check_and_free(other, errors[t]);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  int leftover_errors = 0;
  for (const Block& b : shared) check_and_free(b, leftover_errors);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], 0) << "thread " << t;
  EXPECT_EQ(leftover_errors, 0);
  const CpuAllocatorStats s = a.stats();
  EXPECT_EQ(s.hits + s.misses, int64_t{kThreads} * kIterations);
  EXPECT_GT(s.hits, 0);
  EXPECT_EQ(s.misses, s.returned + s.cached_blocks);  // every block from the system is cached or back
  EXPECT_LE(s.cached_bytes, size_t{256} << 10);
  a.release_cache();
  EXPECT_EQ(a.stats().cached_bytes, 0u);
}

// Through tensors: the process-wide allocator reuses a dropped tensor's block, and the tracker is
// charged the requested bytes either way.
TEST(CpuAllocator, TensorsReuseBlocksAndTheTrackerSeesRequestedBytes) {
  CpuAllocator& a = cpu_allocator();
  const size_t saved_limit = a.stats().limit_bytes;
  a.set_cache_limit(64 << 20);
  MemoryTracker& tracker = memory_tracker(Device::cpu());
  const int64_t before = tracker.stats().total_current;
  const void* first = nullptr;
  {
    Tensor t = Tensor::empty({1000, 3});  // 12000 bytes: class 12288
    first = t.data<char>();
    EXPECT_EQ(tracker.stats().total_current - before, 12000);
  }
  EXPECT_EQ(tracker.stats().total_current, before);
  const int64_t hits = a.stats().hits;
  {
    Tensor t = Tensor::zeros({3, 1000});
    EXPECT_EQ(t.data<char>(), first);
    EXPECT_EQ(a.stats().hits, hits + 1);
    EXPECT_EQ(tracker.stats().total_current - before, 12000);
    for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.f32()[i], 0.0f) << i;  // zeros() clears a reused block
  }
  EXPECT_EQ(tracker.stats().total_current, before);
  a.set_cache_limit(saved_limit);
}

}  // namespace
}  // namespace pf

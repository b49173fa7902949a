#include "runtime/tensor/cpu_allocator.h"

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <string>

#include "runtime/core/error.h"
#include "runtime/core/log.h"

// AddressSanitizer's poisoning interface, weak so that a process without the ASan runtime sees
// null: the runtime is found at run time, which also covers a sanitized program linking this
// library unsanitized (e.g. //c_api:c_api_sanitized). Poisoned blocks wait in the cache, so a use
// after free is still reported there.
extern "C" {
void __asan_poison_memory_region(void const volatile* addr, size_t size) __attribute__((weak));
void __asan_unpoison_memory_region(void const volatile* addr, size_t size) __attribute__((weak));
}

namespace pf {
namespace {

constexpr const char* kLimitVariable = "PF_CPU_ALLOCATOR_CACHE_BYTES";

void poison(void* p, size_t bytes) {
  if (__asan_poison_memory_region != nullptr) __asan_poison_memory_region(p, bytes);
}
void unpoison(void* p, size_t bytes) {
  if (__asan_unpoison_memory_region != nullptr) __asan_unpoison_memory_region(p, bytes);
}

// floor(log2(x)) for x > 0.
int floor_log2(size_t x) { return 63 - __builtin_clzll(static_cast<unsigned long long>(x)); }

}  // namespace

int CpuAllocator::class_index(size_t bytes) {
  if (bytes <= 1024) return bytes == 0 ? 0 : static_cast<int>((bytes + 63) / 64) - 1;
  const int e = floor_log2(bytes - 1);  // 2^e < bytes <= 2^(e+1)
  const size_t base = size_t{1} << e, step = base >> 3;
  const size_t i = (bytes - base + step - 1) / step;  // 1..8
  return kSmallClasses + (e - 10) * kClassesPerDoubling + static_cast<int>(i) - 1;
}

size_t CpuAllocator::class_size(size_t bytes) {
  if (bytes <= 1024) return bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
  const int e = floor_log2(bytes - 1);
  const size_t base = size_t{1} << e, step = base >> 3;
  return base + (bytes - base + step - 1) / step * step;
}

bool CpuAllocator::address_sanitizer_present() { return __asan_poison_memory_region != nullptr; }

size_t CpuAllocator::limit_from_environment() {
  size_t limit = address_sanitizer_present() ? 0 : kDefaultCacheBytes;
  const char* text = std::getenv(kLimitVariable);
  if (text == nullptr || *text == '\0') return limit;
  bool digits = true;
  for (const char* c = text; *c != '\0'; ++c) digits = digits && *c >= '0' && *c <= '9';
  errno = 0;
  const unsigned long long value = digits ? std::strtoull(text, nullptr, 10) : 0;
  if (!digits || errno == ERANGE || value > std::numeric_limits<size_t>::max()) {
    log(LogLevel::kWarning, std::string(kLimitVariable) + "='" + text +
                                "' is not a byte count; the CPU allocator caches up to " +
                                std::to_string(limit) + " bytes");
    return limit;
  }
  return static_cast<size_t>(value);
}

CpuAllocator::CpuAllocator(size_t cache_limit_bytes) : limit_(cache_limit_bytes) {
  for (int i = 0; i < kNumClasses; ++i) {
    if (i < kSmallClasses) {
      classes_[i].size = static_cast<size_t>(i + 1) * 64;
    } else {
      const size_t base = size_t{1} << ((i - kSmallClasses) / kClassesPerDoubling + 10);
      classes_[i].size = base + static_cast<size_t>((i - kSmallClasses) % kClassesPerDoubling + 1) * (base >> 3);
    }
  }
}

CpuAllocator::~CpuAllocator() { release_cache(); }

void* CpuAllocator::allocate(size_t bytes) {
  const size_t size = class_size(bytes);
  if (bytes <= kMaxCachedBlock && cached_bytes_.load(std::memory_order_relaxed) > 0) {
    SizeClass& c = classes_[class_index(bytes)];
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(c.mutex);
      if (!c.free.empty()) {
        p = c.free.back();
        c.free.pop_back();
      }
    }
    if (p != nullptr) {
      cached_bytes_.fetch_sub(size, std::memory_order_relaxed);
      cached_blocks_.fetch_sub(1, std::memory_order_relaxed);
      hits_.fetch_add(1, std::memory_order_relaxed);
      unpoison(p, size);
      return p;
    }
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  void* p = std::aligned_alloc(kAlignment, size);
  if (p == nullptr && cached_bytes_.load(std::memory_order_relaxed) > 0) {
    release_cache();
    p = std::aligned_alloc(kAlignment, size);
  }
  if (p == nullptr) fail(ErrorCode::kOutOfMemory, "cpu allocator: cannot allocate ", bytes, " bytes");
  return p;
}

void CpuAllocator::deallocate(void* data, size_t bytes) {
  if (data == nullptr) return;
  const size_t size = class_size(bytes);
  const size_t limit = limit_.load(std::memory_order_relaxed);
  if (bytes <= kMaxCachedBlock && size <= limit &&
      cached_bytes_.fetch_add(size, std::memory_order_relaxed) + size <= limit) {
    poison(data, size);
    SizeClass& c = classes_[class_index(bytes)];
    try {
      std::lock_guard<std::mutex> lock(c.mutex);
      c.free.push_back(data);
      cached_blocks_.fetch_add(1, std::memory_order_relaxed);
      return;
    } catch (...) {  // the free list could not grow: the block goes back to the system
      cached_bytes_.fetch_sub(size, std::memory_order_relaxed);
      unpoison(data, size);
    }
  } else if (bytes <= kMaxCachedBlock && size <= limit) {
    cached_bytes_.fetch_sub(size, std::memory_order_relaxed);  // over the cap: undo the reservation
  }
  returned_.fetch_add(1, std::memory_order_relaxed);
  std::free(data);
}

void CpuAllocator::trim_to(size_t keep) {
  for (int i = kNumClasses - 1; i >= 0 && cached_bytes_.load(std::memory_order_relaxed) > keep; --i) {
    SizeClass& c = classes_[i];
    std::vector<void*> blocks;
    {
      std::lock_guard<std::mutex> lock(c.mutex);
      if (c.free.empty()) continue;
      blocks.swap(c.free);
    }
    const size_t size = c.size;
    for (void* p : blocks) {
      unpoison(p, size);
      std::free(p);
    }
    cached_bytes_.fetch_sub(size * blocks.size(), std::memory_order_relaxed);
    cached_blocks_.fetch_sub(static_cast<int64_t>(blocks.size()), std::memory_order_relaxed);
    returned_.fetch_add(static_cast<int64_t>(blocks.size()), std::memory_order_relaxed);
  }
}

void CpuAllocator::release_cache() { trim_to(0); }

void CpuAllocator::set_cache_limit(size_t bytes) {
  limit_.store(bytes, std::memory_order_relaxed);
  trim_to(bytes);
}

CpuAllocatorStats CpuAllocator::stats() const {
  CpuAllocatorStats s;
  s.hits = hits_.load(std::memory_order_relaxed);
  s.misses = misses_.load(std::memory_order_relaxed);
  s.returned = returned_.load(std::memory_order_relaxed);
  s.cached_blocks = cached_blocks_.load(std::memory_order_relaxed);
  s.cached_bytes = cached_bytes_.load(std::memory_order_relaxed);
  s.limit_bytes = limit_.load(std::memory_order_relaxed);
  return s;
}

CpuAllocator& cpu_allocator() {
  static CpuAllocator* allocator = new CpuAllocator(CpuAllocator::limit_from_environment());
  return *allocator;
}

}  // namespace pf

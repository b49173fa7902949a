// Per-device memory accounting by category, with current and peak bytes. Every tensor allocation
// is charged to a category; the thread's current category is set with MemoryCategoryScope, so
// layer code allocates without naming categories.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "runtime/tensor/device.h"

namespace pf {

enum class MemoryCategory : int {
  kParameters = 0,
  kGradients = 1,
  kOptimizerState = 2,
  kActivations = 3,
  kCommunication = 4,
  kWorkspace = 5,  // temporaries that die within one call
};
constexpr int kNumMemoryCategories = 6;
const char* memory_category_name(MemoryCategory category);

struct MemoryStats {
  std::array<int64_t, kNumMemoryCategories> current{};
  std::array<int64_t, kNumMemoryCategories> peak{};
  int64_t total_current = 0;
  int64_t total_peak = 0;
};

class MemoryTracker {
 public:
  void charge(MemoryCategory category, int64_t bytes);
  void release(MemoryCategory category, int64_t bytes);
  MemoryStats stats() const;
  // Resets peaks to the current values (e.g. at the start of a step).
  void reset_peaks();

 private:
  std::array<std::atomic<int64_t>, kNumMemoryCategories> current_{};
  std::array<std::atomic<int64_t>, kNumMemoryCategories> peak_{};
  std::atomic<int64_t> total_current_{0};
  std::atomic<int64_t> total_peak_{0};
};

// The tracker of a device (one per device, lives for the process).
MemoryTracker& memory_tracker(const Device& device);

// The category charged by allocations made on this thread.
MemoryCategory current_memory_category();

class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(MemoryCategory category);
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;

 private:
  MemoryCategory previous_;
};

}  // namespace pf

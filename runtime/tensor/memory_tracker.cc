#include "runtime/tensor/memory_tracker.h"

#include <map>
#include <memory>
#include <mutex>

#include "runtime/core/error.h"

namespace pf {
namespace {

void raise_to(std::atomic<int64_t>& peak, int64_t value) {
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

thread_local MemoryCategory t_category = MemoryCategory::kWorkspace;

}  // namespace

const char* memory_category_name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::kParameters: return "parameters";
    case MemoryCategory::kGradients: return "gradients";
    case MemoryCategory::kOptimizerState: return "optimizer_state";
    case MemoryCategory::kActivations: return "activations";
    case MemoryCategory::kCommunication: return "communication";
    case MemoryCategory::kWorkspace: return "workspace";
  }
  return "unknown";
}

void MemoryTracker::charge(MemoryCategory category, int64_t bytes) {
  auto c = static_cast<int>(category);
  raise_to(peak_[c], current_[c].fetch_add(bytes, std::memory_order_relaxed) + bytes);
  raise_to(total_peak_, total_current_.fetch_add(bytes, std::memory_order_relaxed) + bytes);
}

void MemoryTracker::release(MemoryCategory category, int64_t bytes) {
  current_[static_cast<int>(category)].fetch_sub(bytes, std::memory_order_relaxed);
  total_current_.fetch_sub(bytes, std::memory_order_relaxed);
}

MemoryStats MemoryTracker::stats() const {
  MemoryStats s;
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    s.current[c] = current_[c].load();
    s.peak[c] = peak_[c].load();
  }
  s.total_current = total_current_.load();
  s.total_peak = total_peak_.load();
  return s;
}

void MemoryTracker::reset_peaks() {
  for (int c = 0; c < kNumMemoryCategories; ++c) peak_[c] = current_[c].load();
  total_peak_ = total_current_.load();
}

MemoryTracker& memory_tracker(const Device& device) {
  static std::mutex mutex;
  static auto* trackers = new std::map<std::pair<int, int>, std::unique_ptr<MemoryTracker>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = (*trackers)[{static_cast<int>(device.kind), device.ordinal}];
  if (!slot) slot = std::make_unique<MemoryTracker>();
  return *slot;
}

MemoryCategory current_memory_category() { return t_category; }

MemoryCategoryScope::MemoryCategoryScope(MemoryCategory category) : previous_(t_category) {
  t_category = category;
}

MemoryCategoryScope::~MemoryCategoryScope() { t_category = previous_; }

}  // namespace pf

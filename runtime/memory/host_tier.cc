// The host tier: the image in host memory, in buffers reused across contexts and steps (fewer page
// faults than fresh memory each time); the destructor frees them.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <utility>

#include "runtime/memory/store_tier.h"

namespace pf::mem {
namespace {

class HostTier : public StoreTier {
 public:
  explicit HostTier(Account account) : account_(std::move(account)) {}

  void write(StoreEntry& e) override {
    take_buffer(e);
    for (size_t g = 0; g < e.groups.size(); ++g)
      std::memcpy(e.host.get() + e.groups[g].image_offset, e.sources[g], e.groups[g].bytes);
    account_({static_cast<long long>(e.total), 0, 0, e.total, 0, 0});
  }
  const char* read(StoreEntry& e, const std::vector<char*>&, std::shared_ptr<void>*) override { return e.host.get(); }
  void released(StoreEntry& e) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      spares_.emplace_back(e.host_capacity, std::move(e.host));
    }
    e.host_capacity = 0;
    account_({-static_cast<long long>(e.total), 0, 0, 0, e.total, 0});
  }
  StoreDelta drop(StoreEntry& e, bool) override {
    StoreDelta d;
    if (e.host) d.host = -static_cast<long long>(e.total);
    e.host.reset();
    return d;
  }

 private:
  // A spare buffer big enough (the smallest such), or a new one.
  void take_buffer(StoreEntry& e) {
    const size_t need = std::max<size_t>(e.total, 1);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const size_t best = smallest_fitting(spares_, need, [](const auto& spare) { return spare.first; });
      if (best < spares_.size()) {
        e.host_capacity = spares_[best].first;
        e.host = std::move(spares_[best].second);
        spares_.erase(spares_.begin() + static_cast<long>(best));
        return;
      }
    }
    e.host.reset(new char[need]);
    e.host_capacity = need;
  }

  Account account_;
  std::mutex mutex_;
  std::vector<std::pair<size_t, std::unique_ptr<char[]>>> spares_;
};

}  // namespace

std::unique_ptr<StoreTier> make_host_tier(StoreTier::Account account) {
  return std::make_unique<HostTier>(std::move(account));
}

}  // namespace pf::mem

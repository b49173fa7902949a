// Where an offloaded context's image goes, one implementation per tier, each in its own file:
// host memory (host_tier.cc), a file (file_tier.cc), another rank (peer_tier.cc). The activation
// store packs and unpacks the images and runs the copies; a tier only moves the bytes and keeps
// its own spares. Internal to runtime/memory.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "runtime/memory/activation_store.h"
#include "runtime/memory/store_entry.h"

namespace pf::mem {

class StoreTier {
 public:
  using Account = std::function<void(const StoreDelta&)>;
  virtual ~StoreTier() = default;
  // On the offloading thread, before the copy is queued (the file tier picks the file).
  virtual void reserve(StoreEntry& e) { (void)e; }
  // On the copy worker: the image of e.sources (each group at its image offset) goes to the tier.
  virtual void write(StoreEntry& e) = 0;
  // On the copy worker: the image comes back. Returns it whole, or null after reading the groups
  // restored as views straight into `dest` (when every group has one). `keep` holds what the
  // returned pointer points into.
  virtual const char* read(StoreEntry& e, const std::vector<char*>& dest, std::shared_ptr<void>* keep) = 0;
  // On the copy worker, after the tensors are unpacked: what the tier takes back (buffer, file).
  virtual void released(StoreEntry& e) = 0;
  // clear(): a context dropped without coming back (`written`: its image was complete).
  virtual StoreDelta drop(StoreEntry& e, bool written) = 0;
  // clear(), at the end of a step: nothing of the tier's outlives it but reusable memory.
  virtual void end_step() {}
};

std::unique_ptr<StoreTier> make_host_tier(StoreTier::Account account);
std::unique_ptr<StoreTier> make_file_tier(const ActivationStore::Options& options, StoreTier::Account account);
std::unique_ptr<StoreTier> make_peer_tier(const ActivationStore::Options& options, StoreTier::Account account);

// Index of the smallest spare whose size(spare) >= need, or spares.size() when none fits.
template <typename T, typename SizeOf>
size_t smallest_fitting(const std::vector<T>& spares, size_t need, SizeOf size_of) {
  size_t best = spares.size();
  for (size_t i = 0; i < spares.size(); ++i)
    if (size_of(spares[i]) >= need && (best == spares.size() || size_of(spares[i]) < size_of(spares[best]))) best = i;
  return best;
}

}  // namespace pf::mem

// Where saved activations live between a stage's F and its B (docs/MEMORY.md).
//
// A context (all SavedContexts of one (micro-batch, stage), keyed by the caller) is in one of three
// tiers: resident (nothing to do), host (a copy in separately allocated host memory, not charged to
// the device's kActivations category but to this store's host counters) or file (one file per
// context under the offload directory). offload() takes the tensors out of the contexts at once and
// queues the copy on the store's copy worker (one std::thread, FIFO), so the copy overlaps the
// caller's compute; the device storages are released when the copy is done. prefetch() queues the
// copy back (device tensors charged to kActivations); restore() waits for it and puts the tensors
// back into the very same contexts, with the same values bit for bit (views of one storage are
// restored as views of one new storage).
//
// Files are owned RAII-style. A file whose context came back is kept as a spare and overwritten by a
// later offload (host buffers likewise); clear() (the executor calls it at the end of every step,
// failed or not) and the destructor remove every file, spare or not, so no file outlives a step.
// Spare host buffers are kept across steps and freed by the destructor.
//
// CUDA tensors (docs/MEMORY.md, "On GPUs"): a context whose tensors are on a CUDA device goes to the
// host tier through page-locked memory (a PinnedBuffer of the CUDA backend) on a copy stream of the store (one per
// store, i.e. per rank, created on first use), ordered by events instead of the copy worker:
// offload() records an event on the caller's current stream (after F), the copy stream waits for
// it, copies device -> pinned host and records an "out" event; prefetch() allocates the device
// tensors on the caller's thread and queues the copy back on the copy stream ("in" event);
// restore() makes the caller's current stream wait for the "in" event (no host wait). The device
// storages taken out by offload() are dropped on the caller's thread (so on its stream, as the
// caching allocator's reuse rule wants) once the "out" event has completed: at a later store call
// of that thread, at restore() or at clear(). wait_all() and clear() also wait for the copy stream.
// The file and peer tiers do not take CUDA tensors yet (kUnimplemented); CPU tensors take the
// copy-worker path above, unchanged.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/backend/cuda_backend.h"
#include "runtime/layers/saved_context.h"
#include "runtime/memory/private_dir.h"
#include "runtime/memory/store_entry.h"

namespace pf::mem {

struct StoreEntry;
class StoreTier;

// kPeer: the packed image goes to another rank's memory through Options::send_image and comes back
// through Options::receive_image (policy balance; the executor wires these to its transport).
enum class Tier { kResident, kHost, kFile, kPeer };
const char* tier_name(Tier tier);  // "resident", "host", "file", "peer"

// One background thread running jobs in submission order.
class CopyWorker {
 public:
  CopyWorker();
  ~CopyWorker();  // runs the queued jobs, then joins
  CopyWorker(const CopyWorker&) = delete;
  CopyWorker& operator=(const CopyWorker&) = delete;
  // The future holds the job's exception, if any.
  std::shared_future<void> submit(std::function<void()> job);
  void wait_idle();

 private:
  void main();
  std::mutex mutex_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::packaged_task<void()>> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;
};

struct StoreStats {
  size_t offloaded_bytes = 0;  // bytes copied off the device (since reset_stats)
  size_t reloaded_bytes = 0;   // bytes copied back
  size_t host_bytes = 0;       // host copies held now
  size_t host_peak = 0;
  size_t file_bytes = 0;       // bytes in files now
  size_t file_peak = 0;
  int files_written = 0;
  int files_present = 0;       // files on disk now
};

class ActivationStore {
 public:
  struct Options {
    Tier tier = Tier::kHost;
    // File tier: created if missing; empty = $TMPDIR or /tmp. The files go into a private folder
    // made inside it (private_dir.h: mode 0700, files created exclusively with mode 0600), made
    // anew if it is deleted during a run, and removed with the store.
    std::string offload_dir;
    std::string name = "pf";  // file name prefix (e.g. "r0" for rank 0)
    // Peer tier: called on the copy worker with the packed image of `key` (a tensor of at least the
    // image's bytes) once it is copied out / to fetch it back. Exceptions fail the copy.
    std::function<void(uint64_t key, Tensor image)> send_image;
    std::function<Tensor(uint64_t key)> receive_image;
    // CUDA tensors: host waits for the copy stream (wait_all, clear) fail with kTimeout after this.
    double wait_timeout_seconds = 600.0;
  };
  explicit ActivationStore(const Options& options);
  ~ActivationStore();  // waits for the copy worker, removes every file
  ActivationStore(const ActivationStore&) = delete;
  ActivationStore& operator=(const ActivationStore&) = delete;

  const Options& options() const { return options_; }
  // Takes every tensor out of `contexts` (left undefined; structure and ints stay) and queues the
  // copy. Returns the bytes that will be moved. The contexts must outlive restore()/clear().
  // kInvalidArgument if `key` is already held; with Tier::kResident it is a no-op returning 0.
  size_t offload(uint64_t key, std::vector<SavedContext*> contexts);
  // Queues the copy back to the device (idempotent).
  void prefetch(uint64_t key);
  // Waits for the prefetch (issuing it if needed), puts the tensors back, forgets the key. Rethrows
  // a failed copy. No-op for keys not held.
  void restore(uint64_t key);
  bool holds(uint64_t key) const;
  // Waits until every queued copy ran; rethrows the first failure.
  void wait_all();
  // Waits for the worker, drops every held context (their tensors are lost) and removes the files.
  void clear();
  StoreStats stats() const;
  void reset_stats();

 private:
  using Entry = StoreEntry;
  void account(const StoreDelta& delta);
  // The context's tensors taken out and grouped by storage into the entry's image layout.
  std::shared_ptr<Entry> pack(uint64_t key, std::vector<SavedContext*> contexts, int cuda_device);
  // CUDA tensors (see the top of this file).
  size_t offload_cuda(const std::shared_ptr<Entry>& e, int device);
  void prefetch_cuda(Entry* e);
  void restore_cuda(Entry* e);
  void release_finished_offloads();      // drops device storages whose copy out has completed
  void sync_copy_stream();               // host wait (wait_all, clear)
  std::unique_ptr<DeviceStream> copy_stream_;  // on the device of the first CUDA context
  std::vector<std::unique_ptr<PinnedBuffer>> spare_pinned_;
  Options options_;
  mutable std::mutex mutex_;
  std::map<uint64_t, std::shared_ptr<Entry>> entries_;
  StoreStats stats_;
  // Where the CPU images go (store_tier.h; null for the resident tier), and the worker that runs
  // its copies (destroyed first: its jobs use the tier).
  std::unique_ptr<StoreTier> tier_;
  std::unique_ptr<CopyWorker> worker_;
};

}  // namespace pf::mem

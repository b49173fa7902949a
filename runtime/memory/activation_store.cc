#include "runtime/memory/activation_store.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/memory/store_tier.h"
#include "runtime/tensor/memory_tracker.h"

namespace pf::mem {

const char* tier_name(Tier tier) {
  switch (tier) {
    case Tier::kResident: return "resident";
    case Tier::kHost: return "host";
    case Tier::kFile: return "file";
    case Tier::kPeer: return "peer";
  }
  return "?";
}

// ---- CopyWorker ----

CopyWorker::CopyWorker() : thread_([this] { main(); }) {}

CopyWorker::~CopyWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_future<void> CopyWorker::submit(std::function<void()> job) {
  std::packaged_task<void()> task(std::move(job));
  std::shared_future<void> f = task.get_future().share();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_all();
  return f;
}

void CopyWorker::wait_idle() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

void CopyWorker::main() {
  // Below the compute threads: copies fill the cores' idle time (pipeline bubbles, waits) first
  // and take compute time only when a prefetch is late. Linux: per-thread nice value.
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
  while (true) {
    std::packaged_task<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    task();  // exceptions land in the future
    {
      std::lock_guard<std::mutex> lock(mutex_);
      busy_ = false;
      if (queue_.empty()) idle_cv_.notify_all();
    }
  }
}

// ---- ActivationStore ----



ActivationStore::ActivationStore(const Options& options) : options_(options) {
  auto account = [this](const StoreDelta& d) { this->account(d); };
  switch (options_.tier) {
    case Tier::kResident: return;
    case Tier::kHost: tier_ = make_host_tier(account); break;
    case Tier::kFile: tier_ = make_file_tier(options_, account); break;
    case Tier::kPeer: tier_ = make_peer_tier(options_, account); break;
  }
  worker_ = std::make_unique<CopyWorker>();
}

ActivationStore::~ActivationStore() {
  try {
    clear();
  } catch (...) {
  }
  worker_.reset();
}

void ActivationStore::account(const StoreDelta& d) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.host_bytes = static_cast<size_t>(static_cast<long long>(stats_.host_bytes) + d.host);
  stats_.file_bytes = static_cast<size_t>(static_cast<long long>(stats_.file_bytes) + d.file);
  stats_.files_present += d.files;
  stats_.host_peak = std::max(stats_.host_peak, stats_.host_bytes);
  stats_.file_peak = std::max(stats_.file_peak, stats_.file_bytes);
  stats_.offloaded_bytes += d.out;
  stats_.reloaded_bytes += d.in;
  stats_.files_written += d.written;
}

std::shared_ptr<StoreEntry> ActivationStore::pack(uint64_t key, std::vector<SavedContext*> contexts, int cuda_device) {
  auto e = std::make_shared<Entry>();
  e->key = key;
  e->contexts = std::move(contexts);
  // Take the tensors out; group the views by storage.
  std::unordered_map<const Storage*, int> group_of;
  std::vector<std::pair<size_t, size_t>> extent;  // per group: [lo, hi) within the storage
  std::vector<Tensor> group_tensor;               // one handle per group (keeps the storage alive)
  std::vector<std::pair<int, size_t>> raw;        // per view: group, offset within the storage
  for (SavedContext* c : e->contexts) {
    c->for_each_tensor([&](Tensor& t) {
      Entry::View v;
      if (!t.defined()) {
        e->views.push_back(v);
        raw.push_back({-1, 0});
        return;
      }
      const Storage* s = t.storage();
      const size_t off = static_cast<size_t>(t.data<char>() - static_cast<const char*>(s->data()));
      auto it = group_of.find(s);
      int g;
      if (it == group_of.end()) {
        g = static_cast<int>(e->groups.size());
        group_of[s] = g;
        Entry::Group gr;
        gr.dtype = t.dtype();
        e->groups.push_back(gr);
        extent.push_back({off, off + t.nbytes()});
        group_tensor.push_back(t);
      } else {
        g = it->second;
        extent[g].first = std::min(extent[g].first, off);
        extent[g].second = std::max(extent[g].second, off + t.nbytes());
      }
      if (t.dtype() != e->groups[g].dtype) e->groups[g].as_views = false;
      v.group = g;
      v.shape = t.shape();
      v.dtype = t.dtype();
      e->views.push_back(v);
      raw.push_back({g, off});
      t = Tensor();
    });
  }
  for (size_t g = 0; g < e->groups.size(); ++g) {
    Entry::Group& gr = e->groups[g];
    gr.image_offset = e->total;
    gr.bytes = extent[g].second - extent[g].first;
    gr.lead = cuda_device >= 0 && extent[g].first % 256 % dtype_size(gr.dtype) == 0 ? extent[g].first % 256 : 0;
    e->total += gr.bytes;
    e->sources.push_back(static_cast<const char*>(group_tensor[g].storage()->data()) + extent[g].first);
  }
  for (size_t i = 0; i < e->views.size(); ++i) {
    Entry::View& v = e->views[i];
    if (v.group < 0) continue;
    v.offset = raw[i].second - extent[static_cast<size_t>(v.group)].first;
    if (v.offset % dtype_size(v.dtype) != 0) e->groups[static_cast<size_t>(v.group)].as_views = false;
  }
  e->outgoing = std::move(group_tensor);
  return e;
}

size_t ActivationStore::offload(uint64_t key, std::vector<SavedContext*> contexts) {
  if (options_.tier == Tier::kResident) return 0;
  PF_CHECK_ARG(!holds(key), "activation store: context ", key, " is already offloaded");
  // Where the tensors are: all on the CPU (the copy worker), or all on one CUDA device.
  int cuda_device = -1;
  bool cpu_seen = false;
  for (SavedContext* c : contexts) {
    c->for_each_tensor([&](Tensor& t) {
      if (!t.defined()) return;
      if (t.device().kind != DeviceKind::kCuda) {
        cpu_seen = true;
        return;
      }
      PF_CHECK_ARG(cuda_device < 0 || cuda_device == t.device().ordinal, "activation store: context ", key,
                   " has tensors on cuda:", cuda_device, " and on ", t.device().to_string());
      cuda_device = t.device().ordinal;
    });
  }
  if (cuda_device >= 0) {
    PF_CHECK_ARG(!cpu_seen, "activation store: context ", key, " mixes CPU tensors and tensors on cuda:", cuda_device);
    if (options_.tier != Tier::kHost)
      fail(ErrorCode::kUnimplemented, "activation store: the ", tier_name(options_.tier),
           " tier does not take CUDA tensors yet (context ", key, " is on cuda:", cuda_device,
           "); use the host tier (pinned memory)");
  }
  std::shared_ptr<Entry> e = pack(key, std::move(contexts), cuda_device);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    PF_CHECK_ARG(entries_.count(key) == 0, "activation store: context ", key, " is already offloaded");
    entries_[key] = e;  // (CUDA contexts too: until 0.11 they were not kept, so restore() found nothing)
  }
  if (cuda_device >= 0) return offload_cuda(e, cuda_device);
  tier_->reserve(*e);
  // The jobs hold a plain pointer: a shared_ptr would make a cycle (the entry keeps the futures, whose
  // shared state keeps the job). The entry outlives its jobs: restore() waits for both before it
  // drops the entry, and clear() waits for the worker first.
  e->out_done = worker_->submit([this, e = e.get()] {
    struct Drop {  // release the device storages whatever happens
      Entry* e;
      ~Drop() {
        e->outgoing.clear();
        e->sources.clear();
      }
    } drop{e};
    tier_->write(*e);
  });
  return e->total;
}

void ActivationStore::prefetch(uint64_t key) {
  std::shared_ptr<Entry> e;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second->prefetch_issued) return;
    e = it->second;
    e->prefetch_issued = true;
  }
  if (e->cuda_device >= 0) {
    prefetch_cuda(e.get());
    return;
  }
  e->in_done = worker_->submit([this, e = e.get()] {  // plain pointer: see offload()
    e->out_done.get();  // rethrows a failed offload
    MemoryCategoryScope scope(MemoryCategory::kActivations);
    std::vector<Tensor> bases(e->groups.size());
    std::vector<char*> dest(e->groups.size(), nullptr);
    for (size_t g = 0; g < e->groups.size(); ++g) {
      const Entry::Group& gr = e->groups[g];
      if (!gr.as_views) continue;
      const size_t es = dtype_size(gr.dtype);
      bases[g] = Tensor::empty({static_cast<int64_t>((gr.bytes + es - 1) / es)}, gr.dtype);
      dest[g] = bases[g].data<char>();
    }
    std::shared_ptr<void> keep;  // what `image` points into
    const char* image = tier_->read(*e, dest, &keep);
    for (size_t g = 0; g < e->groups.size(); ++g)
      if (dest[g] && image) std::memcpy(dest[g], image + e->groups[g].image_offset, e->groups[g].bytes);
    unpack_views(*e, bases, image, Device::cpu(),
                 [](char* dst, const char* src, size_t bytes) { std::memcpy(dst, src, bytes); });
    tier_->released(*e);
  });
}

void ActivationStore::restore(uint64_t key) {
  std::shared_ptr<Entry> e;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    e = it->second;
  }
  prefetch(key);
  if (e->cuda_device >= 0) {
    restore_cuda(e.get());
  } else {
    e->in_done.get();  // rethrows a failed copy (the entry stays until clear())
  }
  size_t i = 0;
  for (SavedContext* c : e->contexts) {
    c->for_each_tensor([&](Tensor& t) {
      PF_INTERNAL_CHECK(i < e->incoming.size(), "activation store: context ", key, " changed shape while offloaded");
      t = std::move(e->incoming[i++]);
    });
  }
  PF_INTERNAL_CHECK(i == e->incoming.size(), "activation store: context ", key, " changed shape while offloaded");
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.erase(key);
}

bool ActivationStore::holds(uint64_t key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.count(key) != 0;
}

void ActivationStore::wait_all() {
  if (!worker_) return;
  worker_->wait_idle();
  sync_copy_stream();
  std::vector<std::shared_ptr<Entry>> es;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& kv : entries_) es.push_back(kv.second);
  }
  for (auto& e : es) {
    if (e->out_done.valid()) e->out_done.get();
    if (e->in_done.valid()) e->in_done.get();
  }
}

void ActivationStore::clear() {
  if (worker_) worker_->wait_idle();
  // CUDA: nothing may still read or write what is dropped below. A failed wait is rethrown after
  // the entries are gone (their device memory then waits for the caller's stream rule; see top).
  std::exception_ptr copy_error;
  try {
    sync_copy_stream();
  } catch (...) {
    copy_error = std::current_exception();
  }
  std::map<uint64_t, std::shared_ptr<Entry>> old;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    old.swap(entries_);
  }
  for (auto& kv : old) {
    Entry& e = *kv.second;
    // Only images that were completely written were counted in file_bytes / host_bytes.
    bool written = false;
    try {
      if (e.out_done.valid()) {
        e.out_done.get();
        written = true;
      }
    } catch (...) {
    }
    if (e.cuda_device >= 0) {
      StoreDelta d;
      if (e.pinned) d.host = -static_cast<long long>(e.total);
      account(d);
    } else if (tier_) {
      account(tier_->drop(e, written));
    }
  }
  // Spare files go too: no file outlives a step. Spare host buffers stay for the next step (no page
  // faults on fresh memory each step); the destructor frees them.
  if (tier_) tier_->end_step();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!copy_error) spare_pinned_.clear();  // cudaFreeHost: only once no copy can use them
  }
  if (copy_error) std::rethrow_exception(copy_error);
}

// ---- CUDA tensors ----

namespace {

std::string bytes_between(size_t bytes, const std::string& from, const std::string& to) {
  return std::to_string(bytes) + " bytes from " + from + " to " + to;
}

}  // namespace

size_t ActivationStore::offload_cuda(const std::shared_ptr<Entry>& e, int device) {
  release_finished_offloads();
  CudaBackend& cuda = cuda_backend();
  auto scope = cuda.device_scope(device);
  if (!copy_stream_) copy_stream_ = cuda.new_stream(device);
  PF_CHECK_ARG(copy_stream_->device() == device, "activation store '", options_.name, "': context ", e->key,
               " is on cuda:", device, ", the store's copy stream on cuda:", copy_stream_->device(),
               " (one store per device)");
  e->cuda_device = device;
  // A pinned image: a spare big enough (smallest such), or a new one.
  const size_t need = std::max<size_t>(e->total, 1);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t best = smallest_fitting(spare_pinned_, need, [](const auto& spare) { return spare->size(); });
    if (best < spare_pinned_.size()) {
      e->pinned = std::move(spare_pinned_[best]);
      spare_pinned_.erase(spare_pinned_.begin() + static_cast<long>(best));
    }
  }
  if (!e->pinned) e->pinned = cuda.new_pinned_buffer(need);
  // The copy waits for the work issued so far on the caller's stream (F wrote the contexts).
  const std::unique_ptr<DeviceEvent> ready = cuda.new_event(device);
  ready->record(nullptr);
  ready->make_wait(copy_stream_.get());
  const std::string dev = "cuda:" + std::to_string(device);
  for (size_t g = 0; g < e->groups.size(); ++g) {
    if (e->groups[g].bytes == 0) continue;
    cuda.copy_async(e->pinned->data() + e->groups[g].image_offset, e->sources[g], e->groups[g].bytes, *copy_stream_,
                    "activation offload: copying " + bytes_between(e->groups[g].bytes, dev, "pinned host memory"));
  }
  e->out_event = cuda.new_event(device);
  e->out_event->record(copy_stream_.get());
  account({static_cast<long long>(e->total), 0, 0, e->total, 0, 0});
  return e->total;
}

void ActivationStore::release_finished_offloads() {
  std::vector<std::shared_ptr<Entry>> es;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& kv : entries_)
      if (kv.second->cuda_device >= 0 && !kv.second->outgoing.empty()) es.push_back(kv.second);
  }
  for (auto& e : es) {
    if (e->out_event && e->out_event->query()) {
      e->outgoing.clear();  // on the caller's thread and stream: the allocator's reuse rule holds
      e->sources.clear();
    }
  }
}

void ActivationStore::prefetch_cuda(Entry* e) {
  release_finished_offloads();
  const int device = e->cuda_device;
  CudaBackend& cuda = cuda_backend();
  auto scope = cuda.device_scope(device);
  const Device dev = Device::cuda(device);
  const std::string where = "cuda:" + std::to_string(device);
  const DeviceStream& copy = *copy_stream_;
  MemoryCategoryScope category(MemoryCategory::kActivations);
  std::vector<Tensor> bases(e->groups.size());
  // The copy back is queued on the same stream as the copy out, so it reads a complete image.
  for (size_t g = 0; g < e->groups.size(); ++g) {
    const Entry::Group& gr = e->groups[g];
    if (!gr.as_views) continue;
    const size_t es = dtype_size(gr.dtype);
    bases[g] = Tensor::empty({static_cast<int64_t>((gr.lead + gr.bytes + es - 1) / es)}, gr.dtype, dev);
    if (gr.bytes == 0) continue;
    cuda.copy_async(bases[g].data<char>() + gr.lead, e->pinned->data() + gr.image_offset, gr.bytes, copy,
                    "activation reload: copying " + bytes_between(gr.bytes, "pinned host memory", where));
  }
  unpack_views(*e, bases, e->pinned->data(), dev, [&](char* dst, const char* src, size_t bytes) {
    cuda.copy_async(dst, src, bytes, copy,
                    "activation reload: copying " + bytes_between(bytes, "pinned host memory", where));
  });
  e->in_event = cuda.new_event(device);
  e->in_event->record(copy_stream_.get());
  // The image can serve a later offload at once: that copy is queued behind this one on the stream.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    spare_pinned_.push_back(std::move(e->pinned));
  }
  account({-static_cast<long long>(e->total), 0, 0, 0, e->total, 0});
}

void ActivationStore::restore_cuda(Entry* e) {
  PF_INTERNAL_CHECK(e->in_event != nullptr, "activation store: context ", e->key, " restored before its reload");
  auto scope = cuda_backend().device_scope(e->cuda_device);
  // The caller's stream (B) reads the tensors only after the copy back; it also passes the copy
  // out (same copy stream, earlier), so the device storages can be dropped here on that stream.
  e->in_event->make_wait(nullptr);
  e->outgoing.clear();
  e->sources.clear();
}

void ActivationStore::sync_copy_stream() {
  if (!copy_stream_) return;
  auto scope = cuda_backend().device_scope(copy_stream_->device());
  copy_stream_->synchronize(options_.wait_timeout_seconds,
                            "activation store '" + options_.name + "': waiting for the copy stream on cuda:" +
                                std::to_string(copy_stream_->device()));
}

StoreStats ActivationStore::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void ActivationStore::reset_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  const StoreStats now = stats_;
  stats_ = StoreStats();
  stats_.host_bytes = stats_.host_peak = now.host_bytes;
  stats_.file_bytes = stats_.file_peak = now.file_bytes;
  stats_.files_present = now.files_present;
}

}  // namespace pf::mem

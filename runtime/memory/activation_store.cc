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

namespace {

// A file that is removed when this object dies (or earlier, by remove()).
class TempFile {
 public:
  TempFile() = default;
  ~TempFile() { remove(); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  void set(std::string path) { path_ = std::move(path); }
  const std::string& path() const { return path_; }
  bool present() const { return !path_.empty(); }
  void remove() {
    if (!path_.empty()) {
      std::remove(path_.c_str());
      path_.clear();
    }
  }
  // Gives up ownership without removing the file (it goes back to the store's spares).
  std::string release() { return std::exchange(path_, std::string()); }

 private:
  std::string path_;
};

// Writes / reads all of [data, data + bytes) at `offset` (pwrite/pread may do less per call).
bool write_all(int fd, const char* data, size_t bytes, off_t offset) {
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, data, bytes, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    bytes -= static_cast<size_t>(n);
    offset += n;
  }
  return true;
}

size_t read_all(int fd, char* data, size_t bytes, off_t offset) {
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::pread(fd, data + got, bytes - got, offset + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  return got;
}

// Index of the smallest spare whose size(spare) >= need, or spares.size() when none fits.
template <typename T, typename SizeOf>
size_t smallest_fitting(const std::vector<T>& spares, size_t need, SizeOf size_of) {
  size_t best = spares.size();
  for (size_t i = 0; i < spares.size(); ++i)
    if (size_of(spares[i]) >= need && (best == spares.size() || size_of(spares[i]) < size_of(spares[best]))) best = i;
  return best;
}

std::string default_dir() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? std::string(t) : std::string("/tmp");
}

}  // namespace

struct ActivationStore::Entry {
  struct View {
    int group = -1;      // -1: undefined tensor
    size_t offset = 0;   // bytes from the group's image start
    Shape shape;
    DType dtype = DType::kF32;
  };
  // A group = the bytes of one storage that the views use: [lo, hi) of the storage.
  struct Group {
    size_t image_offset = 0;  // where in the image
    size_t bytes = 0;
    DType dtype = DType::kF32;
    bool as_views = true;     // all views share dtype and alignment: restore as views of one tensor
    size_t lead = 0;          // CUDA: lo % 256, kept in front of the restored bytes so that every view
                              // has the address alignment it had (kernels may pick code by alignment)
  };
  uint64_t key = 0;
  std::vector<SavedContext*> contexts;
  std::vector<View> views;
  std::vector<Group> groups;
  size_t total = 0;
  std::vector<Tensor> outgoing;    // device tensors being copied out (dropped by the copy job)
  std::vector<const char*> sources;  // per group: start of its bytes on the device
  std::unique_ptr<char[]> host;    // host tier image
  size_t host_capacity = 0;
  TempFile file;                   // file tier image
  std::vector<Tensor> incoming;    // per view: restored tensors
  std::shared_future<void> out_done, in_done;
  bool prefetch_issued = false;
  // CUDA tensors (cuda_device >= 0): the image in pinned memory, copies on the store's copy stream.
  int cuda_device = -1;
  std::unique_ptr<PinnedBuffer> pinned;
  std::unique_ptr<DeviceEvent> out_event, in_event;
};

ActivationStore::ActivationStore(const Options& options) : options_(options) {
  if (options_.tier == Tier::kFile) {
    if (options_.offload_dir.empty()) options_.offload_dir = default_dir();
    struct stat st;
    if (stat(options_.offload_dir.c_str(), &st) != 0) {
      if (mkdir(options_.offload_dir.c_str(), 0700) != 0 && errno != EEXIST)
        fail(ErrorCode::kInvalidArgument, "offload dir '", options_.offload_dir,
             "' does not exist and cannot be created: ", std::strerror(errno));
    } else if (!S_ISDIR(st.st_mode)) {
      fail(ErrorCode::kInvalidArgument, "offload dir '", options_.offload_dir, "' is not a directory");
    }
    private_dir_ = std::make_unique<PrivateDirectory>(options_.offload_dir, "pipeforge-" + options_.name);
  }
  if (options_.tier == Tier::kPeer)
    PF_CHECK_ARG(options_.send_image && options_.receive_image,
                 "activation store: the peer tier needs send_image and receive_image");
  if (options_.tier != Tier::kResident) worker_ = std::make_unique<CopyWorker>();
}

ActivationStore::~ActivationStore() {
  try {
    clear();
  } catch (...) {
  }
  worker_.reset();
}

void ActivationStore::account(long long host_delta, long long file_delta, int files_delta, size_t out_bytes,
                              size_t in_bytes, int written) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.host_bytes = static_cast<size_t>(static_cast<long long>(stats_.host_bytes) + host_delta);
  stats_.file_bytes = static_cast<size_t>(static_cast<long long>(stats_.file_bytes) + file_delta);
  stats_.files_present += files_delta;
  stats_.host_peak = std::max(stats_.host_peak, stats_.host_bytes);
  stats_.file_peak = std::max(stats_.file_peak, stats_.file_bytes);
  stats_.offloaded_bytes += out_bytes;
  stats_.reloaded_bytes += in_bytes;
  stats_.files_written += written;
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
  if (cuda_device >= 0) return offload_cuda(e, cuda_device);
  std::string path;
  bool spare = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    PF_CHECK_ARG(entries_.count(key) == 0, "activation store: context ", key, " is already offloaded");
    if (options_.tier == Tier::kFile) {
      if (private_dir_->ensure()) spare_files_.clear();  // they were in a folder that is gone
      const std::string& dir = private_dir_->path();
      if (!spare_files_.empty()) {
        path = std::move(spare_files_.back());
        spare_files_.pop_back();
        spare = true;
      } else {
        path = dir + "/act_" + std::to_string(serial_++) + ".bin";
      }
    }
    entries_[key] = e;
  }
  const Tier tier = options_.tier;
  // The jobs hold a plain pointer: a shared_ptr would make a cycle (the entry keeps the futures, whose
  // shared state keeps the job). The entry outlives its jobs: restore() waits for both before it
  // drops the entry, and clear() waits for the worker first.
  e->out_done = worker_->submit([this, e = e.get(), tier, path, spare] {
    struct Drop {  // release the device storages whatever happens
      Entry* e;
      ~Drop() {
        e->outgoing.clear();
        e->sources.clear();
      }
    } drop{e};
    if (tier == Tier::kHost) {
      take_host_buffer(e);
      for (size_t g = 0; g < e->groups.size(); ++g)
        std::memcpy(e->host.get() + e->groups[g].image_offset, e->sources[g], e->groups[g].bytes);
      account(static_cast<long long>(e->total), 0, 0, e->total, 0, 0);
    } else if (tier == Tier::kPeer) {
      Tensor image;
      {
        MemoryCategoryScope scope(MemoryCategory::kActivations);
        image = Tensor::empty({static_cast<int64_t>((e->total + 3) / 4)}, DType::kI32);
      }
      for (size_t g = 0; g < e->groups.size(); ++g)
        std::memcpy(image.data<char>() + e->groups[g].image_offset, e->sources[g], e->groups[g].bytes);
      e->outgoing.clear();  // the device copy is gone before the image leaves
      options_.send_image(e->key, std::move(image));
      account(0, 0, 0, e->total, 0, 0);
    } else {
      // No O_TRUNC: a spare file is overwritten in place, so its page-cache pages are reused
      // (creating, truncating and unlinking a file per context cost ~30% more on this machine).
      const int fd = spare ? ::open(path.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC) : create_private_file(path);
      if (fd < 0) fail(ErrorCode::kIoError, "activation offload: cannot create '", path, "': ", std::strerror(errno));
      e->file.set(path);
      account(0, 0, 1, 0, 0, 1);
      bool ok = true;
      for (size_t g = 0; g < e->groups.size() && ok; ++g)
        ok = write_all(fd, e->sources[g], e->groups[g].bytes, static_cast<off_t>(e->groups[g].image_offset));
      const int saved_errno = errno;
      ok = ::close(fd) == 0 && ok;
      if (!ok) fail(ErrorCode::kIoError, "activation offload: writing '", path, "' failed: ", std::strerror(saved_errno));
      account(0, static_cast<long long>(e->total), 0, e->total, 0, 0);
    }
  });
  return e->total;
}

void ActivationStore::take_host_buffer(Entry* e) {
  const size_t need = std::max<size_t>(e->total, 1);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t best = smallest_fitting(spare_host_, need, [](const auto& spare) { return spare.first; });
    if (best < spare_host_.size()) {
      e->host_capacity = spare_host_[best].first;
      e->host = std::move(spare_host_[best].second);
      spare_host_.erase(spare_host_.begin() + static_cast<long>(best));
      return;
    }
  }
  e->host.reset(new char[need]);
  e->host_capacity = need;
}

void ActivationStore::give_back_host_buffer(Entry* e) {
  std::lock_guard<std::mutex> lock(mutex_);
  spare_host_.emplace_back(e->host_capacity, std::move(e->host));
  e->host_capacity = 0;
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
  const Tier tier = options_.tier;
  e->in_done = worker_->submit([this, e = e.get(), tier] {  // plain pointer: see offload()
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
    // Read the image (host buffer, or the file into a temporary buffer group by group).
    std::unique_ptr<char[]> file_image;
    Tensor peer_image;
    const char* image = nullptr;
    if (tier == Tier::kHost) {
      image = e->host.get();
    } else if (tier == Tier::kPeer) {
      peer_image = options_.receive_image(e->key);
      if (!peer_image.defined() || peer_image.nbytes() < e->total)
        fail(ErrorCode::kDataLoss, "activation reload: context ", e->key, " came back with ",
             peer_image.defined() ? peer_image.nbytes() : 0, " bytes, expected ", e->total);
      image = peer_image.data<char>();
    } else {
      const int fd = ::open(e->file.path().c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0)
        fail(ErrorCode::kIoError, "activation reload: cannot open '", e->file.path(), "': ", std::strerror(errno));
      // Groups restored as views are read straight into their device tensor; the others (rare:
      // mixed dtypes or odd offsets) through a buffer of the whole image.
      const bool direct = std::all_of(dest.begin(), dest.end(), [](char* d) { return d != nullptr; });
      size_t got = 0;
      if (direct) {
        for (size_t g = 0; g < e->groups.size(); ++g)
          got += read_all(fd, dest[g], e->groups[g].bytes, static_cast<off_t>(e->groups[g].image_offset));
      } else {
        file_image.reset(new char[std::max<size_t>(e->total, 1)]);
        got = read_all(fd, file_image.get(), e->total, 0);
        image = file_image.get();
      }
      ::close(fd);
      if (got != e->total)
        fail(ErrorCode::kIoError, "activation reload: '", e->file.path(), "' is short (", got, " of ", e->total,
             " bytes)");
    }
    for (size_t g = 0; g < e->groups.size(); ++g)
      if (dest[g] && image) std::memcpy(dest[g], image + e->groups[g].image_offset, e->groups[g].bytes);
    e->incoming.assign(e->views.size(), Tensor());
    for (size_t i = 0; i < e->views.size(); ++i) {
      const Entry::View& v = e->views[i];
      if (v.group < 0) continue;
      const Entry::Group& gr = e->groups[static_cast<size_t>(v.group)];
      const int64_t n = shape_numel(v.shape);
      if (gr.as_views) {
        const int64_t first = static_cast<int64_t>(v.offset / dtype_size(v.dtype));
        e->incoming[i] = bases[static_cast<size_t>(v.group)].slice_rows(first, first + n).reshape(v.shape);
      } else {
        Tensor t = Tensor::empty(v.shape, v.dtype);
        std::memcpy(t.data<char>(), image + gr.image_offset + v.offset, t.nbytes());
        e->incoming[i] = t;
      }
    }
    if (tier == Tier::kHost) {
      give_back_host_buffer(e);
      account(-static_cast<long long>(e->total), 0, 0, 0, e->total, 0);
    } else if (tier == Tier::kPeer) {
      account(0, 0, 0, 0, e->total, 0);
    } else {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        spare_files_.push_back(e->file.release());
      }
      account(0, -static_cast<long long>(e->total), -1, 0, e->total, 0);
    }
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
    const bool had_file = e.file.present();
    e.file.remove();
    const long long host = e.host || e.pinned ? static_cast<long long>(e.total) : 0;
    e.host.reset();
    // Only images that were completely written were counted in file_bytes / host_bytes.
    bool written = false;
    try {
      if (e.out_done.valid()) {
        e.out_done.get();
        written = true;
      }
    } catch (...) {
    }
    account(-host, had_file && written ? -static_cast<long long>(e.total) : 0, had_file ? -1 : 0, 0, 0, 0);
  }
  // Spare files go too: no file outlives a step. Spare host buffers stay for the next step (no page
  // faults on fresh memory each step); the destructor frees them.
  std::vector<std::string> files;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    files.swap(spare_files_);
    if (!copy_error) spare_pinned_.clear();  // cudaFreeHost: only once no copy can use them
  }
  for (const std::string& f : files) std::remove(f.c_str());
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
  account(static_cast<long long>(e->total), 0, 0, e->total, 0, 0);
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
  e->incoming.assign(e->views.size(), Tensor());
  for (size_t i = 0; i < e->views.size(); ++i) {
    const Entry::View& v = e->views[i];
    if (v.group < 0) continue;
    const Entry::Group& gr = e->groups[static_cast<size_t>(v.group)];
    const int64_t n = shape_numel(v.shape);
    if (gr.as_views) {
      const int64_t first = static_cast<int64_t>((gr.lead + v.offset) / dtype_size(v.dtype));
      e->incoming[i] = bases[static_cast<size_t>(v.group)].slice_rows(first, first + n).reshape(v.shape);
    } else {
      Tensor t = Tensor::empty(v.shape, v.dtype, dev);
      if (t.nbytes() > 0)
        cuda.copy_async(t.data<char>(), e->pinned->data() + gr.image_offset + v.offset, t.nbytes(), copy,
                        "activation reload: copying " + bytes_between(t.nbytes(), "pinned host memory", where));
      e->incoming[i] = t;
    }
  }
  e->in_event = cuda.new_event(device);
  e->in_event->record(copy_stream_.get());
  // The image can serve a later offload at once: that copy is queued behind this one on the stream.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    spare_pinned_.push_back(std::move(e->pinned));
  }
  account(-static_cast<long long>(e->total), 0, 0, 0, e->total, 0);
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

// The file tier: one file per context in a private folder under the offload directory
// (private_dir.h). A file whose context came back is kept as a spare and overwritten in place by a
// later offload (its page-cache pages are reused); end_step() removes the spares, so no file
// outlives a step.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/memory/private_dir.h"
#include "runtime/memory/store_tier.h"

namespace pf::mem {
namespace {

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

std::string default_dir() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? std::string(t) : std::string("/tmp");
}

class FileTier : public StoreTier {
 public:
  FileTier(const ActivationStore::Options& options, Account account) : account_(std::move(account)) {
    std::string dir = options.offload_dir.empty() ? default_dir() : options.offload_dir;
    struct stat st;
    if (stat(dir.c_str(), &st) != 0) {
      if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
        fail(ErrorCode::kInvalidArgument, "offload dir '", dir, "' does not exist and cannot be created: ",
             std::strerror(errno));
    } else if (!S_ISDIR(st.st_mode)) {
      fail(ErrorCode::kInvalidArgument, "offload dir '", dir, "' is not a directory");
    }
    private_dir_ = std::make_unique<PrivateDirectory>(dir, "pipeforge-" + options.name);
  }
  ~FileTier() override { end_step(); }

  void reserve(StoreEntry& e) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (private_dir_->ensure()) spares_.clear();  // they were in a folder that is gone
    if (!spares_.empty()) {
      e.path = std::move(spares_.back());
      spares_.pop_back();
      e.reuse_file = true;
    } else {
      e.path = private_dir_->path() + "/act_" + std::to_string(serial_++) + ".bin";
      e.reuse_file = false;
    }
  }

  void write(StoreEntry& e) override {
    // No O_TRUNC: a spare file is overwritten in place, so its page-cache pages are reused
    // (creating, truncating and unlinking a file per context cost ~30% more on this machine).
    const int fd = e.reuse_file ? ::open(e.path.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC) : create_private_file(e.path);
    if (fd < 0) fail(ErrorCode::kIoError, "activation offload: cannot create '", e.path, "': ", std::strerror(errno));
    e.file.set(e.path);
    account_({0, 0, 1, 0, 0, 1});
    bool ok = true;
    for (size_t g = 0; g < e.groups.size() && ok; ++g)
      ok = write_all(fd, e.sources[g], e.groups[g].bytes, static_cast<off_t>(e.groups[g].image_offset));
    const int saved_errno = errno;
    ok = ::close(fd) == 0 && ok;
    if (!ok) fail(ErrorCode::kIoError, "activation offload: writing '", e.path, "' failed: ", std::strerror(saved_errno));
    account_({0, static_cast<long long>(e.total), 0, e.total, 0, 0});
  }

  // Groups restored as views are read straight into their tensor; the others (rare: mixed dtypes
  // or odd offsets) through a buffer of the whole image.
  const char* read(StoreEntry& e, const std::vector<char*>& dest, std::shared_ptr<void>* keep) override {
    const int fd = ::open(e.file.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(ErrorCode::kIoError, "activation reload: cannot open '", e.file.path(), "': ", std::strerror(errno));
    const bool direct = std::all_of(dest.begin(), dest.end(), [](char* d) { return d != nullptr; });
    size_t got = 0;
    const char* image = nullptr;
    if (direct) {
      for (size_t g = 0; g < e.groups.size(); ++g)
        got += read_all(fd, dest[g], e.groups[g].bytes, static_cast<off_t>(e.groups[g].image_offset));
    } else {
      std::shared_ptr<char[]> buffer(new char[std::max<size_t>(e.total, 1)]);
      got = read_all(fd, buffer.get(), e.total, 0);
      image = buffer.get();
      *keep = std::move(buffer);
    }
    ::close(fd);
    if (got != e.total)
      fail(ErrorCode::kIoError, "activation reload: '", e.file.path(), "' is short (", got, " of ", e.total, " bytes)");
    return image;
  }

  void released(StoreEntry& e) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      spares_.push_back(e.file.release());
    }
    account_({0, -static_cast<long long>(e.total), -1, 0, e.total, 0});
  }

  StoreDelta drop(StoreEntry& e, bool written) override {
    StoreDelta d;
    if (e.file.present()) {
      d.files = -1;
      if (written) d.file = -static_cast<long long>(e.total);
    }
    e.file.remove();
    return d;
  }

  void end_step() override {
    std::vector<std::string> files;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      files.swap(spares_);
    }
    for (const std::string& f : files) std::remove(f.c_str());
  }

 private:
  Account account_;
  std::unique_ptr<PrivateDirectory> private_dir_;
  std::mutex mutex_;
  std::vector<std::string> spares_;
  uint64_t serial_ = 0;
};

}  // namespace

std::unique_ptr<StoreTier> make_file_tier(const ActivationStore::Options& options, StoreTier::Account account) {
  return std::make_unique<FileTier>(options, std::move(account));
}

}  // namespace pf::mem

#include "runtime/checkpoint/checkpoint_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/core/error.h"
#include "runtime/core/output_file.h"

namespace pf {
namespace {

std::string folder_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool process_is_running(long pid) { return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM; }

// Removes "<base>.tmp.<pid>" regular files in the folder of `path` whose writer is gone.
void remove_stale_temporaries(const std::string& path) {
  const std::string folder = folder_of(path);
  const std::string prefix = base_name(path) + ".tmp.";
  DIR* dir = ::opendir(folder.c_str());
  if (dir == nullptr) return;  // the write below reports the folder's problem
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string pid_text = name.substr(prefix.size());
    if (pid_text.size() > 9 || pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    const long pid = std::stol(pid_text);
    if (pid <= 0 || pid == ::getpid() || process_is_running(pid)) continue;
    struct stat st;
    const std::string stale = folder + "/" + name;
    if (::lstat(stale.c_str(), &st) == 0 && S_ISREG(st.st_mode)) ::unlink(stale.c_str());
  }
  ::closedir(dir);
}

[[noreturn]] void fail_errno(const std::string& path, const std::string& what, int err) {
  fail(ErrorCode::kIoError, "checkpoint '", path, "': ", what, ": ", std::strerror(err));
}

}  // namespace

std::string read_checkpoint_file(const std::string& path, uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    fail(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIoError, "checkpoint '", path,
         "': cannot open: ", std::strerror(err));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail_errno(path, "cannot stat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(ErrorCode::kDataLoss, "checkpoint '", path, "': not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    fail(ErrorCode::kDataLoss, "checkpoint '", path, "': ", st.st_size,
         " bytes, more than a checkpoint of this model can have (", max_bytes, ")");
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, &bytes[done], bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail_errno(path, "read failed", err);
    }
    if (n == 0) break;  // shrank while reading: the checksum check reports it
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  bytes.resize(done);
  return bytes;
}

void write_checkpoint_file(const std::string& path, const std::string& bytes) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    fail(ErrorCode::kInvalidArgument, "checkpoint '", path, "': exists and is not a regular file (",
         S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISDIR(st.st_mode) ? "a directory" : "a device, FIFO or socket",
         "); refusing to replace it");
  }
  remove_stale_temporaries(path);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::open(tmp.c_str(), flags, 0644);
  if (fd < 0 && errno == EEXIST) {
    // Ours by name and pid: left by this process (or an earlier one with our pid); never followed.
    ::unlink(tmp.c_str());
    fd = ::open(tmp.c_str(), flags, 0644);
  }
  if (fd < 0) fail_errno(path, "cannot create '" + tmp + "'", errno);
  // Removes the temporary file (closing it first while `fd` is open) and fails with errno's reason.
  auto abandon = [&](const char* what) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    fail_errno(path, what, err);
  };
  if (!write_all(fd, bytes)) abandon("write failed");
  if (::fsync(fd) != 0) abandon("flush failed");
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) abandon("flush failed");
  if (::rename(tmp.c_str(), path.c_str()) != 0) abandon("rename failed");
  // Make the rename itself durable.
  const int dfd = ::open(folder_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace pf

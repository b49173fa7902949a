#include "runtime/core/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/core/error.h"

namespace pf {
namespace {

std::string folder_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

const char* kind_of(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "a device";
}

// Creates `folder` and the folders above it that are missing.
void make_folders(const std::string& folder, const std::string& what, const std::string& path) {
  struct stat st;
  if (::stat(folder.c_str(), &st) == 0) {
    PF_CHECK_ARG(S_ISDIR(st.st_mode), what, " '", path, "': '", folder, "' is not a folder");
    return;
  }
  if (folder != "/" && folder != ".") make_folders(folder_of(folder), what, path);
  if (::mkdir(folder.c_str(), 0755) != 0 && errno != EEXIST)
    fail(ErrorCode::kIoError, what, " '", path, "': cannot create the folder '", folder, "': ", std::strerror(errno));
}

}  // namespace

void check_output_path(const std::string& path, const std::string& what) {
  PF_CHECK_ARG(!path.empty(), what, ": the path is empty");
  PF_CHECK_ARG(path.back() != '/', what, " '", path, "': names a folder, not a file");
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    PF_CHECK_ARG(S_ISREG(st.st_mode), what, " '", path, "' is ", kind_of(st.st_mode),
                 "; refusing to write through or over it (give the path of a regular file)");
  }
  make_folders(folder_of(path), what, path);
}

bool write_all(int fd, const std::string& bytes) {
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = EIO;
    if (n <= 0) return false;
    written += static_cast<size_t>(n);
  }
  return true;
}

void write_output_file(const std::string& path, const std::string& bytes, const std::string& what) {
  check_output_path(path, what);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::open(tmp.c_str(), flags, 0644);
  if (fd < 0 && errno == EEXIST) {  // ours by name and pid, left by an earlier write
    ::unlink(tmp.c_str());
    fd = ::open(tmp.c_str(), flags, 0644);
  }
  if (fd < 0) fail(ErrorCode::kIoError, what, " '", path, "': cannot create '", tmp, "': ", std::strerror(errno));
  auto abandon = [&](const char* doing) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    fail(ErrorCode::kIoError, what, " '", path, "': ", doing, ": ", std::strerror(err));
  };
  if (!write_all(fd, bytes)) abandon("write failed");
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) abandon("write failed");
  // rename() replaces a regular file, or a symbolic link planted since the check, never its target.
  if (::rename(tmp.c_str(), path.c_str()) != 0) abandon("rename failed");
}

}  // namespace pf

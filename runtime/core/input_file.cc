#include "runtime/core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/core/json_text.h"

namespace pf {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "a device";
}

// Opens without blocking (a FIFO with no writer would block a plain open) and checks what is there.
int open_regular(const std::string& path, const std::string& what, uint64_t max_bytes, uint64_t* size) {
  PF_CHECK_ARG(!path.empty(), what, ": the path is empty");
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) fail(ErrorCode::kNotFound, what, " '", path, "' does not exist");
    fail(ErrorCode::kIoError, what, " '", path, "' cannot be opened: ", std::strerror(err));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(ErrorCode::kIoError, what, " '", path, "' cannot be examined: ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(ErrorCode::kInvalidArgument, what, " '", path, "' is ", kind_of(st.st_mode),
         ", not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    fail(ErrorCode::kInvalidArgument, what, " '", path, "' has ", st.st_size, " bytes, more than the limit of ",
         max_bytes);
  }
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

}  // namespace

uint64_t check_input_file(const std::string& path, const std::string& what, uint64_t max_bytes) {
  uint64_t size = 0;
  ::close(open_regular(path, what, max_bytes, &size));
  return size;
}

std::string read_input_file(const std::string& path, const std::string& what, uint64_t max_bytes) {
  uint64_t size = 0;
  const int fd = open_regular(path, what, max_bytes, &size);
  std::string text;
  text.reserve(static_cast<size_t>(size));
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail(ErrorCode::kIoError, what, " '", path, "' cannot be read: ", std::strerror(err));
    }
    if (n == 0) break;
    if (text.size() + static_cast<uint64_t>(n) > max_bytes) {
      ::close(fd);
      fail(ErrorCode::kInvalidArgument, what, " '", path, "' grew past the limit of ", max_bytes,
           " bytes while it was read");
    }
    text.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

nlohmann::json read_json_input(const std::string& path, const std::string& what, uint64_t max_bytes) {
  const std::string text = read_input_file(path, what, max_bytes);
  return parse_json_text(text, what + " '" + path + "'", static_cast<size_t>(max_bytes));
}

PathEscape find_path_escape(const std::string& base, const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  if (path.empty() || !p.is_relative()) return {PathEscape::Kind::kNotRelative, ""};
  fs::path prefix;
  for (const fs::path& part : p) {
    if (part == "..") return {PathEscape::Kind::kParent, ""};
    prefix /= part;
    std::error_code ec;
    if (fs::is_symlink(fs::symlink_status(fs::path(base) / prefix, ec))) return {PathEscape::Kind::kSymlink, prefix.string()};
  }
  return {};
}

}  // namespace pf

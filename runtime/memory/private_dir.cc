#include "runtime/memory/private_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "runtime/core/error.h"

namespace pf {

PrivateDirectory::PrivateDirectory(std::string parent, std::string prefix)
    : parent_(std::move(parent)), prefix_(std::move(prefix)) {}

PrivateDirectory::~PrivateDirectory() {
  if (!path_.empty()) ::rmdir(path_.c_str());
}

bool PrivateDirectory::ensure() {
  struct stat st;
  if (!path_.empty() && ::lstat(path_.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return false;
  if (::stat(parent_.c_str(), &st) != 0) {
    if (::mkdir(parent_.c_str(), 0700) != 0 && errno != EEXIST) {
      fail(ErrorCode::kIoError, "offload dir '", parent_, "' does not exist and cannot be created: ",
           std::strerror(errno));
    }
  } else if (!S_ISDIR(st.st_mode)) {
    fail(ErrorCode::kIoError, "offload dir '", parent_, "' is not a directory");
  }
  std::string pattern = parent_ + "/" + prefix_ + "-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (::mkdtemp(buffer.data()) == nullptr) {
    fail(ErrorCode::kIoError, "offload dir '", parent_, "': cannot create a private folder: ", std::strerror(errno));
  }
  path_ = buffer.data();
  return true;
}

int create_private_file(const std::string& path) {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
}

}  // namespace pf

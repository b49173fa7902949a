#include "runtime/core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/core/error.h"

namespace pf {
namespace {

// Closes the descriptor on every way out of open(); the mapping outlives it.
struct Descriptor {
  int fd;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path, const std::string& what,
                                                   bool random_access) {
  Descriptor d{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (d.fd < 0) {
    const int e = errno;
    fail(e == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIoError, what, " '", path, "': cannot open it: ",
         std::strerror(e));
  }
  struct stat st {};
  if (::fstat(d.fd, &st) != 0) fail(ErrorCode::kIoError, what, " '", path, "': cannot stat it: ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(ErrorCode::kInvalidArgument, what, " '", path, "' is not a regular file");
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ == 0) return file;
  void* map = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, d.fd, 0);
  if (map == MAP_FAILED) fail(ErrorCode::kIoError, what, " '", path, "': cannot map it: ", std::strerror(errno));
  file->data_ = static_cast<const unsigned char*>(map);
  if (random_access) ::madvise(map, file->size_, MADV_RANDOM);
  return file;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), size_);
}

}  // namespace pf

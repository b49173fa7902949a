// A regular file mapped read-only into memory (mmap), for large inputs read in parts: token
// files, safetensors. Pages are read from disk when touched, so a reader that uses a part of the
// file reads that part only.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace pf {

class MappedFile {
 public:
  // `what` names the file in errors: "<what> '<path>': ...". kNotFound for a missing file,
  // kInvalidArgument for one that is not a regular file, kIoError when it cannot be opened or
  // mapped. An empty file maps to size 0 and data nullptr. `random_access`: advise the kernel that
  // reads jump around (no read-ahead).
  static std::shared_ptr<const MappedFile> open(const std::string& path, const std::string& what,
                                                bool random_access = false);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedFile() = default;
  std::string path_;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace pf

// The file tier's own folder: a directory only this process's store uses, made with mkdtemp (mode
// 0700, an unpredictable name) under the configured offload folder, so other users of a shared
// temporary folder can neither guess, read nor pre-create its files.
#pragma once

#include <string>

namespace pf {

class PrivateDirectory {
 public:
  // `parent` is created (mode 0700) when missing; nothing is created until path() is first called.
  PrivateDirectory(std::string parent, std::string prefix);
  ~PrivateDirectory();  // removes the directory if it is empty (files are the owner's to remove)
  PrivateDirectory(const PrivateDirectory&) = delete;
  PrivateDirectory& operator=(const PrivateDirectory&) = delete;

  // Makes the directory (and `parent` too) when it does not exist, so that a folder deleted during
  // a run is replaced at the next use instead of failing every later step. Returns true when it
  // made a new one (files of the old one are gone). Throws kIoError naming the folder when it
  // cannot be made. Not thread-safe.
  bool ensure();
  // The directory of the last ensure() (empty before the first).
  const std::string& path() const { return path_; }

 private:
  std::string parent_;
  std::string prefix_;
  std::string path_;
};

// Creates `path` exclusively for writing (O_CREAT | O_EXCL | O_NOFOLLOW, mode 0600): never an
// existing file, never through a symlink. Returns the descriptor or -1 with errno set.
int create_private_file(const std::string& path);

}  // namespace pf

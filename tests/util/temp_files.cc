#include "tests/util/temp_files.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace pftest {

std::string fresh_temp_dir(const std::string& tag) {
  const char* t = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(t && *t ? t : "/tmp") + "/" + tag + "_" + std::to_string(getpid());
  mkdir(dir.c_str(), 0700);
  return dir;
}

std::string test_temp_dir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir ? dir : std::filesystem::temp_directory_path().string();
}

std::string write_temp_file(const std::string& name, const std::string& text) {
  const std::string path = test_temp_dir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

namespace {

// Calls visit(path, is_folder) for each entry of `dir`; false when it cannot be opened.
template <typename Visit>
bool for_each_entry(const std::string& dir, Visit visit) {
  DIR* d = opendir(dir.c_str());
  if (!d) return false;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string path = dir + "/" + name;
    struct stat st;
    visit(path, lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode));
  }
  closedir(d);
  return true;
}

}  // namespace

int count_files(const std::string& dir) {
  int n = 0;
  const bool opened = for_each_entry(dir, [&](const std::string& path, bool folder) {
    n += folder ? std::max(count_files(path), 0) : 1;
  });
  return opened ? n : -1;
}

int count_folders(const std::string& dir) {
  int n = 0;
  const bool opened = for_each_entry(dir, [&](const std::string&, bool folder) { n += folder ? 1 : 0; });
  return opened ? n : -1;
}

}  // namespace pftest

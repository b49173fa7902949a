#include "tests/util/temp_files.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

namespace pftest {

std::string fresh_temp_dir(const std::string& tag) {
  const char* t = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(t && *t ? t : "/tmp") + "/" + tag + "_" + std::to_string(getpid());
  mkdir(dir.c_str(), 0700);
  return dir;
}

int count_files(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") ++n;
  }
  closedir(d);
  return n;
}

}  // namespace pftest

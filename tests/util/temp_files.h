// Scratch folders for tests that write files (the file tier of the activation store).
#pragma once

#include <string>

namespace pftest {

// Creates and returns "$TEST_TMPDIR/<tag>_<pid>" (or under /tmp outside Bazel).
std::string fresh_temp_dir(const std::string& tag);
// Files (not folders) in `dir` and in the folders below it; -1 when `dir` cannot be opened.
int count_files(const std::string& dir);
// Folders directly in `dir`; -1 when it cannot be opened.
int count_folders(const std::string& dir);

}  // namespace pftest

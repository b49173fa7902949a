// Scratch folders and files for tests that write them (the file tier of the activation store, the
// data sources).
#pragma once

#include <string>

namespace pftest {

// Creates and returns "$TEST_TMPDIR/<tag>_<pid>" (or under /tmp outside Bazel).
std::string fresh_temp_dir(const std::string& tag);
// $TEST_TMPDIR (or the system's temporary folder outside Bazel).
std::string test_temp_dir();
// Writes `text` to test_temp_dir()/name (bytes as given) and returns the path.
std::string write_temp_file(const std::string& name, const std::string& text);
// Files (not folders) in `dir` and in the folders below it; -1 when `dir` cannot be opened.
int count_files(const std::string& dir);
// Folders directly in `dir`; -1 when it cannot be opened.
int count_folders(const std::string& dir);

}  // namespace pftest

// Scratch folders for tests that write files (the file tier of the activation store).
#pragma once

#include <string>

namespace pftest {

// Creates and returns "$TEST_TMPDIR/<tag>_<pid>" (or under /tmp outside Bazel).
std::string fresh_temp_dir(const std::string& tag);
// Entries in `dir` other than "." and ".."; -1 when it cannot be opened.
int count_files(const std::string& dir);

}  // namespace pftest

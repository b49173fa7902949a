// Reading and writing checkpoint files safely: bounded reads of regular files only, and atomic
// writes that never replace a non-regular file and clean up the temporary files of dead writers.
#pragma once

#include <cstdint>
#include <string>

namespace pf {

// The whole file at `path`. kNotFound when it does not exist, kIoError when it cannot be read,
// kDataLoss when it is not a regular file or is longer than `max_bytes` (checked before reading).
std::string read_checkpoint_file(const std::string& path, uint64_t max_bytes);

// Writes `bytes` to `path` atomically: into "<path>.tmp.<pid>" (created exclusively, never through a
// symlink), flushed, renamed over `path`, and the rename flushed. Refuses (kInvalidArgument) when
// `path` exists and is not a regular file (a symlink, directory, device or FIFO). Before writing,
// removes "<path>.tmp.<pid>" files left by processes that no longer run (a writer killed mid-save).
void write_checkpoint_file(const std::string& path, const std::string& bytes);

}  // namespace pf

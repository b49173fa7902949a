// The one rule for every file PipeForge writes (traces, SVG and HTML pages, schedules, plans,
// profiles, probe results, the metrics log; checkpoints follow it in runtime/checkpoint):
//   * a symbolic link, directory, device, FIFO or socket at the path is refused, never followed or
//     replaced: only a regular file (or nothing) may be there;
//   * missing folders on the way are created (mode 0755);
//   * a whole file is written to a temporary name beside it and renamed over the path, so a failed
//     or interrupted write leaves what was there;
//   * every failure is an Error naming what the file is for, the path and the reason.
// check_output_path applies the first two before a run starts, so a bad path fails at once and
// not after the training it would have lost.
#pragma once

#include <string>

namespace pf {

// kInvalidArgument (what, path, why) for a path nothing may be written to; creates missing folders
// (kIoError when it cannot).
void check_output_path(const std::string& path, const std::string& what);

// Writes `bytes` as the whole file at `path` under the rule above (kIoError or kInvalidArgument).
void write_output_file(const std::string& path, const std::string& bytes, const std::string& what);

// Writes all of `bytes` to `fd`, retrying short writes and EINTR. False on failure, errno set.
bool write_all(int fd, const std::string& bytes);

}  // namespace pf

// The one rule for every file PipeForge reads whole (config and plan files, model files, cluster
// and profile files, schedule files, CSV and text data, an existing metrics log, probe results):
//   * only a regular file (a symbolic link to one is followed): a FIFO, device, socket or folder
//     is refused at once, never read, so it cannot hang the run or feed it without end;
//   * at most max_bytes, checked with fstat before anything is allocated (and again while reading,
//     for a file that grows);
//   * every failure an Error naming what the file is for, the path and the reason.
// JSON files are parsed by parse_json_text, which checks the nesting depth before any other use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace pf {

// The size of the regular file at `path` (kNotFound when missing; kInvalidArgument when not a
// regular file or larger than max_bytes). For readers that stream the file themselves.
uint64_t check_input_file(const std::string& path, const std::string& what, uint64_t max_bytes);

// The whole file (the errors above; kIoError when reading fails).
std::string read_input_file(const std::string& path, const std::string& what, uint64_t max_bytes);

// Where a path read from a file (a config file's output path, a spec file's data file) would lead
// outside `base`, the folder it is taken relative to ("" for the current one): the first reason
// found walking it part by part, or kInside when it stays inside — relative, no "..", and no
// symbolic link on the way (each prefix looked at under base as it stands now). Callers word the
// refusal (what the path is for, what to do instead).
struct PathEscape {
  enum class Kind { kInside, kNotRelative, kParent, kSymlink } kind = Kind::kInside;
  std::string link;  // kSymlink: the prefix that is a link, as written in the path
};
PathEscape find_path_escape(const std::string& base, const std::string& path);

// The file parsed as one JSON value: the errors above, and malformed or too deeply nested JSON
// (kInvalidArgument, with the line and column).
nlohmann::json read_json_input(const std::string& path, const std::string& what, uint64_t max_bytes);

}  // namespace pf

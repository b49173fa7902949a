// The libsvm / svmlight text format, what LIBSVM, LIBLINEAR, scikit-learn's dump_svmlight_file and
// Snap ML read: one example per line,
//   <label> <feature>:<value> <feature>:<value> ...   [# comment]
// features 1-based and ascending; absent features are 0; a `qid:N` field is refused (ranking data);
// blank lines and lines starting with '#' are skipped.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/glm/glm_data.h"

namespace pf::glm {

struct LibsvmOptions {
  int64_t features = 0;  // d: 0 = the largest feature index in the file; else indices above it are refused
};

// Reads the file (the input-file rule of runtime/core/input_file.h: a regular file; its stored
// values at most limits::max_loaded_data_bytes(), checked while reading). Errors name the file,
// the line and the field.
GlmData read_libsvm(const std::string& path, const LibsvmOptions& options = {});
// The same from text in memory; `name` says where it came from in messages.
GlmData parse_libsvm(const std::string& text, const std::string& name, const LibsvmOptions& options = {});

}  // namespace pf::glm

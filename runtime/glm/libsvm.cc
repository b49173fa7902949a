#include "runtime/glm/libsvm.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <istream>
#include <limits>
#include <sstream>

#include "runtime/core/error.h"
#include "runtime/core/input_file.h"
#include "runtime/core/limits.h"

namespace pf::glm {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

class Parser {
 public:
  Parser(std::string name, const LibsvmOptions& options)
      : name_(std::move(name)), options_(options), max_bytes_(limits::max_loaded_data_bytes()) {
    PF_CHECK_ARG(options.features >= 0 && options.features <= std::numeric_limits<uint32_t>::max(), "features must be in [0, ",
                 std::numeric_limits<uint32_t>::max(), "] (0 = the largest index in the file), got ", options.features);
    data_.name = name_;
    data_.row_start.push_back(0);
  }

  void line(const std::string& text) {
    ++line_;
    const char* p = text.data();
    const char* end = p + text.size();
    while (p < end && is_space(*p)) ++p;
    if (p == end || *p == '#') return;
    const char* field = p;
    while (p < end && !is_space(*p) && *p != '#') ++p;
    data_.labels.push_back(number(field, p, "the label"));
    int64_t previous = 0;
    while (true) {
      while (p < end && is_space(*p)) ++p;
      if (p == end || *p == '#') break;
      field = p;
      while (p < end && !is_space(*p) && *p != '#') ++p;
      const char* colon = field;
      while (colon < p && *colon != ':') ++colon;
      if (colon == p) fail_at(field, "expected <feature>:<value>, got '", std::string(field, p), "'");
      if (colon - field == 3 && std::memcmp(field, "qid", 3) == 0)
        fail_at(field, "qid fields (ranking data) are not supported");
      int64_t index = 0;
      const auto [after, ec] = std::from_chars(field, colon, index);
      if (ec != std::errc() || after != colon || index < 1 || index > std::numeric_limits<uint32_t>::max())
        fail_at(field, "feature index '", std::string(field, colon), "' is not an integer in [1, ",
                std::numeric_limits<uint32_t>::max(), "]");
      if (index <= previous)
        fail_at(field, "feature ", index, " after feature ", previous, ": features must be ascending");
      if (options_.features > 0 && index > options_.features)
        fail_at(field, "feature ", index, " is beyond the ", options_.features, " features given");
      const double v = number(colon + 1, p, "the value of feature " + std::to_string(index));
      // Values are stored as float: refused from the midpoint between FLT_MAX and 2^128 on, where
      // rounding to float gives infinity (FLT_MAX's own printed digits read back above it).
      constexpr double kRoundsToInfinity = 0x1.ffffffp+127;
      if (std::fabs(v) >= kRoundsToInfinity)
        fail_at(colon + 1, "the value of feature ", index, " (", v, ") is beyond float's range");
      previous = index;
      data_.indices.push_back(static_cast<uint32_t>(index - 1));
      data_.values.push_back(static_cast<float>(v));
      if (index > data_.cols) data_.cols = index;
    }
    data_.row_start.push_back(static_cast<int64_t>(data_.values.size()));
    data_.rows += 1;
    const int64_t bytes = data_.bytes();
    if (bytes > max_bytes_)
      fail(ErrorCode::kOutOfMemory, name_, ": line ", line_, ": the examples so far take ", bytes,
           " bytes, more than the ", max_bytes_, " this process may load (limits::max_loaded_data_bytes)");
    line_text_start_ = nullptr;
  }

  GlmData finish() {
    if (options_.features > 0) data_.cols = options_.features;
    PF_CHECK_ARG(data_.rows > 0, name_, ": no examples (every line is blank or a comment)");
    PF_CHECK_ARG(data_.cols > 0, name_, ": no feature has a value");
    return std::move(data_);
  }

  // For fail_at: where the current line starts.
  void set_line_start(const char* start) { line_text_start_ = start; }

 private:
  double number(const char* begin, const char* end, const std::string& what) {
    double v = 0;
    const char* text = begin;
    if (end - begin >= 2 && *begin == '+' && begin[1] != '+' && begin[1] != '-') ++begin;  // "+1" labels
    const auto [after, ec] = std::from_chars(begin, end, v);
    if (ec != std::errc() || after != end || !std::isfinite(v))
      fail_at(text, what, " is not a finite number: '", std::string(text, end), "'");
    return v;
  }

  template <typename... Args>
  [[noreturn]] void fail_at(const char* where, const Args&... args) {
    std::ostringstream out;
    out << name_ << ": line " << line_;
    if (line_text_start_ != nullptr) out << ", column " << (where - line_text_start_) + 1;
    out << ": ";
    (out << ... << args);
    fail(ErrorCode::kInvalidArgument, out.str());
  }

  std::string name_;
  LibsvmOptions options_;
  int64_t max_bytes_;
  GlmData data_;
  int64_t line_ = 0;
  const char* line_text_start_ = nullptr;
};

GlmData parse_stream(std::istream& in, const std::string& name, const LibsvmOptions& options) {
  Parser parser(name, options);
  std::string text;
  while (std::getline(in, text)) {
    parser.set_line_start(text.data());
    parser.line(text);
  }
  return parser.finish();
}

}  // namespace

GlmData read_libsvm(const std::string& path, const LibsvmOptions& options) {
  check_input_file(path, "libsvm data", std::numeric_limits<uint64_t>::max());
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) fail(ErrorCode::kIoError, "libsvm data '", path, "': cannot open");
  GlmData data = parse_stream(in, "libsvm data '" + path + "'", options);
  if (in.bad()) fail(ErrorCode::kIoError, "libsvm data '", path, "': reading failed");
  return data;
}

GlmData parse_libsvm(const std::string& text, const std::string& name, const LibsvmOptions& options) {
  std::istringstream in(text);
  return parse_stream(in, name, options);
}

}  // namespace pf::glm

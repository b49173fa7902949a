#include "runtime/core/json_text.h"

#include <nlohmann/json.hpp>

#include "runtime/core/limits.h"

namespace pf {
namespace {

// Fails when brackets outside strings nest deeper than the limit.
void check_nesting(std::string_view text, const std::string& what, ErrorCode code) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      line_start = i + 1;
    }
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limits::kMaxJsonDepth) {
        fail(code, what, ": JSON nested deeper than ", limits::kMaxJsonDepth, " levels at line ", line,
             ", column ", i - line_start + 1);
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

}  // namespace

nlohmann::json parse_json_text(std::string_view text, const std::string& what, size_t max_bytes,
                               ErrorCode code) {
  if (text.size() > max_bytes) {
    fail(code, what, ": ", text.size(), " bytes of JSON, more than the limit of ", max_bytes);
  }
  check_nesting(text, what, code);
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    fail(code, what, ": malformed JSON: ", e.what());
  }
}

bool json_integer_in(const nlohmann::json& value, int64_t lo, int64_t hi) {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    return hi >= 0 && v <= static_cast<uint64_t>(hi) && (lo <= 0 || v >= static_cast<uint64_t>(lo));
  }
  if (!value.is_number_integer()) return false;
  const int64_t v = value.get<int64_t>();
  return v >= lo && v <= hi;
}

std::string describe_json(const nlohmann::json& value) {
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return std::string(value.type_name()) + " " + text;
}

}  // namespace pf

// Parsing JSON text that comes from outside (model files, checkpoint headers, C API strings).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "runtime/core/error.h"

namespace pf {

// Parses `text` as one JSON value. Refused with `code`, in a message that starts with `what`: text
// longer than `max_bytes`, brackets nested deeper than limits::kMaxJsonDepth (checked before
// parsing, with the line and column where the limit is passed), and malformed JSON.
nlohmann::json parse_json_text(std::string_view text, const std::string& what, size_t max_bytes,
                               ErrorCode code = ErrorCode::kInvalidArgument);

// True when `value` is a JSON integer (signed or unsigned) in [lo, hi]; never wraps, whichever
// way nlohmann stored it.
bool json_integer_in(const nlohmann::json& value, int64_t lo, int64_t hi);

// A short rendering of a JSON value for error messages: its type and at most 60 characters.
std::string describe_json(const nlohmann::json& value);

}  // namespace pf

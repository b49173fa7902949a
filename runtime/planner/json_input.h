// The top level of a planner input (a cluster description, a saved profile): a JSON object whose
// fields `read` takes apart, every error prefixed with where it came from (a file name).
#pragma once

#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"

namespace pf::plan {

template <typename Read>
auto read_json_input(const nlohmann::json& value, const std::string& where, Read&& read) {
  PF_CHECK_ARG(value.is_object(), where, ": expected a JSON object, got ", value.type_name());
  try {
    return std::forward<Read>(read)(value);
  } catch (const Error& e) {
    throw Error(e.code(), where + ": " + e.what());
  }
}

}  // namespace pf::plan

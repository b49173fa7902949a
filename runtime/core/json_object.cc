#include "runtime/core/json_object.h"

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/core/json_text.h"

namespace pf {

JsonObject::JsonObject(const nlohmann::json& value, std::string path)
    : value_(value), path_(std::move(path)) {
  PF_CHECK_ARG(value_.is_object(), path_.empty() ? "model description" : path_,
               ": expected a JSON object, got ", value_.type_name());
}

std::string JsonObject::path_of(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

bool JsonObject::has(const std::string& key) const { return value_.contains(key); }

const nlohmann::json& JsonObject::get(const std::string& key) const {
  read_.insert(key);
  auto it = value_.find(key);
  PF_CHECK_ARG(it != value_.end(), path_of(key), ": required field is missing");
  return *it;
}

int64_t JsonObject::get_int(const std::string& key) const {
  const auto& v = get(key);
  PF_CHECK_ARG(v.is_number_integer(), path_of(key), ": expected an integer, got ", describe_json(v));
  PF_CHECK_ARG(json_integer_in(v, INT64_MIN, INT64_MAX), path_of(key), ": ", v.dump(),
               " is larger than a 64-bit signed integer");
  return v.get<int64_t>();
}

int64_t JsonObject::get_int_in(const std::string& key, int64_t fallback, int64_t lo, int64_t hi) const {
  read_.insert(key);
  return has(key) ? get_int_in(key, lo, hi) : fallback;
}

int64_t JsonObject::get_int_in(const std::string& key, int64_t lo, int64_t hi) const {
  const int64_t v = get_int(key);
  PF_CHECK_ARG(v >= lo && v <= hi, path_of(key), ": must be in [", lo, ", ", hi, "], got ", v);
  return v;
}

int64_t JsonObject::get_int(const std::string& key, int64_t fallback) const {
  read_.insert(key);
  return has(key) ? get_int(key) : fallback;
}

int64_t JsonObject::get_positive_int(const std::string& key) const {
  int64_t v = get_int(key);
  PF_CHECK_ARG(v > 0, path_of(key), ": must be > 0, got ", v);
  return v;
}

double JsonObject::get_number(const std::string& key, double fallback) const {
  read_.insert(key);
  if (!has(key)) return fallback;
  const auto& v = get(key);
  PF_CHECK_ARG(v.is_number(), path_of(key), ": expected a number, got ", describe_json(v));
  return v.get<double>();
}

bool JsonObject::get_bool(const std::string& key, bool fallback) const {
  read_.insert(key);
  if (!has(key)) return fallback;
  const auto& v = get(key);
  PF_CHECK_ARG(v.is_boolean(), path_of(key), ": expected true or false, got ", describe_json(v));
  return v.get<bool>();
}

std::string JsonObject::get_string(const std::string& key) const {
  const auto& v = get(key);
  PF_CHECK_ARG(v.is_string(), path_of(key), ": expected a string, got ", describe_json(v));
  return v.get<std::string>();
}

std::string JsonObject::get_string(const std::string& key, const std::string& fallback) const {
  read_.insert(key);
  return has(key) ? get_string(key) : fallback;
}

std::vector<int64_t> JsonObject::get_int_list(const std::string& key, const std::vector<int64_t>& fallback,
                                              int64_t max_item, size_t max_length) const {
  read_.insert(key);
  if (!has(key)) return fallback;
  const auto& v = get(key);
  PF_CHECK_ARG(v.is_array(), path_of(key), ": expected a list of integers, got ", describe_json(v));
  PF_CHECK_ARG(v.size() <= max_length, path_of(key), ": ", v.size(), " entries, more than the limit of ",
               max_length);
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    PF_CHECK_ARG(json_integer_in(v[i], 1, max_item), path_of(key), "[", i, "]: expected an integer in [1, ", max_item, "], got ", describe_json(v[i]));
    out.push_back(v[i].get<int64_t>());
  }
  return out;
}

const nlohmann::json& JsonObject::get_array(const std::string& key) const {
  const auto& v = get(key);
  PF_CHECK_ARG(v.is_array(), path_of(key), ": expected a list, got ", v.type_name());
  return v;
}

void JsonObject::reject_unknown(const std::set<std::string>& also_allowed) const {
  for (auto it = value_.begin(); it != value_.end(); ++it) {
    if (!read_.count(it.key()) && !also_allowed.count(it.key())) {
      fail(ErrorCode::kInvalidArgument, path_of(it.key()), ": unknown field '", it.key(), "'");
    }
  }
}

}  // namespace pf

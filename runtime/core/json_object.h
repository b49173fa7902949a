// Strict reading of one JSON object: typed getters that name the JSON path in every error, and a
// final check that no unknown field was given.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace pf {

class JsonObject {
 public:
  // Throws kInvalidArgument if `value` is not an object.
  JsonObject(const nlohmann::json& value, std::string path);

  bool has(const std::string& key) const;
  int64_t get_int(const std::string& key) const;                  // required
  int64_t get_int(const std::string& key, int64_t fallback) const;
  int64_t get_positive_int(const std::string& key) const;         // required, > 0
  // Required, in [lo, hi]; kInvalidArgument naming the field and the range otherwise.
  int64_t get_int_in(const std::string& key, int64_t lo, int64_t hi) const;
  // Optional, in [lo, hi]; kInvalidArgument naming the field and the range otherwise.
  int64_t get_int_in(const std::string& key, int64_t fallback, int64_t lo, int64_t hi) const;
  double get_number(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key) const;           // required
  std::string get_string(const std::string& key, const std::string& fallback) const;
  // Each entry in [1, max_item], at most max_length entries.
  std::vector<int64_t> get_int_list(const std::string& key, const std::vector<int64_t>& fallback,
                                    int64_t max_item, size_t max_length) const;
  const nlohmann::json& get_array(const std::string& key) const;  // required
  const nlohmann::json& get(const std::string& key) const;        // required, any type

  // The path of a field, e.g. "layers[2].heads".
  std::string path_of(const std::string& key) const;
  // Throws kInvalidArgument naming the first field that no getter asked for and not in `also_allowed`.
  void reject_unknown(const std::set<std::string>& also_allowed = {}) const;

 private:
  const nlohmann::json& value_;
  std::string path_;
  mutable std::set<std::string> read_;
};

}  // namespace pf

// TrainingConfig as key/value entries: one table of keys, each with its type, its summary and how
// its text value sets the config. The C API takes entries (pf_trainer_options.config_entries,
// since 0.11) and the bindings pass them through, so a new option needs the config field, one row
// here and its rules in the capability table — no new struct field, no new binding code. This is
// ONNX Runtime's session-config-entry pattern.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/run/training_config.h"

namespace pf {

struct ConfigKey {
  std::string key;      // "partition"
  std::string type;     // "int", "float", "bool", "string", "int list", "one of params, even"
  std::string summary;  // one line
  std::function<void(TrainingConfig&, const std::string& value)> set;  // throws kInvalidArgument
};

// Every key, in the order of TrainingConfig's groups.
const std::vector<ConfigKey>& config_keys();

// Sets `key` to `value` (its text form: "4", "0.5", "true", "3,4", "even"). kInvalidArgument naming
// the key and the value for a bad value, and listing the closest known key for an unknown one.
void set_config_entry(TrainingConfig& config, const std::string& key, const std::string& value);

// The keys as a Markdown table (docs/CAPABILITIES.md, "Config keys").
std::string config_keys_markdown();

}  // namespace pf

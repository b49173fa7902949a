// The shipped GPU presets' JSON text (presets/*.json), compiled in by the genrule in BUILD.
#pragma once

#include <vector>

namespace pf::gpu {

struct PresetText {
  const char* name;  // the file's name without .json
  const char* json;
};

// In the files' name order.
const std::vector<PresetText>& preset_texts();

}  // namespace pf::gpu

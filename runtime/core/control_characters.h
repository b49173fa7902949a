// Names from input (layer names, schedule names) must not carry control characters: they end up
// in checkpoints, one-line text forms and terminals.
#pragma once

#include <algorithm>
#include <string_view>

namespace pf {

// True when `text` has a byte below 0x20 (tab, line break, carriage return, ...) or DEL.
inline bool has_control_character(std::string_view text) {
  return std::any_of(text.begin(), text.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

}  // namespace pf

// Names from input (layer names, schedule names) must not carry control characters: they end up
// in checkpoints, one-line text forms and terminals. Error messages, which echo input (a schedule
// file's token, a path, a JSON key), escape them, so that a hostile file cannot drive the terminal.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

namespace pf {

// True when `text` has a byte below 0x20 (tab, line break, carriage return, ...) or DEL.
inline bool has_control_character(std::string_view text) {
  return std::any_of(text.begin(), text.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

// `text` with every control character written as an escape a terminal shows as text: \r, \x1b,
// \x7f, and the UTF-8 C1 controls U+0080..U+009F (\u009b: the one-byte CSI) as \u00XX. Line
// breaks and tabs stay (messages may span lines); other UTF-8 passes unchanged. Escaping twice
// changes nothing more: a backslash is printable.
std::string escape_control_characters(std::string_view text);

}  // namespace pf

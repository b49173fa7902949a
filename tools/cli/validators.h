// Option checks with messages a user can read: CLI11's own number checks print their range's
// bounds with 300 digits ("Value abc not in range 0.000000 to 17976931348623157...") and do not
// say that a word is not a number. The message follows the option's name ("--lr: ...").
#pragma once

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

#include "tools/cli/data_option.h"

namespace pf::cli {

namespace detail {

// A finite number > 0 (strict) or >= 0.
inline CLI::Validator number_above_zero(bool strict, const std::string& description) {
  return CLI::Validator(
      [strict](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v))
          return "'" + text + "' is not a finite number";
        if (strict ? !(v > 0) : !(v >= 0)) return std::string("must be ") + (strict ? "> 0" : ">= 0") + ", got " + text;
        return "";
      },
      description);
}

}  // namespace detail

inline CLI::Validator positive_number() { return detail::number_above_zero(true, "POSITIVE"); }
inline CLI::Validator non_negative_number() { return detail::number_above_zero(false, "NONNEGATIVE"); }

// Strips the blanks around each item of a list option, so "1f1b, zb-h1" means "1f1b,zb-h1".
inline CLI::Validator trimmed() {
  return CLI::Validator(
      [](std::string& text) {
        const size_t first = text.find_first_not_of(" \t");
        const size_t last = text.find_last_not_of(" \t");
        text = first == std::string::npos ? std::string() : text.substr(first, last - first + 1);
        return std::string();
      },
      "");
}

// A file that exists, tokens:FILE for one, or cifar10:PATH for a file or folder that exists (the
// --data of train and eval).
inline CLI::Validator data_file() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        for (const std::string prefix : {kTokenFilePrefix, kCifar10Prefix}) {
          if (text.rfind(prefix, 0) != 0) continue;
          const std::string path = text.substr(prefix.size());
          const std::string why = prefix == kCifar10Prefix ? CLI::ExistingPath(path) : CLI::ExistingFile(path);
          return why.empty() ? why : why + " (in '" + text + "')";
        }
        return CLI::ExistingFile(text);
      },
      "FILE|tokens:FILE|cifar10:PATH");
}

}  // namespace pf::cli

// "Did you mean" for names typed by people: schedule names, command-line options and subcommands.
#pragma once

#include <string>
#include <vector>

namespace pf {

// The known name closest to `typed` (optimal string alignment distance: insertions, deletions,
// substitutions and swaps of neighbours), when it is close enough to be a typo: at most 1 edit
// for names of up to 4 characters, 2 up to 8, 3 beyond. "" when none is.
std::string closest_name(const std::string& typed, const std::vector<std::string>& known);

// "; did you mean 'x'?" for closest_name, or "".
std::string did_you_mean(const std::string& typed, const std::vector<std::string>& known);

}  // namespace pf

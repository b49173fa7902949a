// A fingerprint of a model's parameters: SHA-256 over the raw bytes of every parameter value, in
// the order given (a model's parameters() order). Two runs that should end bitwise equal print the
// same hex string; any differing bit changes it.
#pragma once

#include <string>
#include <vector>

#include "runtime/layers/parameter.h"

namespace pf {

// Lower-case hex, 64 characters.
std::string parameter_checksum(const std::vector<Parameter*>& parameters);

}  // namespace pf

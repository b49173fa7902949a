// A fingerprint of a model's parameters: SHA-256 over the raw bytes of every parameter value, in
// the order given (a model's parameters() order). Two runs that should end bitwise equal print the
// same hex string; any differing bit changes it.
#pragma once

#include <string>
#include <vector>

#include "runtime/core/sha256.h"
#include "runtime/layers/parameter.h"
#include "runtime/tensor_parallel/group.h"

namespace pf {

// Lower-case hex, 64 characters.
std::string parameter_checksum(const std::vector<Parameter*>& parameters);

// The same fingerprint of the whole model from a tensor-parallel member's parameters: each split
// parameter's slices are gathered over `group` and hashed whole (a collective: every member calls it
// with the same parameters), so the checksum does not depend on T — the same values print the same
// checksum at any T and in one process. `group` null: parameter_checksum.
std::string whole_parameter_checksum(const std::vector<Parameter*>& parameters, TensorParallelGroup* group);

// One parameter into `digest`: `values` are its host bytes (its slice's, when split); a split one is
// gathered whole over `group` first (a collective).
void hash_whole_parameter(Sha256& digest, const Parameter& parameter, const char* values, TensorParallelGroup* group);

}  // namespace pf

// Seeded initialisation. Each parameter's values depend only on (seed, parameter name, element
// index): never on the partition, the order of construction or the number of stages.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/layers/parameter.h"

namespace pf {

void initialize_parameter(Parameter& parameter, uint64_t seed);
void initialize_parameters(const std::vector<Parameter*>& parameters, uint64_t seed);

}  // namespace pf

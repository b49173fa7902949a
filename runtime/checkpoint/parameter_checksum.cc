#include "runtime/checkpoint/parameter_checksum.h"

#include <vector>

#include "runtime/core/error.h"

namespace pf {

std::string parameter_checksum(const std::vector<Parameter*>& parameters) {
  Sha256 digest;
  for (const Parameter* p : parameters) {
    PF_CHECK_ARG(p != nullptr, "parameter_checksum: null parameter");
    if (!p->value.defined()) continue;
    // (Device parameters: the same bytes, copied to the host; waits for the device.)
    const Tensor host = p->value.to_host();
    digest.update(host.data<char>(), host.nbytes());
  }
  return digest.hex();
}

void hash_whole_parameter(Sha256& digest, const Parameter& parameter, const char* values, TensorParallelGroup* group) {
  if (group == nullptr || !parameter.shard.split()) {
    digest.update(values, static_cast<size_t>(shape_numel(parameter.shape)) * sizeof(float));
    return;
  }
  std::vector<float> whole(static_cast<size_t>(shape_numel(whole_shape(parameter))));
  gather_whole(parameter, reinterpret_cast<const float*>(values), *group, "checksum: gathering " + parameter.name,
               whole.data());
  digest.update(reinterpret_cast<const char*>(whole.data()), whole.size() * sizeof(float));
}

std::string whole_parameter_checksum(const std::vector<Parameter*>& parameters, TensorParallelGroup* group) {
  if (group == nullptr) return parameter_checksum(parameters);
  Sha256 digest;
  for (const Parameter* p : parameters) {
    PF_CHECK_ARG(p != nullptr && p->value.defined(), "whole_parameter_checksum: expected allocated parameters");
    // Device parameters through a host copy (waits for the device).
    hash_whole_parameter(digest, *p, p->value.to_host().data<char>(), group);
  }
  return digest.hex();
}

}  // namespace pf

#include "runtime/checkpoint/parameter_checksum.h"

#include "runtime/core/error.h"
#include "runtime/core/sha256.h"

namespace pf {

std::string parameter_checksum(const std::vector<Parameter*>& parameters) {
  Sha256 digest;
  for (const Parameter* p : parameters) {
    PF_CHECK_ARG(p != nullptr, "parameter_checksum: null parameter");
    if (!p->value.defined()) continue;
    if (p->value.device().kind == DeviceKind::kCpu) {
      digest.update(p->value.data<char>(), p->value.nbytes());
    } else {  // device parameters: the same bytes, copied to the host (waits for the device)
      const Tensor host = p->value.to_device(Device::cpu());
      digest.update(host.data<char>(), host.nbytes());
    }
  }
  return digest.hex();
}

}  // namespace pf

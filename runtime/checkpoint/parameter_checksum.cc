#include "runtime/checkpoint/parameter_checksum.h"

#include "runtime/core/error.h"
#include "runtime/core/sha256.h"

namespace pf {

std::string parameter_checksum(const std::vector<Parameter*>& parameters) {
  Sha256 digest;
  for (const Parameter* p : parameters) {
    PF_CHECK_ARG(p != nullptr, "parameter_checksum: null parameter");
    if (!p->value.defined()) continue;
    PF_CHECK_ARG(p->value.device().kind == DeviceKind::kCpu, "parameter_checksum: '", p->name, "' is on ",
                 p->value.device().to_string(), "; copy it to the CPU first");
    digest.update(p->value.data<char>(), p->value.nbytes());
  }
  return digest.hex();
}

}  // namespace pf

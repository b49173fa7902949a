#include "runtime/models/local_head_kind.h"

#include <algorithm>

#include "runtime/core/error.h"

namespace pf {

const std::vector<std::string>& local_head_kinds() {
  static const std::vector<std::string> kinds = {"auto", "linear", "layernorm-linear", "mlp"};
  return kinds;
}

void check_local_head_kind(const std::string& kind, const std::string& field) {
  const auto& k = local_head_kinds();
  PF_CHECK_ARG(std::find(k.begin(), k.end(), kind) != k.end(), field, ": unknown head '", kind,
               "' (known: auto, linear, layernorm-linear, mlp)");
}

}  // namespace pf

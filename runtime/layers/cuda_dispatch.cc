#include "runtime/layers/cuda_dispatch.h"

#include "runtime/core/error.h"

namespace pf {

void check_same_device(const char* type, const std::string& name, const char* what_a, const Device& a,
                       const char* what_b, const Device& b) {
  if (a == b) return;
  if (name.empty()) {
    fail(ErrorCode::kInvalidArgument, type, ": ", what_a, " (on ", a.to_string(), ") and ", what_b, " (on ",
         b.to_string(), ") are on different devices; one op cannot mix devices");
  }
  fail(ErrorCode::kInvalidArgument, type, " '", name, "': ", what_a, " (on ", a.to_string(), ") and ", what_b,
       " (on ", b.to_string(), ") are on different devices; one op cannot mix devices");
}

}  // namespace pf

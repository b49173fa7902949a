// The kinds of local learning's auxiliary heads (runtime/train/local_heads.h builds them), which a
// model JSON may name in "local_head" and PipelineOptions::local_head may set.
#pragma once

#include <string>
#include <vector>

namespace pf {

// "auto", "linear", "layernorm-linear", "mlp".
const std::vector<std::string>& local_head_kinds();
// kInvalidArgument starting with `field` and listing the kinds for another one.
void check_local_head_kind(const std::string& kind, const std::string& field = "local_head");

}  // namespace pf

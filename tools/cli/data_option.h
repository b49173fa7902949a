// How --data (train, eval, plan) names a token file instead of text files: tokens:FILE
// (runtime/data/token_file.h).
#pragma once

namespace pf::cli {

inline constexpr const char kTokenFilePrefix[] = "tokens:";

}  // namespace pf::cli

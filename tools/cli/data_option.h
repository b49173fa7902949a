// How --data (train, eval, plan) names data other than text files: tokens:FILE, a token file
// (runtime/data/token_file.h), and cifar10:PATH, CIFAR-10's binary files (runtime/data/cifar10.h).
#pragma once

namespace pf::cli {

inline constexpr const char kTokenFilePrefix[] = "tokens:";
inline constexpr const char kCifar10Prefix[] = "cifar10:";

}  // namespace pf::cli

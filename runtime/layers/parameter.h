// A named trainable tensor with its gradient and the rule that initialises it from a seed.
#pragma once

#include <string>

#include "runtime/tensor/tensor.h"

namespace pf {

struct InitSpec {
  enum class Kind { kZeros, kOnes, kNormal } kind = Kind::kZeros;
  float stddev = 0.0f;  // kNormal only

  static InitSpec zeros() { return {Kind::kZeros, 0.0f}; }
  static InitSpec ones() { return {Kind::kOnes, 0.0f}; }
  static InitSpec normal(float stddev) { return {Kind::kNormal, stddev}; }
};

struct Parameter {
  std::string name;  // globally unique, e.g. "blocks.0.attn.qkv.weight"
  Tensor value;      // f32, charged to kParameters
  Tensor grad;       // f32, charged to kGradients; accumulated by backward_weight
  InitSpec init;
};

// Allocates value and grad (zeroed) for a parameter of the given shape.
Parameter make_parameter(const std::string& name, const Shape& shape, InitSpec init);

}  // namespace pf

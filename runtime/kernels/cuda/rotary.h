// Rotary position embedding (RoPE, Hugging Face's rotate_half form; runtime/layers/attention.cc's
// rotate): in qkv [batch * steps, width], the first `rotated_heads` heads of head_dim columns (the
// query heads, then the key heads) have each pair (x_i, x_{i + hd/2}) at position p = offset + t
// rotated by p * theta^(-2i / hd), in place; `inverse` rotates by minus the angle (the gradients).
// The angle tables [steps, hd/2] are computed as the CPU computes them (f32 exponent, inv_freq and
// angle; pow, cos and sin rounded to f32 from double, so they agree with the host's correctly
// rounded f32 functions to the last bit almost always) into `workspace`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cuda_runtime_api.h>

#include "runtime/kernels/cuda/types.h"

namespace pf::cuda {

struct RotaryShape {
  int64_t batch = 0, steps = 0, width = 0;  // qkv [batch, steps, width]
  int64_t rotated_heads = 0, head_dim = 0;  // head_dim even
  int64_t offset = 0;                       // the position of step 0
  float theta = 10000.0f;
};

size_t rotary_workspace_bytes(const RotaryShape& shape);

template <typename T>
void rotary_embedding(cudaStream_t stream, const RotaryShape& shape, bool inverse, T* qkv, void* workspace);

}  // namespace pf::cuda

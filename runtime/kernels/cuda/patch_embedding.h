// A Vision Transformer's token kernels (runtime/layers/patch_embedding.cc, class_token.cc): the
// patch gather/scatter between images [batch, C*H*W] (channel-major) and patch rows
// [batch * N, C*p*p] (patch i of an image at rows [top, top+p), columns [left, left+p), its value
// (ch, y, x) at column (ch*p + y)*p + x), the token assembly with the class token and the learned
// positions, and the class-token readout. The patch projection is a gemm (gemm.h) and the bias /
// position gradients are column sums (elementwise.h's bias_backward), composed as the CPU layer.
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "runtime/kernels/cuda/types.h"

namespace pf::cuda {

struct PatchShape {
  int64_t batch = 0, channels = 0, height = 0, width = 0, patch = 1, dim = 0;
  PF_HD int64_t patches() const { return (height / patch) * (width / patch); }  // N
  PF_HD int64_t patch_size() const { return channels * patch * patch; }
};

// patches [batch * N, C*p*p] from images [batch, C*H*W] (gather), or images from patches (scatter:
// every image element belongs to exactly one patch, so this writes each once).
template <typename T>
void gather_patches(cudaStream_t stream, const PatchShape& shape, const T* images, T* patches);
template <typename T>
void scatter_patches(cudaStream_t stream, const PatchShape& shape, const T* patches, T* images);

// tokens [batch, 1 + N, dim]: tokens[b, 0] = cls + positions[0]; tokens[b, 1 + n] =
// projected[b*N + n] + positions[1 + n].
template <typename T>
void assemble_patch_tokens(cudaStream_t stream, const PatchShape& shape, const T* projected, const T* cls,
                           const T* positions, T* tokens);

// rows [batch * N, dim] = the patch tokens' rows of grad [batch, 1 + N, dim] (token 0 left out).
template <typename T>
void patch_token_rows(cudaStream_t stream, const PatchShape& shape, const T* grad, T* rows);

// dcls[c] += sum_b grad[b, 0, c] (fp32, batch order, no atomics).
template <typename T>
void class_token_grad(cudaStream_t stream, int64_t batch, int64_t steps, int64_t dim, const T* grad, float* dcls);

// Class-token readout: y [batch, dim] = x[b, 0, :]; backward: dx [batch, steps, dim] = dy at token 0,
// zeros elsewhere (written).
template <typename T>
void first_token_forward(cudaStream_t stream, int64_t batch, int64_t steps, int64_t dim, const T* x, T* y);
template <typename T>
void first_token_backward(cudaStream_t stream, int64_t batch, int64_t steps, int64_t dim, const T* dy, T* dx);

}  // namespace pf::cuda

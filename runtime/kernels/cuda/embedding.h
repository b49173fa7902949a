// Token + position embedding (runtime/layers/embedding.cc): ids [batch, steps] (i32) ->
// y[b, t, :] = token_weight[ids[b, t], :] + position_weight[t, :]   (dim columns).
// position_weight (F) and dposition (W) may be null: an embedding without learned positions
// (Llama's, whose positions are rotary), y = token_weight[ids[b, t], :].
// Ids must be in [0, vocab) (the caller validates them on the host, as the CPU layer does), or
// kIdNotHeld: a vocabulary-parallel member's row whose token another member holds, which gets a
// zero token row (its position's row still added) and no token gradient, but adds to the position
// gradient. Rows with any other out-of-range id get NaN outputs and contribute no gradient.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cuda_runtime_api.h>

#include "runtime/kernels/cuda/types.h"

namespace pf::cuda {

constexpr int32_t kIdNotHeld = -1;  // = pf::kEmbeddingIdNotHeld (runtime/backend/cuda_backend.h)

template <typename T>
void embedding_forward(cudaStream_t stream, int64_t batch, int64_t steps, int64_t dim, int64_t vocab,
                       const int32_t* ids, const T* token_weight, const T* position_weight, T* y);

// Workspace of embedding_backward_weight: one int32 per row (batch * steps).
size_t embedding_backward_workspace_bytes(int64_t batch, int64_t steps);

// W: dtoken[id, :] += dy[r, :] for every row r with that id, dposition[t, :] += dy[b, t, :].
// Deterministic and in the CPU's order, with no float atomics: the rows are stably sorted by id
// (position = #rows with a smaller id + #earlier rows with the same id, an O(rows^2 / 256) integer
// count), then one block per distinct id adds that id's rows in increasing row order, starting
// from the existing gradient value — for fp32 dy this is bitwise the CPU's result. The position
// gradient adds batches in order. The B pass of an embedding has no input gradient (token ids).
template <typename T>
void embedding_backward_weight(cudaStream_t stream, int64_t batch, int64_t steps, int64_t dim,
                               int64_t vocab, const int32_t* ids, const T* dy, float* dtoken,
                               float* dposition, void* workspace);

}  // namespace pf::cuda

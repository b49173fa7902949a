#include "runtime/kernels/cuda/attention.h"

#include <cmath>
#include <type_traits>

#include "runtime/core/error.h"
#include "runtime/kernels/cuda/gemm.h"
#include "runtime/kernels/cuda/softmax.h"

namespace pf::cuda {

namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

void check_shape(const AttentionShape& s) {
  PF_CHECK_ARG(s.batch >= 0 && s.steps > 0 && s.dim > 0 && s.heads > 0 && s.dim % s.heads == 0,
               "attention: bad shape (batch ", s.batch, ", steps ", s.steps, ", dim ", s.dim, ", heads ",
               s.heads, ")");
}

// Workspace layout (all per batch element, reused across the batch loop):
//   [d_attended: T rows*dim (backward only)] [scores / dP: f32 heads*steps*steps]
//   [dS: T heads*steps*steps (bf16 only; fp32 works in place in dP)]
template <typename T>
struct Workspace {
  T* d_attended;
  float* scores;
  T* dscores;
};

template <typename T>
Workspace<T> carve(const AttentionShape& s, void* base) {
  char* p = static_cast<char*>(base);
  const size_t tt = static_cast<size_t>(s.heads * s.steps * s.steps);
  Workspace<T> w;
  w.d_attended = reinterpret_cast<T*>(p);
  p += align_up(static_cast<size_t>(s.rows() * s.dim) * sizeof(T));
  w.scores = reinterpret_cast<float*>(p);
  p += align_up(tt * sizeof(float));
  w.dscores = std::is_same_v<T, float> ? reinterpret_cast<T*>(w.scores) : reinterpret_cast<T*>(p);
  return w;
}

}  // namespace

template <typename T>
size_t attention_workspace_bytes(const AttentionShape& s) {
  const size_t tt = static_cast<size_t>(s.heads * s.steps * s.steps);
  size_t bytes = align_up(static_cast<size_t>(s.rows() * s.dim) * sizeof(T)) + align_up(tt * sizeof(float));
  if (!std::is_same_v<T, float>) bytes += align_up(tt * sizeof(T));
  return bytes;
}

template <typename T>
void attention_core_forward(cudaStream_t stream, const AttentionShape& s, const T* qkv, T* probs,
                            T* attended, void* workspace, const GemmOptions& options) {
  check_shape(s);
  const int64_t steps = s.steps, dim = s.dim, heads = s.heads, hd = s.head_dim();
  const int64_t tt = steps * steps;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const Workspace<T> ws = carve<T>(s, workspace);
  for (int64_t b = 0; b < s.batch; ++b) {
    const T* q = qkv + b * steps * 3 * dim;
    const T* k = q + dim;
    const T* v = q + 2 * dim;
    T* p = probs + b * heads * tt;
    // fp32: scores go straight into the probabilities buffer and the softmax runs in place.
    float* scores = std::is_same_v<T, float> ? reinterpret_cast<float*>(p) : ws.scores;
    // S_h = scale * q_h k_h^T   [steps, steps] per head
    gemm_strided_batched<T, float>(stream, false, true, steps, steps, hd, scale, q, 3 * dim, hd, k, 3 * dim,
                                   hd, 0.0f, scores, steps, tt, heads, options);
    causal_softmax_forward<T>(stream, heads * steps, steps, scores, p);
    // o_h = P_h v_h, written into columns h*hd.. of attended
    gemm_strided_batched<T, T>(stream, false, false, steps, hd, steps, 1.0f, p, steps, tt, v, 3 * dim, hd,
                               0.0f, attended + b * steps * dim, dim, hd, heads, options);
  }
}

template <typename T>
void attention_core_backward(cudaStream_t stream, const AttentionShape& s, const T* qkv, const T* probs,
                             const T* d_attended, T* d_qkv, void* workspace, const GemmOptions& options) {
  check_shape(s);
  const int64_t steps = s.steps, dim = s.dim, heads = s.heads, hd = s.head_dim();
  const int64_t tt = steps * steps;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const Workspace<T> ws = carve<T>(s, workspace);
  for (int64_t b = 0; b < s.batch; ++b) {
    const T* q = qkv + b * steps * 3 * dim;
    const T* k = q + dim;
    const T* v = q + 2 * dim;
    T* dq = d_qkv + b * steps * 3 * dim;
    T* dk = dq + dim;
    T* dv = dq + 2 * dim;
    const T* p = probs + b * heads * tt;
    const T* dout = d_attended + b * steps * dim;
    // dV_h = P_h^T dO_h
    gemm_strided_batched<T, T>(stream, true, false, steps, hd, steps, 1.0f, p, steps, tt, dout, dim, hd, 0.0f,
                               dv, 3 * dim, hd, heads, options);
    // dP_h = dO_h V_h^T (fp32)
    gemm_strided_batched<T, float>(stream, false, true, steps, steps, hd, 1.0f, dout, dim, hd, v, 3 * dim, hd,
                                   0.0f, ws.scores, steps, tt, heads, options);
    // dS = P * (dP - rowsum(P * dP)), causal
    causal_softmax_backward<T>(stream, heads * steps, steps, p, ws.scores, ws.dscores);
    // dQ_h = scale dS_h K_h ; dK_h = scale dS_h^T Q_h
    gemm_strided_batched<T, T>(stream, false, false, steps, hd, steps, scale, ws.dscores, steps, tt, k, 3 * dim,
                               hd, 0.0f, dq, 3 * dim, hd, heads, options);
    gemm_strided_batched<T, T>(stream, true, false, steps, hd, steps, scale, ws.dscores, steps, tt, q, 3 * dim,
                               hd, 0.0f, dk, 3 * dim, hd, heads, options);
  }
}

template <typename T>
void attention_forward(cudaStream_t stream, const AttentionShape& s, const AttentionWeights<T>& w,
                       const T* x, const AttentionActivations<T>& acts, T* y, void* workspace,
                       const LinearOptions& options) {
  check_shape(s);
  const int64_t rows = s.rows(), dim = s.dim;
  linear_forward<T>(stream, rows, dim, 3 * dim, x, w.qkv_weight, w.qkv_bias, acts.qkv, options);
  attention_core_forward<T>(stream, s, acts.qkv, acts.probs, acts.attended, workspace, options.gemm);
  linear_forward<T>(stream, rows, dim, dim, acts.attended, w.proj_weight, w.proj_bias, y, options);
}

template <typename T>
void attention_backward_input(cudaStream_t stream, const AttentionShape& s, const AttentionWeights<T>& w,
                              const AttentionActivations<T>& acts, const T* dy, T* dx, void* workspace,
                              const LinearOptions& options) {
  check_shape(s);
  const int64_t rows = s.rows(), dim = s.dim;
  const Workspace<T> ws = carve<T>(s, workspace);
  linear_backward_input<T>(stream, rows, dim, dim, dy, w.proj_weight, ws.d_attended, options);
  attention_core_backward<T>(stream, s, acts.qkv, acts.probs, ws.d_attended, acts.d_qkv, workspace,
                             options.gemm);
  linear_backward_input<T>(stream, rows, dim, 3 * dim, acts.d_qkv, w.qkv_weight, dx, options);
}

template <typename T>
void attention_backward_weight(cudaStream_t stream, const AttentionShape& s, const T* x,
                               const AttentionActivations<T>& acts, const T* dy, const AttentionGrads& g,
                               const LinearOptions& options) {
  check_shape(s);
  const int64_t rows = s.rows(), dim = s.dim;
  linear_backward_weight<T>(stream, rows, dim, dim, acts.attended, dy, g.proj_weight, g.proj_bias, options);
  linear_backward_weight<T>(stream, rows, dim, 3 * dim, x, acts.d_qkv, g.qkv_weight, g.qkv_bias, options);
}

#define PF_INSTANTIATE(T)                                                                                 \
  template size_t attention_workspace_bytes<T>(const AttentionShape&);                                    \
  template void attention_core_forward<T>(cudaStream_t, const AttentionShape&, const T*, T*, T*, void*,    \
                                          const GemmOptions&);                                            \
  template void attention_core_backward<T>(cudaStream_t, const AttentionShape&, const T*, const T*,        \
                                           const T*, T*, void*, const GemmOptions&);                      \
  template void attention_forward<T>(cudaStream_t, const AttentionShape&, const AttentionWeights<T>&,      \
                                     const T*, const AttentionActivations<T>&, T*, void*,                 \
                                     const LinearOptions&);                                               \
  template void attention_backward_input<T>(cudaStream_t, const AttentionShape&,                          \
                                            const AttentionWeights<T>&, const AttentionActivations<T>&,   \
                                            const T*, T*, void*, const LinearOptions&);                   \
  template void attention_backward_weight<T>(cudaStream_t, const AttentionShape&, const T*,               \
                                             const AttentionActivations<T>&, const T*,                    \
                                             const AttentionGrads&, const LinearOptions&);
PF_INSTANTIATE(float)
PF_INSTANTIATE(bf16)
#undef PF_INSTANTIATE

}  // namespace pf::cuda

#include "runtime/kernels/cuda/attention.h"

#include <cmath>
#include <type_traits>

#include "runtime/core/error.h"
#include "runtime/kernels/cuda/gemm.h"
#include "runtime/kernels/cuda/grouped_query.h"
#include "runtime/kernels/cuda/softmax.h"

namespace pf::cuda {

namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

void check_shape(const AttentionShape& s) {
  PF_CHECK_ARG(s.batch >= 0 && s.steps > 0 && s.dim > 0 && s.heads > 0 && s.dim % s.heads == 0 && s.kv_heads >= 0 &&
                   s.heads % s.key_heads() == 0,
               "attention: bad shape (batch ", s.batch, ", steps ", s.steps, ", dim ", s.dim, ", heads ", s.heads,
               ", kv_heads ", s.kv_heads, ")");
}

// Workspace layout (all per batch element, reused across the batch loop):
//   [d_attended: T rows*dim (backward only)] [scores / dP: f32 heads*steps*steps]
//   [dS: T heads*steps*steps (bf16 only; fp32 works in place in dP)]
//   [dK, dV per query head: f32 2 * steps*dim (grouped-query only)]
template <typename T>
struct Workspace {
  T* d_attended;
  float* scores;
  T* dscores;
  float* dk_heads;
  float* dv_heads;
};

bool grouped(const AttentionShape& s) { return s.key_heads() != s.heads; }

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
  if (!std::is_same_v<T, float>) p += align_up(tt * sizeof(T));
  const size_t per_head = static_cast<size_t>(s.steps * s.dim);
  w.dk_heads = grouped(s) ? reinterpret_cast<float*>(p) : nullptr;
  w.dv_heads = grouped(s) ? w.dk_heads + per_head : nullptr;
  return w;
}

// The products that pair query heads with their key/value heads: one strided-batched call over all
// heads when each query head has its own key/value head, else one call per key/value head over its
// `group` query heads, reading that head's k or v with stride 0.
struct HeadCalls {
  int64_t calls, per_call, kv_stride;
};

HeadCalls head_calls(const AttentionShape& s) {
  if (!grouped(s)) return {1, s.heads, s.head_dim()};
  return {s.key_heads(), s.heads / s.key_heads(), 0};
}

}  // namespace

template <typename T>
size_t attention_workspace_bytes(const AttentionShape& s) {
  const size_t tt = static_cast<size_t>(s.heads * s.steps * s.steps);
  size_t bytes = align_up(static_cast<size_t>(s.rows() * s.dim) * sizeof(T)) + align_up(tt * sizeof(float));
  if (!std::is_same_v<T, float>) bytes += align_up(tt * sizeof(T));
  if (grouped(s)) bytes += align_up(2 * static_cast<size_t>(s.steps * s.dim) * sizeof(float));
  return bytes;
}

template <typename T>
void attention_core_forward(cudaStream_t stream, const AttentionShape& s, const T* qkv, T* probs,
                            T* attended, void* workspace, const GemmOptions& options) {
  check_shape(s);
  const int64_t steps = s.steps, dim = s.dim, heads = s.heads, hd = s.head_dim();
  const int64_t width = s.qkv_width(), tt = steps * steps;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const Workspace<T> ws = carve<T>(s, workspace);
  const HeadCalls hc = head_calls(s);
  for (int64_t b = 0; b < s.batch; ++b) {
    const T* q = qkv + b * steps * width;
    const T* k = q + dim;
    const T* v = k + s.kv_dim();
    T* p = probs + b * heads * tt;
    // fp32: scores go straight into the probabilities buffer and the softmax runs in place.
    float* scores = std::is_same_v<T, float> ? reinterpret_cast<float*>(p) : ws.scores;
    for (int64_t c = 0; c < hc.calls; ++c) {
      const int64_t h0 = c * hc.per_call;  // first query head of this call; c is its key/value head
      // S_h = scale * q_h k_h^T   [steps, steps] per head
      gemm_strided_batched<T, float>(stream, false, true, steps, steps, hd, scale, q + h0 * hd, width, hd,
                                     k + c * hd, width, hc.kv_stride, 0.0f, scores + h0 * tt, steps, tt, hc.per_call,
                                     options);
    }
    causal_softmax_forward<T>(stream, heads * steps, steps, scores, p, s.causal);
    for (int64_t c = 0; c < hc.calls; ++c) {
      const int64_t h0 = c * hc.per_call;
      // o_h = P_h v_h, written into columns h*hd.. of attended
      gemm_strided_batched<T, T>(stream, false, false, steps, hd, steps, 1.0f, p + h0 * tt, steps, tt, v + c * hd,
                                 width, hc.kv_stride, 0.0f, attended + b * steps * dim + h0 * hd, dim, hd, hc.per_call,
                                 options);
    }
  }
}

template <typename T>
void attention_core_backward(cudaStream_t stream, const AttentionShape& s, const T* qkv, const T* probs,
                             const T* d_attended, T* d_qkv, void* workspace, const GemmOptions& options) {
  check_shape(s);
  const int64_t steps = s.steps, dim = s.dim, heads = s.heads, hd = s.head_dim();
  const int64_t width = s.qkv_width(), kv_dim = s.kv_dim(), tt = steps * steps;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const Workspace<T> ws = carve<T>(s, workspace);
  const HeadCalls hc = head_calls(s);
  for (int64_t b = 0; b < s.batch; ++b) {
    const T* q = qkv + b * steps * width;
    const T* k = q + dim;
    const T* v = k + kv_dim;
    T* dq = d_qkv + b * steps * width;
    T* dk = dq + dim;
    T* dv = dk + kv_dim;
    const T* p = probs + b * heads * tt;
    const T* dout = d_attended + b * steps * dim;
    // dV_h = P_h^T dO_h (grouped: one per query head, then summed per key/value head)
    if (grouped(s)) {
      gemm_strided_batched<T, float>(stream, true, false, steps, hd, steps, 1.0f, p, steps, tt, dout, dim, hd, 0.0f,
                                     ws.dv_heads, dim, hd, heads, options);
      sum_query_head_groups<T>(stream, steps, heads, s.key_heads(), hd, ws.dv_heads, dv, width);
    } else {
      gemm_strided_batched<T, T>(stream, true, false, steps, hd, steps, 1.0f, p, steps, tt, dout, dim, hd, 0.0f,
                                 dv, width, hd, heads, options);
    }
    // dP_h = dO_h V_h^T (fp32)
    for (int64_t c = 0; c < hc.calls; ++c) {
      const int64_t h0 = c * hc.per_call;
      gemm_strided_batched<T, float>(stream, false, true, steps, steps, hd, 1.0f, dout + h0 * hd, dim, hd,
                                     v + c * hd, width, hc.kv_stride, 0.0f, ws.scores + h0 * tt, steps, tt,
                                     hc.per_call, options);
    }
    // dS = P * (dP - rowsum(P * dP)), masked when causal
    causal_softmax_backward<T>(stream, heads * steps, steps, p, ws.scores, ws.dscores, s.causal);
    // dQ_h = scale dS_h K_h
    for (int64_t c = 0; c < hc.calls; ++c) {
      const int64_t h0 = c * hc.per_call;
      gemm_strided_batched<T, T>(stream, false, false, steps, hd, steps, scale, ws.dscores + h0 * tt, steps, tt,
                                 k + c * hd, width, hc.kv_stride, 0.0f, dq + h0 * hd, width, hd, hc.per_call, options);
    }
    // dK_h = scale dS_h^T Q_h
    if (grouped(s)) {
      gemm_strided_batched<T, float>(stream, true, false, steps, hd, steps, scale, ws.dscores, steps, tt, q, width,
                                     hd, 0.0f, ws.dk_heads, dim, hd, heads, options);
      sum_query_head_groups<T>(stream, steps, heads, s.key_heads(), hd, ws.dk_heads, dk, width);
    } else {
      gemm_strided_batched<T, T>(stream, true, false, steps, hd, steps, scale, ws.dscores, steps, tt, q, width, hd,
                                 0.0f, dk, width, hd, heads, options);
    }
  }
}

template <typename T>
void attention_forward(cudaStream_t stream, const AttentionShape& s, const AttentionWeights<T>& w,
                       const T* x, const AttentionActivations<T>& acts, T* y, void* workspace,
                       const LinearOptions& options) {
  check_shape(s);
  const int64_t rows = s.rows(), dim = s.dim;
  linear_forward<T>(stream, rows, dim, s.qkv_width(), x, w.qkv_weight, w.qkv_bias, acts.qkv, options);
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
  linear_backward_input<T>(stream, rows, dim, s.qkv_width(), acts.d_qkv, w.qkv_weight, dx, options);
}

template <typename T>
void attention_backward_weight(cudaStream_t stream, const AttentionShape& s, const T* x,
                               const AttentionActivations<T>& acts, const T* dy, const AttentionGrads& g,
                               const LinearOptions& options) {
  check_shape(s);
  const int64_t rows = s.rows(), dim = s.dim;
  linear_backward_weight<T>(stream, rows, dim, dim, acts.attended, dy, g.proj_weight, g.proj_bias, options);
  linear_backward_weight<T>(stream, rows, dim, s.qkv_width(), x, acts.d_qkv, g.qkv_weight, g.qkv_bias, options);
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

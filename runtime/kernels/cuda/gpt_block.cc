#include "runtime/kernels/cuda/gpt_block.h"

#include "runtime/core/error.h"
#include "runtime/kernels/cuda/elementwise.h"
#include "runtime/kernels/cuda/layer_norm.h"

namespace pf::cuda {

namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

void check_shape(const GptBlockShape& s) {
  PF_CHECK_ARG(s.batch >= 0 && s.steps > 0 && s.dim > 0 && s.heads > 0 && s.hidden > 0 &&
                   s.dim % s.heads == 0,
               "gpt_block: bad shape (batch ", s.batch, ", steps ", s.steps, ", dim ", s.dim, ", heads ",
               s.heads, ", hidden ", s.hidden, ")");
}

// Walks the activation layout; with base == nullptr it only counts bytes.
template <typename T>
struct Carver {
  char* base;
  size_t offset = 0;
  template <typename U>
  U* take(int64_t count) {
    U* p = base ? reinterpret_cast<U*>(base + offset) : nullptr;
    offset += align_up(static_cast<size_t>(count) * sizeof(U));
    return p;
  }
};

template <typename T>
GptBlockActivations<T> layout(const GptBlockShape& s, Carver<T>& c) {
  const int64_t rows = s.rows(), dim = s.dim, hidden = s.hidden;
  GptBlockActivations<T> a;
  a.ln1_mean = c.template take<float>(rows);
  a.ln1_rstd = c.template take<float>(rows);
  a.ln1_out = c.template take<T>(rows * dim);
  a.attn.qkv = c.template take<T>(rows * 3 * dim);
  a.attn.probs = c.template take<T>(s.batch * s.heads * s.steps * s.steps);
  a.attn.attended = c.template take<T>(rows * dim);
  a.attn.d_qkv = c.template take<T>(rows * 3 * dim);
  a.h = c.template take<T>(rows * dim);
  a.ln2_mean = c.template take<float>(rows);
  a.ln2_rstd = c.template take<float>(rows);
  a.ln2_out = c.template take<T>(rows * dim);
  a.fc_pre = c.template take<T>(rows * hidden);
  a.fc_act = c.template take<T>(rows * hidden);
  a.d_ln1_out = c.template take<T>(rows * dim);
  a.d_h = c.template take<T>(rows * dim);
  a.d_ln2_out = c.template take<T>(rows * dim);
  a.d_fc_pre = c.template take<T>(rows * hidden);
  return a;
}

}  // namespace

template <typename T>
size_t gpt_block_activation_bytes(const GptBlockShape& s) {
  check_shape(s);
  Carver<T> c{nullptr};
  layout<T>(s, c);
  return c.offset;
}

template <typename T>
GptBlockActivations<T> gpt_block_carve_activations(const GptBlockShape& s, void* base) {
  check_shape(s);
  PF_CHECK_ARG(base != nullptr, "gpt_block_carve_activations: base must not be null");
  Carver<T> c{static_cast<char*>(base)};
  return layout<T>(s, c);
}

template <typename T>
size_t gpt_block_workspace_bytes(const GptBlockShape& s) {
  check_shape(s);
  return attention_workspace_bytes<T>(s.attention());
}

template <typename T>
void gpt_block_forward(cudaStream_t stream, const GptBlockShape& s, const GptBlockWeights<T>& w, const T* x,
                       const GptBlockActivations<T>& a, T* y, void* workspace, const LinearOptions& options) {
  check_shape(s);
  const int64_t rows = s.rows(), dim = s.dim, hidden = s.hidden;
  // h = x + attn(ln1(x))
  layer_norm_forward<T>(stream, rows, dim, s.eps, x, w.ln1_weight, w.ln1_bias, a.ln1_out, a.ln1_mean,
                        a.ln1_rstd);
  attention_forward<T>(stream, s.attention(), w.attn, a.ln1_out, a.attn, a.h, workspace, options);
  add<T>(stream, rows * dim, x, a.h, a.h);
  // y = h + proj(GELU(fc(ln2(h))))
  layer_norm_forward<T>(stream, rows, dim, s.eps, a.h, w.ln2_weight, w.ln2_bias, a.ln2_out, a.ln2_mean,
                        a.ln2_rstd);
  linear_gelu_forward<T>(stream, rows, dim, hidden, a.ln2_out, w.fc_weight, w.fc_bias, a.fc_pre, a.fc_act,
                         options);
  linear_forward<T>(stream, rows, hidden, dim, a.fc_act, w.proj_weight, w.proj_bias, y, options);
  add<T>(stream, rows * dim, a.h, y, y);
}

template <typename T>
void gpt_block_backward_input(cudaStream_t stream, const GptBlockShape& s, const GptBlockWeights<T>& w,
                              const T* x, const GptBlockActivations<T>& a, const T* dy, T* dx, void* workspace,
                              const LinearOptions& options) {
  check_shape(s);
  PF_CHECK_ARG(dx != dy, "gpt_block_backward_input: dx must not alias dy");
  const int64_t rows = s.rows(), dim = s.dim, hidden = s.hidden;
  // MLP residual: d_fc_act = dy W_proj; d_fc_pre = GELU'(fc_pre) * d_fc_act (in place);
  // d_ln2_out = d_fc_pre W_fc; d_h = dy + LN2'(d_ln2_out) (residual fused into the LN backward).
  linear_backward_input<T>(stream, rows, hidden, dim, dy, w.proj_weight, a.d_fc_pre, options);
  gelu_backward<T>(stream, rows * hidden, a.fc_pre, a.d_fc_pre, a.d_fc_pre);
  linear_backward_input<T>(stream, rows, dim, hidden, a.d_fc_pre, w.fc_weight, a.d_ln2_out, options);
  layer_norm_backward_input<T>(stream, rows, dim, a.h, a.ln2_mean, a.ln2_rstd, w.ln2_weight, a.d_ln2_out, dy,
                               a.d_h);
  // Attention residual: d_ln1_out = attn'(d_h); dx = d_h + LN1'(d_ln1_out).
  attention_backward_input<T>(stream, s.attention(), w.attn, a.attn, a.d_h, a.d_ln1_out, workspace, options);
  layer_norm_backward_input<T>(stream, rows, dim, x, a.ln1_mean, a.ln1_rstd, w.ln1_weight, a.d_ln1_out, a.d_h,
                               dx);
}

template <typename T>
void gpt_block_backward_weight(cudaStream_t stream, const GptBlockShape& s, const T* x,
                               const GptBlockActivations<T>& a, const T* dy, const GptBlockGrads& g,
                               const LinearOptions& options) {
  check_shape(s);
  const int64_t rows = s.rows(), dim = s.dim, hidden = s.hidden;
  // Reverse layer order, like the CPU's Sequential.
  linear_backward_weight<T>(stream, rows, hidden, dim, a.fc_act, dy, g.proj_weight, g.proj_bias, options);
  linear_backward_weight<T>(stream, rows, dim, hidden, a.ln2_out, a.d_fc_pre, g.fc_weight, g.fc_bias, options);
  layer_norm_backward_weight<T>(stream, rows, dim, a.h, a.ln2_mean, a.ln2_rstd, a.d_ln2_out, g.ln2_weight,
                                g.ln2_bias);
  attention_backward_weight<T>(stream, s.attention(), a.ln1_out, a.attn, a.d_h, g.attn, options);
  layer_norm_backward_weight<T>(stream, rows, dim, x, a.ln1_mean, a.ln1_rstd, a.d_ln1_out, g.ln1_weight,
                                g.ln1_bias);
}

#define PF_INSTANTIATE(T)                                                                                 \
  template size_t gpt_block_activation_bytes<T>(const GptBlockShape&);                                    \
  template GptBlockActivations<T> gpt_block_carve_activations<T>(const GptBlockShape&, void*);            \
  template size_t gpt_block_workspace_bytes<T>(const GptBlockShape&);                                     \
  template void gpt_block_forward<T>(cudaStream_t, const GptBlockShape&, const GptBlockWeights<T>&,       \
                                     const T*, const GptBlockActivations<T>&, T*, void*,                  \
                                     const LinearOptions&);                                               \
  template void gpt_block_backward_input<T>(cudaStream_t, const GptBlockShape&, const GptBlockWeights<T>&, \
                                            const T*, const GptBlockActivations<T>&, const T*, T*, void*, \
                                            const LinearOptions&);                                        \
  template void gpt_block_backward_weight<T>(cudaStream_t, const GptBlockShape&, const T*,                \
                                             const GptBlockActivations<T>&, const T*,                     \
                                             const GptBlockGrads&, const LinearOptions&);
PF_INSTANTIATE(float)
PF_INSTANTIATE(bf16)
#undef PF_INSTANTIATE

}  // namespace pf::cuda

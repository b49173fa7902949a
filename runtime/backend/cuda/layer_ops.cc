// The layers' and the loss's operations of the CUDA backend (cuda_backend.h), on the kernels of
// //runtime/kernels/cuda.
#include "runtime/backend/cuda/cuda_runtime_backend.h"
#include "runtime/backend/cuda/on_device.h"
#include "runtime/core/error.h"
#include "runtime/kernels/cuda/attention.h"
#include "runtime/kernels/cuda/cross_entropy.h"
#include "runtime/kernels/cuda/elementwise.h"
#include "runtime/kernels/cuda/embedding.h"
#include "runtime/kernels/cuda/layer_norm.h"
#include "runtime/kernels/cuda/linear.h"

namespace pf::cuda {

static_assert(kIdNotHeld == kEmbeddingIdNotHeld, "the embedding kernel's and the backend's not-held id differ");

namespace {

// Reference Linear forward (bias rows, then the product with beta = 1, as the CPU does) rather
// than cuBLASLt's bias epilogue: one less code path to trust before it has run on a GPU.
cuda::LinearOptions linear_options() {
  cuda::LinearOptions options;
  options.lt_bias_epilogue = false;
  options.lt_gelu_epilogue = false;
  return options;
}

}  // namespace

Tensor CudaRuntimeBackend::linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  OnDevice on(x);
  const int64_t out = weight.dim(0), in = weight.dim(1), rows = x.numel() / in;
  Shape out_shape = x.shape();
  out_shape.back() = out;
  Tensor y = on.empty(out_shape);
  cuda::linear_forward<float>(on.stream(), rows, in, out, ptr(x), ptr(weight), ptr(bias), mut(y),
                              linear_options());
  return y;
}

Tensor CudaRuntimeBackend::linear_backward_input(const Tensor& dy, const Tensor& weight, const Shape& input_shape) {
  OnDevice on(dy);
  const int64_t out = weight.dim(0), in = weight.dim(1), rows = dy.numel() / out;
  Tensor dx = on.empty(input_shape);
  cuda::linear_backward_input<float>(on.stream(), rows, in, out, ptr(dy), ptr(weight), mut(dx),
                                     linear_options());
  return dx;
}

void CudaRuntimeBackend::linear_backward_weight(const Tensor& x, const Tensor& dy, const Tensor& dweight, const Tensor& dbias) {
  OnDevice on(x);
  const int64_t out = dweight.dim(0), in = dweight.dim(1), rows = x.numel() / in;
  cuda::linear_backward_weight<float>(on.stream(), rows, in, out, ptr(x), ptr(dy), mut(dweight), mut(dbias),
                                      linear_options());
}

Tensor CudaRuntimeBackend::relu_forward(const Tensor& x) {
  OnDevice on(x);
  Tensor y = on.empty(x.shape());
  cuda::relu_forward<float>(on.stream(), x.numel(), ptr(x), mut(y));
  return y;
}

Tensor CudaRuntimeBackend::relu_backward(const Tensor& x, const Tensor& dy) {
  OnDevice on(x);
  Tensor dx = on.empty(x.shape());
  cuda::relu_backward<float>(on.stream(), x.numel(), ptr(x), ptr(dy), mut(dx));
  return dx;
}

Tensor CudaRuntimeBackend::gelu_forward(const Tensor& x) {
  OnDevice on(x);
  Tensor y = on.empty(x.shape());
  cuda::gelu_forward<float>(on.stream(), x.numel(), ptr(x), mut(y));
  return y;
}

Tensor CudaRuntimeBackend::gelu_backward(const Tensor& x, const Tensor& dy) {
  OnDevice on(x);
  Tensor dx = on.empty(x.shape());
  cuda::gelu_backward<float>(on.stream(), x.numel(), ptr(x), ptr(dy), mut(dx));
  return dx;
}

Tensor CudaRuntimeBackend::add(const Tensor& a, const Tensor& b) {
  OnDevice on(a);
  Tensor out = on.empty(a.shape());
  cuda::add<float>(on.stream(), a.numel(), ptr(a), ptr(b), mut(out));
  return out;
}

void CudaRuntimeBackend::layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor* y,
                        Tensor* mean, Tensor* rstd) {
  OnDevice on(x);
  const int64_t dim = gamma.numel(), rows = x.numel() / dim;
  *y = on.empty(x.shape());
  *mean = on.empty({rows});
  *rstd = on.empty({rows});
  cuda::layer_norm_forward<float>(on.stream(), rows, dim, eps, ptr(x), ptr(gamma), ptr(beta), mut(*y),
                                  mut(*mean), mut(*rstd));
}

Tensor CudaRuntimeBackend::layer_norm_backward_input(const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& gamma,
                                 const Tensor& dy) {
  OnDevice on(x);
  const int64_t dim = gamma.numel(), rows = x.numel() / dim;
  Tensor dx = on.empty(x.shape());
  cuda::layer_norm_backward_input<float>(on.stream(), rows, dim, ptr(x), ptr(mean), ptr(rstd), ptr(gamma),
                                         ptr(dy), nullptr, mut(dx));
  return dx;
}

void CudaRuntimeBackend::layer_norm_backward_weight(const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                                const Tensor& dgamma, const Tensor& dbeta) {
  OnDevice on(x);
  const int64_t dim = dgamma.numel(), rows = x.numel() / dim;
  cuda::layer_norm_backward_weight<float>(on.stream(), rows, dim, ptr(x), ptr(mean), ptr(rstd), ptr(dy),
                                          mut(dgamma), mut(dbeta));
}

namespace {

// qkv [B, T, (heads + 2 kv_heads) hd].
cuda::AttentionShape attention_shape(const Tensor& qkv, int64_t heads, int64_t kv_heads, bool causal) {
  cuda::AttentionShape s;
  s.batch = qkv.dim(0);
  s.steps = qkv.dim(1);
  s.dim = qkv.dim(2) / (heads + 2 * kv_heads) * heads;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.causal = causal;
  return s;
}

}  // namespace

void CudaRuntimeBackend::attention_core_forward(const Tensor& qkv, int64_t heads, int64_t kv_heads, bool causal,
                                                Tensor* probs, Tensor* attended) {
  OnDevice on(qkv);
  const cuda::AttentionShape s = attention_shape(qkv, heads, kv_heads, causal);
  *probs = on.empty({s.batch, heads, s.steps, s.steps});
  *attended = on.empty({s.batch, s.steps, s.dim});
  Tensor workspace = on.workspace(cuda::attention_workspace_bytes<float>(s));
  cuda::attention_core_forward<float>(on.stream(), s, ptr(qkv), mut(*probs), mut(*attended),
                                      workspace.data<void>(), linear_options().gemm);
}

Tensor CudaRuntimeBackend::attention_core_backward(const Tensor& qkv, const Tensor& probs, const Tensor& d_attended,
                                                   int64_t heads, int64_t kv_heads, bool causal) {
  OnDevice on(qkv);
  const cuda::AttentionShape s = attention_shape(qkv, heads, kv_heads, causal);
  Tensor d_qkv = on.empty(qkv.shape());
  Tensor workspace = on.workspace(cuda::attention_workspace_bytes<float>(s));
  cuda::attention_core_backward<float>(on.stream(), s, ptr(qkv), ptr(probs), ptr(d_attended), mut(d_qkv),
                                       workspace.data<void>(), linear_options().gemm);
  return d_qkv;
}

Tensor CudaRuntimeBackend::embedding_forward(const Tensor& ids, const Tensor& token_weight, const Tensor& position_weight) {
  OnDevice on(ids);
  const int64_t batch = ids.dim(0), steps = ids.dim(1), vocab = token_weight.dim(0), dim = token_weight.dim(1);
  Tensor y = on.empty({batch, steps, dim});
  cuda::embedding_forward<float>(on.stream(), batch, steps, dim, vocab, ids.data<int32_t>(), ptr(token_weight),
                                 ptr(position_weight), mut(y));
  return y;
}

void CudaRuntimeBackend::embedding_backward_weight(const Tensor& ids, const Tensor& dy, const Tensor& dtoken,
                               const Tensor& dposition) {
  OnDevice on(ids);
  const int64_t batch = ids.dim(0), steps = ids.dim(1), vocab = dtoken.dim(0), dim = dtoken.dim(1);
  Tensor workspace = on.workspace(cuda::embedding_backward_workspace_bytes(batch, steps));
  cuda::embedding_backward_weight<float>(on.stream(), batch, steps, dim, vocab, ids.data<int32_t>(), ptr(dy),
                                         mut(dtoken), mut(dposition), workspace.data<void>());
}

float CudaRuntimeBackend::cross_entropy_forward(const Tensor& logits, const Tensor& targets, float scale) {
  OnDevice on(logits);
  const int64_t classes = logits.dim(-1), rows = logits.numel() / classes;
  Tensor row_loss = on.workspace(static_cast<size_t>(rows) * sizeof(double));
  Tensor loss;
  {
    MemoryCategoryScope category(MemoryCategory::kWorkspace);
    loss = on.empty({1});
  }
  cuda::cross_entropy_forward<float>(on.stream(), rows, classes, ptr(logits), targets.data<int32_t>(), scale,
                                     row_loss.data<double>(), mut(loss));
  float host = 0.0f;
  copy_bytes(&host, Device::cpu(), loss.data<void>(), on.device(), sizeof(float), "cross_entropy");
  return host;
}

Tensor CudaRuntimeBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets, float scale) {
  OnDevice on(logits);
  const int64_t classes = logits.dim(-1), rows = logits.numel() / classes;
  Tensor grad = on.empty(logits.shape());
  cuda::cross_entropy_backward<float>(on.stream(), rows, classes, ptr(logits), targets.data<int32_t>(), scale,
                                      mut(grad));
  return grad;
}

namespace {

// A device copy of `values` in `on`'s workspace (the copy waits for the device).
template <typename V>
Tensor workspace_copy(const OnDevice& on, const std::vector<V>& values, const char* what) {
  Tensor t = on.workspace(values.size() * sizeof(V));
  copy_bytes(t.data<void>(), on.device(), values.data(), Device::cpu(), values.size() * sizeof(V), what);
  return t;
}

int64_t logit_rows(const Tensor& logits) { return logits.numel() / logits.dim(-1); }

}  // namespace

std::vector<float> CudaRuntimeBackend::logits_row_max(const Tensor& logits) {
  OnDevice on(logits);
  const int64_t rows = logit_rows(logits);
  Tensor maxima = on.workspace(static_cast<size_t>(rows) * sizeof(float));
  cuda::logits_row_max<float>(on.stream(), rows, logits.dim(-1), ptr(logits), mut(maxima));
  std::vector<float> host(static_cast<size_t>(rows));
  copy_bytes(host.data(), Device::cpu(), maxima.data<void>(), on.device(), host.size() * sizeof(float),
             "logits_row_max");
  return host;
}

std::vector<double> CudaRuntimeBackend::vocab_cross_entropy_sums(const Tensor& logits, const Tensor& targets,
                                                                 int64_t first, const std::vector<float>& maxima) {
  OnDevice on(logits);
  const int64_t rows = logit_rows(logits);
  PF_INTERNAL_CHECK(static_cast<int64_t>(maxima.size()) == rows, "vocab_cross_entropy_sums: ", maxima.size(),
                    " maxima for ", rows, " rows");
  const Tensor device_maxima = workspace_copy(on, maxima, "vocab_cross_entropy_sums (maxima)");
  Tensor sums = on.workspace(static_cast<size_t>(2 * rows) * sizeof(double));
  cuda::vocab_cross_entropy_sums<float>(on.stream(), rows, logits.dim(-1), ptr(logits), targets.data<int32_t>(),
                                        first, ptr(device_maxima), sums.data<double>());
  std::vector<double> host(static_cast<size_t>(2 * rows));
  copy_bytes(host.data(), Device::cpu(), sums.data<void>(), on.device(), host.size() * sizeof(double),
             "vocab_cross_entropy_sums");
  return host;
}

Tensor CudaRuntimeBackend::vocab_cross_entropy_backward(const Tensor& logits, const Tensor& targets, int64_t first,
                                                        const std::vector<float>& maxima,
                                                        const std::vector<double>& inverse_sums, double coef) {
  OnDevice on(logits);
  const int64_t rows = logit_rows(logits);
  PF_INTERNAL_CHECK(static_cast<int64_t>(maxima.size()) == rows && static_cast<int64_t>(inverse_sums.size()) == rows,
                    "vocab_cross_entropy_backward: ", maxima.size(), " maxima and ", inverse_sums.size(),
                    " sums for ", rows, " rows");
  const Tensor device_maxima = workspace_copy(on, maxima, "vocab_cross_entropy_backward (maxima)");
  const Tensor device_sums = workspace_copy(on, inverse_sums, "vocab_cross_entropy_backward (sums)");
  Tensor grad = on.empty(logits.shape());
  cuda::vocab_cross_entropy_backward<float>(on.stream(), rows, logits.dim(-1), ptr(logits), targets.data<int32_t>(),
                                            first, ptr(device_maxima), device_sums.data<double>(), coef, mut(grad));
  return grad;
}

std::vector<int32_t> CudaRuntimeBackend::i32_to_host(const Tensor& t) {
  PF_INTERNAL_CHECK(t.dtype() == DType::kI32, "i32_to_host: expected an i32 tensor, got ", dtype_name(t.dtype()));
  std::vector<int32_t> out(static_cast<size_t>(t.numel()));
  copy_bytes(out.data(), Device::cpu(), t.data<void>(), t.device(), t.nbytes(), "i32_to_host");
  return out;
}

}  // namespace pf::cuda

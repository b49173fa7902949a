// Device dispatch of the layers and the loss. Every layer keeps its CPU code exactly as it was and,
// when its tensors are CUDA tensors, calls the tensor-level functions below instead. They run the
// kernels of //runtime/kernels/cuda on the calling thread's current stream of the tensors' device
// (pf::cuda::current_stream_for; the legacy default stream when none is set), inside a DeviceScope
// of that device, and allocate their outputs with Tensor::empty(shape, f32, device) (the caching
// allocator, charged to the thread's memory category). Inputs and parameters are f32 (fp32 only).
//
// This header needs no CUDA headers; the implementation is cuda_dispatch.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace pf {

inline bool is_cuda(const Tensor& t) { return t.defined() && t.device().kind == DeviceKind::kCuda; }

// Throws kInvalidArgument "<type> '<name>': <what_a> (on <device a>) and <what_b> (on <device b>) are
// on different devices; ..." when the two differ (one op never mixes devices). `name` may be empty
// (the loss).
void check_same_device(const char* type, const std::string& name, const char* what_a, const Device& a,
                       const char* what_b, const Device& b);

namespace gpu {

// y = x W^T (+ b); x [..., in] -> y [..., out]. `bias` may be undefined.
Tensor linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias);
// dx = dy W, shaped `input_shape`.
Tensor linear_backward_input(const Tensor& dy, const Tensor& weight, const Shape& input_shape);
// dW += dy^T x; db += column sums of dy (`dbias` may be undefined).
void linear_backward_weight(const Tensor& x, const Tensor& dy, const Tensor& dweight, const Tensor& dbias);

Tensor relu_forward(const Tensor& x);
Tensor relu_backward(const Tensor& x, const Tensor& dy);
Tensor gelu_forward(const Tensor& x);
Tensor gelu_backward(const Tensor& x, const Tensor& dy);
// a + b (same shape).
Tensor add(const Tensor& a, const Tensor& b);

// y, and per-row mean and rstd ([rows] each), for x [..., dim].
void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor* y,
                        Tensor* mean, Tensor* rstd);
Tensor layer_norm_backward_input(const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& gamma,
                                 const Tensor& dy);
void layer_norm_backward_weight(const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                                const Tensor& dgamma, const Tensor& dbeta);

// The attention core: qkv [B, T, 3 dim] -> probs [B, heads, T, T] and attended [B, T, dim].
void attention_core_forward(const Tensor& qkv, int64_t heads, Tensor* probs, Tensor* attended);
// d_qkv [B, T, 3 dim] from the saved qkv and probs and d_attended [B, T, dim].
Tensor attention_core_backward(const Tensor& qkv, const Tensor& probs, const Tensor& d_attended, int64_t heads);

// ids i32 [B, T] -> [B, T, dim] (ids already validated).
Tensor embedding_forward(const Tensor& ids, const Tensor& token_weight, const Tensor& position_weight);
void embedding_backward_weight(const Tensor& ids, const Tensor& dy, const Tensor& dtoken,
                               const Tensor& dposition);

// Cross-entropy over logits [..., C] and i32 targets (already validated): the scaled mean loss
// (copied to the host, so this waits for the device), and the gradient.
float cross_entropy_forward(const Tensor& logits, const Tensor& targets, float scale);
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, float scale);

// A host copy of an i32 tensor (ids, targets) for validation; waits for the device.
std::vector<int32_t> i32_to_host(const Tensor& t);

}  // namespace gpu
}  // namespace pf

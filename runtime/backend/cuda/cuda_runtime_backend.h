// The CUDA backend (cuda_backend.h's interface) on the CUDA runtime, cuBLAS, NCCL and the kernels of
// //runtime/kernels/cuda. runtime_ops.cc: devices, scopes, streams, events, pinned memory, copies,
// transports and the registration; layer_ops.cc: the GPT layers and the loss; llama_ops.cc:
// RMSNorm, SwiGLU and rotary positions; vision_ops.cc: convolution, pooling, GroupNorm and the ViT's
// patch embedding and class token; optim_ops.cc: the optimizers.
#pragma once

#include "runtime/backend/cuda_backend.h"

namespace pf::cuda {

class CudaRuntimeBackend final : public CudaBackend {
 public:
  CudaAvailability probe() override;
  std::unique_ptr<BackendScope> device_scope(int ordinal) override;
  std::unique_ptr<BackendScope> stream_scope(const DeviceStream& stream) override;
  std::unique_ptr<DeviceStream> new_stream(int ordinal) override;
  std::unique_ptr<DeviceEvent> new_event(int ordinal) override;
  std::unique_ptr<PinnedBuffer> new_pinned_buffer(size_t bytes) override;
  void copy_async(void* dst, const void* src, size_t bytes, const DeviceStream& stream,
                  const std::string& what) override;
  std::unique_ptr<comm::GpuTransportGroup> new_gpu_transport(std::vector<int> devices,
                                                             const std::vector<std::pair<int, int>>& nccl_pairs,
                                                             const comm::InProcessTransport::Options& local,
                                                             int max_pending_sends) override;
  std::unique_ptr<comm::GpuTransportGroup> new_process_gpu_transport(std::shared_ptr<comm::World> world, int device,
                                                                     const std::vector<std::pair<int, int>>& talking,
                                                                     int max_pending_sends,
                                                                     double init_timeout_seconds) override;

  Tensor linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias) override;
  Tensor linear_backward_input(const Tensor& dy, const Tensor& weight, const Shape& input_shape) override;
  void linear_backward_weight(const Tensor& x, const Tensor& dy, const Tensor& dweight, const Tensor& dbias) override;
  Tensor relu_forward(const Tensor& x) override;
  Tensor relu_backward(const Tensor& x, const Tensor& dy) override;
  Tensor gelu_forward(const Tensor& x) override;
  Tensor gelu_backward(const Tensor& x, const Tensor& dy) override;
  Tensor add(const Tensor& a, const Tensor& b) override;
  void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor* y,
                          Tensor* mean, Tensor* rstd) override;
  Tensor layer_norm_backward_input(const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& gamma,
                                   const Tensor& dy) override;
  void layer_norm_backward_weight(const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                                  const Tensor& dgamma, const Tensor& dbeta) override;
  void attention_core_forward(const Tensor& qkv, int64_t heads, int64_t kv_heads, bool causal, Tensor* probs,
                              Tensor* attended) override;
  Tensor attention_core_backward(const Tensor& qkv, const Tensor& probs, const Tensor& d_attended, int64_t heads,
                                 int64_t kv_heads, bool causal) override;

  // llama_ops.cc
  void rotary_embedding(const Tensor& qkv, int64_t rotated_heads, int64_t head_dim, int64_t offset, float theta,
                        bool inverse) override;
  void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor* y, Tensor* xhat,
                        Tensor* rstd) override;
  Tensor rms_norm_backward_input(const Tensor& xhat, const Tensor& rstd, const Tensor& weight,
                                 const Tensor& dy) override;
  void rms_norm_backward_weight(const Tensor& xhat, const Tensor& dy, const Tensor& dweight) override;
  Tensor swiglu_forward(const Tensor& x) override;
  Tensor swiglu_backward(const Tensor& x, const Tensor& dy) override;

  // vision_ops.cc
  void group_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t groups, float eps,
                          Tensor* y, Tensor* xhat, Tensor* rstd) override;
  Tensor group_norm_backward_input(const Tensor& xhat, const Tensor& rstd, const Tensor& weight, int64_t groups,
                                   const Tensor& dy) override;
  void group_norm_backward_weight(const Tensor& xhat, const Tensor& dy, const Tensor& dweight,
                                  const Tensor& dbias) override;
  Tensor conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const ConvGeometry& geometry) override;
  Tensor conv2d_backward_input(const Tensor& dy, const Tensor& weight, const ConvGeometry& geometry,
                               const Shape& input_shape, Tensor* grad_rows) override;
  void conv2d_backward_weight(const Tensor& x, const Tensor& grad_rows, const ConvGeometry& geometry,
                              const Tensor& dweight, const Tensor& dbias) override;
  void pool2d_forward(const Tensor& x, bool max, int64_t kernel, int64_t stride, Tensor* y, Tensor* argmax) override;
  Tensor pool2d_backward(const Tensor& dy, const Tensor& argmax, bool max, int64_t kernel, int64_t stride,
                         const Shape& input_shape) override;
  Tensor global_avg_pool_forward(const Tensor& x) override;
  Tensor global_avg_pool_backward(const Tensor& dy, const Shape& input_shape) override;
  Tensor patch_embedding_forward(const Tensor& images, const Tensor& weight, const Tensor& bias, const Tensor& cls,
                                 const Tensor& positions, const PatchGeometry& geometry) override;
  Tensor patch_embedding_backward_input(const Tensor& dy, const Tensor& weight, const PatchGeometry& geometry,
                                        const Shape& input_shape) override;
  void patch_embedding_backward_weight(const Tensor& images, const Tensor& dy, const PatchGeometry& geometry,
                                       const Tensor& dweight, const Tensor& dbias, const Tensor& dcls,
                                       const Tensor& dpositions) override;
  Tensor class_token_forward(const Tensor& x) override;
  Tensor class_token_backward(const Tensor& dy, int64_t steps) override;

  // layer_ops.cc
  Tensor embedding_forward(const Tensor& ids, const Tensor& token_weight, const Tensor& position_weight) override;
  void embedding_backward_weight(const Tensor& ids, const Tensor& dy, const Tensor& dtoken,
                                 const Tensor& dposition) override;
  float cross_entropy_forward(const Tensor& logits, const Tensor& targets, float scale) override;
  Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, float scale) override;
  std::vector<float> logits_row_max(const Tensor& logits) override;
  std::vector<double> vocab_cross_entropy_sums(const Tensor& logits, const Tensor& targets, int64_t first,
                                               const std::vector<float>& maxima) override;
  Tensor vocab_cross_entropy_backward(const Tensor& logits, const Tensor& targets, int64_t first,
                                      const std::vector<float>& maxima, const std::vector<double>& inverse_sums,
                                      double coef) override;
  std::vector<int32_t> i32_to_host(const Tensor& t) override;

  void sgd_update(const Tensor& value, const Tensor& grad, const Tensor& buf, float lr, float weight_decay,
                  float momentum, bool first_step) override;
  void adamw_update(const Tensor& value, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                    const AdamWHyperparameters& hyper, int64_t step) override;
  double squared_norm(const Tensor& grad) override;
  void scale_in_place(const Tensor& grad, float scale) override;
};

}  // namespace pf::cuda

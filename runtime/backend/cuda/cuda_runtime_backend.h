// The CUDA backend (cuda_backend.h's interface) on the CUDA runtime, cuBLAS, NCCL and the kernels of
// //runtime/kernels/cuda. runtime_ops.cc: devices, scopes, streams, events, pinned memory, copies,
// transports and the registration; layer_ops.cc: the layers and the loss; optim_ops.cc: the
// optimizers.
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
  void attention_core_forward(const Tensor& qkv, int64_t heads, Tensor* probs, Tensor* attended) override;
  Tensor attention_core_backward(const Tensor& qkv, const Tensor& probs, const Tensor& d_attended,
                                 int64_t heads) override;
  Tensor embedding_forward(const Tensor& ids, const Tensor& token_weight, const Tensor& position_weight) override;
  void embedding_backward_weight(const Tensor& ids, const Tensor& dy, const Tensor& dtoken,
                                 const Tensor& dposition) override;
  float cross_entropy_forward(const Tensor& logits, const Tensor& targets, float scale) override;
  Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, float scale) override;
  std::vector<int32_t> i32_to_host(const Tensor& t) override;

  void sgd_update(const Tensor& value, const Tensor& grad, const Tensor& buf, float lr, float weight_decay,
                  float momentum, bool first_step) override;
  void adamw_update(const Tensor& value, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                    const AdamWHyperparameters& hyper, int64_t step) override;
  double squared_norm(const Tensor& grad) override;
  void scale_in_place(const Tensor& grad, float scale) override;
};

}  // namespace pf::cuda

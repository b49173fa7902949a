// The optimizers' operations of the CUDA backend (cuda_backend.h): SGD and the gradient norm and
// scale of clipping on runtime/optim's kernels, AdamW on runtime/kernels/cuda's.
#include "runtime/backend/cuda/cuda_runtime_backend.h"
#include "runtime/backend/cuda/on_device.h"
#include "runtime/kernels/cuda/adamw.h"
#include "runtime/kernels/cuda/check.h"
#include "runtime/optim/optim_kernels.h"

namespace pf::cuda {

void CudaRuntimeBackend::sgd_update(const Tensor& value, const Tensor& grad, const Tensor& buf, float lr,
                                    float weight_decay, float momentum, bool first_step) {
  OnDevice on(value);
  PF_CUDA_CHECK(sgd_step(on.stream(), value.numel(), lr, weight_decay, momentum, first_step, mut(value), ptr(grad),
                         mut(buf)));
}

void CudaRuntimeBackend::adamw_update(const Tensor& value, const Tensor& grad, const Tensor& exp_avg,
                                      const Tensor& exp_avg_sq, const AdamWHyperparameters& h, int64_t step) {
  OnDevice on(value);
  const AdamWHyper hyper{h.lr, h.beta1, h.beta2, h.eps, h.weight_decay};
  adamw_step(on.stream(), value.numel(), hyper, step, mut(value), ptr(grad), mut(exp_avg), mut(exp_avg_sq), nullptr);
}

double CudaRuntimeBackend::squared_norm(const Tensor& grad) {
  OnDevice on(grad);
  Tensor workspace;
  {
    MemoryCategoryScope category(MemoryCategory::kWorkspace);
    workspace = Tensor::empty({2 * kSumOfSquaresWorkspace}, DType::kF32, on.device());  // doubles
  }
  double* ws = workspace.data<double>();
  PF_CUDA_CHECK(sum_of_squares(on.stream(), grad.numel(), ptr(grad), ws));
  double result = 0.0;
  copy_bytes(&result, Device::cpu(), ws + kSumOfSquaresWorkspace - 1, on.device(), sizeof(double), "squared_norm");
  return result;
}

void CudaRuntimeBackend::scale_in_place(const Tensor& grad, float scale) {
  OnDevice on(grad);
  PF_CUDA_CHECK(cuda::scale_in_place(on.stream(), grad.numel(), scale, mut(grad)));
}

}  // namespace pf::cuda

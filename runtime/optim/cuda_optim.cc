#include "runtime/optim/cuda_optim.h"

#include "runtime/devices/cuda/device_scope.h"
#include "runtime/devices/cuda/stream.h"
#include "runtime/kernels/cuda/adamw.h"
#include "runtime/kernels/cuda/check.h"
#include "runtime/optim/optim_kernels.h"

namespace pf::gpu {

namespace {

struct OnDevice {
  explicit OnDevice(const Tensor& t)
      : device(t.device()), scope(t.device().ordinal), stream(cuda::current_stream_for(t.device().ordinal)) {}
  Device device;
  cuda::DeviceScope scope;
  cudaStream_t stream;
};

}  // namespace

void sgd_update(const Parameter& param, const Tensor& buf, const OptimizerConfig& config, int64_t step) {
  OnDevice on(param.value);
  PF_CUDA_CHECK(cuda::sgd_step(on.stream, param.value.numel(), config.lr, config.weight_decay, config.momentum,
                               step == 1, param.value.data<float>(), param.grad.data<float>(),
                               buf.defined() ? buf.data<float>() : nullptr));
}

void adamw_update(const Parameter& param, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const OptimizerConfig& config, int64_t step) {
  OnDevice on(param.value);
  cuda::AdamWHyper hyper;
  hyper.lr = config.lr;
  hyper.beta1 = config.beta1;
  hyper.beta2 = config.beta2;
  hyper.eps = config.eps;
  hyper.weight_decay = config.weight_decay;
  cuda::adamw_step(on.stream, param.value.numel(), hyper, step, param.value.data<float>(),
                   param.grad.data<float>(), exp_avg.data<float>(), exp_avg_sq.data<float>(), nullptr);
}

double grad_squared_norm(const Parameter& param) {
  OnDevice on(param.grad);
  Tensor workspace;
  {
    MemoryCategoryScope category(MemoryCategory::kWorkspace);
    workspace = Tensor::empty({2 * cuda::kSumOfSquaresWorkspace}, DType::kF32, on.device);  // doubles
  }
  double* ws = workspace.data<double>();
  PF_CUDA_CHECK(cuda::sum_of_squares(on.stream, param.grad.numel(), param.grad.data<float>(), ws));
  double result = 0.0;
  copy_bytes(&result, Device::cpu(), ws + cuda::kSumOfSquaresWorkspace - 1, on.device, sizeof(double),
             "grad_squared_norm");
  return result;
}

void scale_grad(const Parameter& param, float scale) {
  OnDevice on(param.grad);
  PF_CUDA_CHECK(cuda::scale_in_place(on.stream, param.grad.numel(), scale, param.grad.data<float>()));
}

}  // namespace pf::gpu

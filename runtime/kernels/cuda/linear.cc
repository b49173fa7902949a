#include "runtime/kernels/cuda/linear.h"

#include "runtime/core/error.h"
#include "runtime/kernels/cuda/elementwise.h"

namespace pf::cuda {

template <typename T>
void linear_forward(cudaStream_t stream, int64_t rows, int64_t in, int64_t out, const T* x, const T* weight,
                    const T* bias, T* y, const LinearOptions& options) {
  if (rows == 0) return;
  if (bias != nullptr && options.lt_bias_epilogue &&
      linear_forward_lt<T>(stream, rows, in, out, x, weight, bias, y, nullptr, LtEpilogue::kBias,
                           options.gemm)) {
    return;
  }
  // Reference path, as on the CPU: y = bias rows, then y = x W^T + 1 * y.
  if (bias != nullptr) fill_rows_with_bias<T>(stream, rows, out, bias, y);
  gemm<T, T>(stream, false, true, rows, out, in, 1.0f, x, weight, bias != nullptr ? 1.0f : 0.0f, y,
             options.gemm);
}

template <typename T>
void linear_gelu_forward(cudaStream_t stream, int64_t rows, int64_t in, int64_t out, const T* x,
                         const T* weight, const T* bias, T* pre, T* y, const LinearOptions& options) {
  PF_CHECK_ARG(bias != nullptr, "linear_gelu_forward: bias must not be null");
  if (rows == 0) return;
  if (options.lt_gelu_epilogue &&
      linear_forward_lt<T>(stream, rows, in, out, x, weight, bias, y, pre, LtEpilogue::kBiasGelu,
                           options.gemm)) {
    return;
  }
  linear_forward<T>(stream, rows, in, out, x, weight, bias, pre, options);
  gelu_forward<T>(stream, rows * out, pre, y);
}

template <typename T>
void linear_backward_input(cudaStream_t stream, int64_t rows, int64_t in, int64_t out, const T* dy,
                           const T* weight, T* dx, const LinearOptions& options) {
  gemm<T, T>(stream, false, false, rows, in, out, 1.0f, dy, weight, 0.0f, dx, options.gemm);
}

template <typename T>
void linear_backward_weight(cudaStream_t stream, int64_t rows, int64_t in, int64_t out, const T* x,
                            const T* dy, float* dweight, float* dbias, const LinearOptions& options) {
  if (rows == 0) return;
  gemm<T, float>(stream, true, false, out, in, rows, 1.0f, dy, x, 1.0f, dweight, options.gemm);
  if (dbias != nullptr) bias_backward<T>(stream, rows, out, dy, dbias);
}

#define PF_INSTANTIATE(T)                                                                             \
  template void linear_forward<T>(cudaStream_t, int64_t, int64_t, int64_t, const T*, const T*, const T*, \
                                  T*, const LinearOptions&);                                          \
  template void linear_gelu_forward<T>(cudaStream_t, int64_t, int64_t, int64_t, const T*, const T*,    \
                                       const T*, T*, T*, const LinearOptions&);                       \
  template void linear_backward_input<T>(cudaStream_t, int64_t, int64_t, int64_t, const T*, const T*,  \
                                         T*, const LinearOptions&);                                   \
  template void linear_backward_weight<T>(cudaStream_t, int64_t, int64_t, int64_t, const T*, const T*, \
                                          float*, float*, const LinearOptions&);
PF_INSTANTIATE(float)
PF_INSTANTIATE(bf16)
#undef PF_INSTANTIATE

}  // namespace pf::cuda

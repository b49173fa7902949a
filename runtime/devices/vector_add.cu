// The smallest CUDA kernel: proves the nvcc -> Bazel -> cudart build path that the CUDA backend
// will use (see docs/BUILD.md). Used by tests/devices/cuda_smoke_test.
#include <cuda_runtime.h>

#include "runtime/devices/vector_add.h"

namespace {
__global__ void add_kernel(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
}  // namespace

namespace pf::cuda {

int vector_add_on_device(const float* a, const float* b, float* c, int n) {
  float *da = nullptr, *db = nullptr, *dc = nullptr;
  size_t bytes = static_cast<size_t>(n) * sizeof(float);
  cudaError_t err = cudaMalloc(&da, bytes);
  if (err == cudaSuccess) err = cudaMalloc(&db, bytes);
  if (err == cudaSuccess) err = cudaMalloc(&dc, bytes);
  if (err == cudaSuccess) err = cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice);
  if (err == cudaSuccess) err = cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice);
  if (err == cudaSuccess) {
    add_kernel<<<(n + 255) / 256, 256>>>(da, db, dc, n);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) err = cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  return static_cast<int>(err);
}

}  // namespace pf::cuda

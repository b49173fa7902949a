#pragma once

namespace pf::cuda {
// c = a + b on the current CUDA device (host pointers in and out). Returns the cudaError_t value.
int vector_add_on_device(const float* a, const float* b, float* c, int n);
}  // namespace pf::cuda

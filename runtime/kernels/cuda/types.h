// Element types of the CUDA kernels. Compute is always fp32 (fp64 inside cross-entropy, as on the
// CPU); activations and parameter copies are stored as float or bf16. `bf16` is the raw 16-bit
// pattern (same layout as __nv_bfloat16 and as the runtime's DType::kBF16 tensors), so this header
// is plain C++ and the element functions can be tested on the CPU.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PF_HD __host__ __device__ __forceinline__
#else
#define PF_HD inline
#endif

namespace pf::cuda {

struct alignas(2) bf16 {
  uint16_t bits;
};
static_assert(sizeof(bf16) == 2, "bf16 must be 2 bytes");

}  // namespace pf::cuda

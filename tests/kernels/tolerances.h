// Tolerances of the CUDA kernel tests, in one place (docs/CUDA_KERNELS.md repeats them).
//
// A GPU value g passes against the CPU reference w when
//   |g - w| <= abs * scale + rel * |w|,   scale = max(1, max |w| over the compared array),
// so `abs` is relative to the array's largest magnitude (it absorbs cancellation near zero).
//
// fp32: elementwise ops differ from the CPU only by nvcc's FMA contraction (a few ulp);
// reductions and matrix products sum in a different order than the CPU's sequential loops /
// OpenBLAS. bf16: the CPU reference runs in fp32 on the bf16-rounded inputs (and bf16-rounded
// parameters), so the difference is the kernel's bf16 rounding of outputs (2^-9 relative each) and
// of intermediate activations inside composed layers.
#pragma once

namespace pf::test {

struct Tolerance {
  double rel;
  double abs;
};

// fp32
constexpr Tolerance kF32Elementwise{1e-5, 1e-6};   // GELU, ReLU, add, bias fill, AdamW, conversions
constexpr Tolerance kF32Reduction{1e-4, 1e-5};     // LayerNorm F/B/W, softmax F/B, cross-entropy, bias grad
constexpr Tolerance kF32Gemm{1e-4, 1e-5};          // gemm, Linear F/B/W (k <= 1024 here)
constexpr Tolerance kF32Layer{5e-4, 5e-5};         // attention, GPT block (several products chained)
constexpr Tolerance kF32LtGelu{1e-3, 1e-4};        // cuBLASLt's own GELU epilogue vs element_ops.h

// bf16 (storage) with fp32 math
constexpr Tolerance kBf16Elementwise{4e-3, 1e-4};  // one output rounding (<= 2^-9 relative)
constexpr Tolerance kBf16Reduction{1e-2, 2e-3};    // LayerNorm, softmax, cross-entropy
constexpr Tolerance kBf16Gemm{1e-2, 4e-3};         // fp32 accumulation, one output rounding
constexpr Tolerance kBf16WeightGrad{1e-3, 1e-4};   // fp32 output of bf16 products (no output rounding)
constexpr Tolerance kBf16Layer{5e-2, 2e-2};        // attention, GPT block (bf16 intermediates)

}  // namespace pf::test

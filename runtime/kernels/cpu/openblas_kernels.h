// Which kernels OpenBLAS runs. A DYNAMIC_ARCH OpenBLAS (Debian's) picks them at load time from the
// CPU's family and model; a CPU newer than the library gets its generic fallback, Prescott (SSE3):
// Debian 12's 0.3.21 does not know Emerald Rapids (family 6, model 207), and there sgemm ran 3 to 5
// times slower than with the AVX-512 kernels of the same library (bench/gpt_block_bench: a GPT
// block's F+B+W at d 256, 16 GFLOP/s against 84 with OPENBLAS_CORETYPE=SkylakeX).
//
// So when libpipeforge loads (a constructor, before any BLAS call of the process's own) and
// OpenBLAS chose Prescott while the user did not name a core (OPENBLAS_CORETYPE unset), PipeForge
// has OpenBLAS choose again by what the CPU can do: SkylakeX where AVX-512 F, BW, DQ and VL are
// there, else Haswell where AVX2 and FMA are (which this build's -march=x86-64-v3 needs anyway).
// OPENBLAS_CORETYPE set by the user always wins; PF_KEEP_OPENBLAS_KERNELS=1 keeps OpenBLAS's own
// choice. Results stay bitwise reproducible on one machine; they differ in the last bits from
// another kernel choice, as they do between CPUs.
#pragma once

#include <string>

namespace pf::cpu {

struct BlasKernels {
  std::string core;       // OpenBLAS's core name now, e.g. "SkylakeX" ("" when it cannot tell)
  std::string fallback;   // the core OpenBLAS chose itself when PipeForge chose again, else ""
};
BlasKernels blas_kernels();

// What the load-time constructor in blas.cc calls (every binary doing a GEMM links it); exposed for
// that and for tests, not to be called once BLAS work may be running on another thread.
void choose_blas_kernels_again_if_generic();

}  // namespace pf::cpu

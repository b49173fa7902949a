// Whether this machine's BLAS computes each element of a product the same whatever the product's
// shape (and so whatever its thread count, which splits a product into blocks of other shapes).
// OpenBLAS's AVX-512 kernels do; its Haswell / Zen (AVX2) kernels run a product's edge tiles
// differently, so there an element's last bits depend on where the product's edges fall. Tests of
// properties that rest on it check bitwise where it holds and within a stated tolerance elsewhere.
#pragma once

namespace pf::test {

// Rows [r0, 32) of a 32 x 128 x 16 product recomputed as a (32 - r0)-row product, and columns
// [0, n) as an n-column one, every r0 and n, compared bitwise.
bool blas_is_shape_independent();

}  // namespace pf::test

// The fused CPU attention core (runtime/kernels/cpu/flash_attention.h) against the unfused
// reference (the math CausalSelfAttention ran before: BLAS scores, a separate causal softmax over
// the full probabilities, BLAS products), against finite differences, and for determinism.
//
// Tolerance against the reference: max |fused - reference| <= 2e-6 * max |reference| per tensor
// (out, dq, dk, dv). Both are f32 with different summation orders and the fused backward
// recomputes P as exp(s - lse) instead of reading exp(s - max) / sum, so they are not bitwise
// equal; the test prints the measured relative error per case.
#include "runtime/kernels/cpu/flash_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "tests/util/blas_shapes.h"

namespace pf::cpu {
namespace {

constexpr double kRelTolerance = 2e-6;

// splitmix64 -> uniform [lo, hi).
std::vector<float> uniform(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> out(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& x : out) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    x = lo + (hi - lo) * static_cast<float>((z >> 40) * (1.0 / 16777216.0));
  }
  return out;
}

struct Case {
  int64_t queries, keys, hd, offset;
  float spread;  // inputs in [-spread, spread): larger spreads make peakier softmax rows
  std::string name() const {
    return "T " + std::to_string(queries) + " keys " + std::to_string(keys) + " hd " + std::to_string(hd) +
           " offset " + std::to_string(offset) + " spread " + std::to_string(spread);
  }
  AttentionDims dims() const { return {queries, keys, hd, offset}; }
};

// Contiguous inputs and both implementations' results.
struct Problem {
  Case c;
  std::vector<float> q, k, v, dout;
  explicit Problem(const Case& cs, uint64_t seed) : c(cs) {
    q = uniform(static_cast<size_t>(c.queries * c.hd), seed, -c.spread, c.spread);
    k = uniform(static_cast<size_t>(c.keys * c.hd), seed + 1, -c.spread, c.spread);
    v = uniform(static_cast<size_t>(c.keys * c.hd), seed + 2);
    dout = uniform(static_cast<size_t>(c.queries * c.hd), seed + 3);
  }
};

struct Result {
  std::vector<float> out, lse, dq, dk, dv;
};

// The fused kernel, reading every matrix from rows of `stride` floats (a head's columns inside a
// wider row, as the layer passes them), with a workspace filled with `junk` first.
Result run_fused(const Problem& p, int64_t stride, float junk = 0.0f) {
  const AttentionDims d = p.c.dims();
  const int64_t hd = d.head_dim;
  auto widen = [&](const std::vector<float>& m, int64_t rows) {
    std::vector<float> w(static_cast<size_t>(std::max<int64_t>(rows, 1) * stride), -7.0f);
    for (int64_t r = 0; r < rows; ++r) std::memcpy(&w[r * stride], &m[r * hd], hd * sizeof(float));
    return w;
  };
  auto narrow = [&](const std::vector<float>& w, int64_t rows) {
    std::vector<float> m(static_cast<size_t>(rows * hd));
    for (int64_t r = 0; r < rows; ++r) std::memcpy(&m[r * hd], &w[r * stride], hd * sizeof(float));
    return m;
  };
  const std::vector<float> q = widen(p.q, d.queries), k = widen(p.k, d.keys), v = widen(p.v, d.keys),
                           dout = widen(p.dout, d.queries);
  std::vector<float> out(q.size(), 3.0f), dq(q.size(), 3.0f), dk(k.size(), 3.0f), dv(k.size(), 3.0f);
  Result r;
  r.lse.assign(static_cast<size_t>(d.queries), 0.0f);
  std::vector<float> work(flash_attention_workspace_floats(d), junk);
  flash_attention_forward(d, {q.data(), stride}, {k.data(), stride}, {v.data(), stride}, {out.data(), stride},
                          r.lse.data(), work.data());
  std::fill(work.begin(), work.end(), junk);
  flash_attention_backward(d, {q.data(), stride}, {k.data(), stride}, {v.data(), stride}, {out.data(), stride},
                           r.lse.data(), {dout.data(), stride}, {dq.data(), stride}, {dk.data(), stride},
                           {dv.data(), stride}, work.data());
  r.out = narrow(out, d.queries);
  r.dq = narrow(dq, d.queries);
  r.dk = narrow(dk, d.keys);
  r.dv = narrow(dv, d.keys);
  return r;
}

Result run_reference(const Problem& p) {
  const AttentionDims d = p.c.dims();
  const size_t qn = static_cast<size_t>(d.queries * d.head_dim), kn = static_cast<size_t>(d.keys * d.head_dim);
  std::vector<float> probs(static_cast<size_t>(d.queries * d.keys)), dp(probs.size());
  Result r{std::vector<float>(qn), {}, std::vector<float>(qn), std::vector<float>(kn), std::vector<float>(kn)};
  attention_reference_forward(d, p.q.data(), p.k.data(), p.v.data(), probs.data(), r.out.data());
  attention_reference_backward(d, p.q.data(), p.k.data(), p.v.data(), probs.data(), p.dout.data(), dp.data(),
                               r.dq.data(), r.dk.data(), r.dv.data());
  return r;
}

// max |a - b| / max |b| (0 when b is all zero and a equals it).
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return scale > 0.0 ? diff / scale : diff;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int64_t t : {1, 7, 64, 129, 256}) {
    for (int64_t hd : {8, 16, 64}) {
      out.push_back({t, t, hd, 0, 1.0f});                // a whole sequence
      out.push_back({t, t + 37, hd, 37, 1.0f});           // a later slice: 37 earlier keys
      out.push_back({t, t + 70 + 5, hd, 70, 1.0f});       // keys beyond the last query's position
    }
  }
  for (int64_t hd : {4, 12, 32}) out.push_back({100, 130, hd, 30, 1.0f});  // head dims not multiples of 8
  out.push_back({200, 200, 32, 0, 3.0f});                                  // peaky softmax rows
  out.push_back({65, 65, 64, 0, 4.0f});
  return out;
}

TEST(FlashAttention, MatchesTheUnfusedReference) {
  uint64_t seed = 1;
  for (const Case& c : cases()) {
    const Problem p(c, seed += 10);
    const Result ref = run_reference(p);
    const Result got = run_fused(p, c.hd);
    const double e_out = relative_error(got.out, ref.out), e_dq = relative_error(got.dq, ref.dq),
                 e_dk = relative_error(got.dk, ref.dk), e_dv = relative_error(got.dv, ref.dv);
    std::cout << c.name() << ": relative error out " << e_out << " dq " << e_dq << " dk " << e_dk << " dv " << e_dv
              << "\n";
    EXPECT_LE(e_out, kRelTolerance) << c.name();
    EXPECT_LE(e_dq, kRelTolerance) << c.name();
    EXPECT_LE(e_dk, kRelTolerance) << c.name();
    EXPECT_LE(e_dv, kRelTolerance) << c.name();
  }
}

// Keys after the last query's position get exactly zero gradients; the others do not.
TEST(FlashAttention, UnattendedKeysGetZeroGradients) {
  const Case c{20, 100, 16, 10, 1.0f};  // queries at positions 10..29 of 100 keys
  const Result got = run_fused(Problem(c, 5), c.hd);
  for (int64_t j = 0; j < c.keys; ++j) {
    bool zero = true;
    for (int64_t i = 0; i < c.hd; ++i) zero = zero && got.dk[j * c.hd + i] == 0.0f && got.dv[j * c.hd + i] == 0.0f;
    EXPECT_EQ(zero, j >= 30) << "key " << j;
  }
}

// The layer passes heads as strided column blocks: the same numbers as contiguous rows, and
// nothing outside the head's columns is written.
TEST(FlashAttention, StridedRowsEqualContiguous) {
  for (const Case& c : {Case{129, 129, 16, 0, 1.0f}, Case{33, 80, 12, 47, 1.0f}}) {
    const Problem p(c, 3);
    const Result a = run_fused(p, c.hd), b = run_fused(p, 3 * c.hd + 5);
    EXPECT_EQ(a.out, b.out) << c.name();
    EXPECT_EQ(a.lse, b.lse) << c.name();
    EXPECT_EQ(a.dq, b.dq) << c.name();
    EXPECT_EQ(a.dk, b.dk) << c.name();
    EXPECT_EQ(a.dv, b.dv) << c.name();
  }
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Two runs are bitwise equal, whatever the workspace held before (zeros, NaN).
TEST(FlashAttention, Deterministic) {
  for (const Case& c : {Case{256, 256, 32, 0, 1.0f}, Case{77, 300, 64, 223, 2.0f}}) {
    const Problem p(c, 11);
    const Result a = run_fused(p, c.hd), b = run_fused(p, c.hd, std::numeric_limits<float>::quiet_NaN());
    EXPECT_TRUE(bitwise_equal(a.out, b.out) && bitwise_equal(a.lse, b.lse)) << c.name();
    EXPECT_TRUE(bitwise_equal(a.dq, b.dq) && bitwise_equal(a.dk, b.dk) && bitwise_equal(a.dv, b.dv)) << c.name();
  }
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0.0f;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

// A query row's forward does not depend on the other rows: the queries [s, T) of a sequence as a
// slice (offset s over the same keys) give the whole sequence's rows, bitwise where the BLAS
// computes an element alike whatever the product's shape (the kernel's own row arithmetic is
// per row; a slice's blocks have other shapes than the whole sequence's), else within 1e-6
// (outputs are averages of values in [-1, 1]; lse is about log T).
TEST(FlashAttention, SliceForwardEqualsWholeSequenceRows) {
  const bool bitwise = test::blas_is_shape_independent();
  std::cout << "BLAS products shape-independent on this machine: " << (bitwise ? "yes" : "no")
            << (bitwise ? " (slices checked bitwise)" : " (slices checked within 1e-6)") << "\n";
  const int64_t T = 200, hd = 16;
  const Problem whole(Case{T, T, hd, 0, 1.0f}, 21);
  const Result all = run_fused(whole, hd);
  for (int64_t s : {1, 64, 77, 150}) {
    Problem part(Case{T - s, T, hd, s, 1.0f}, 21);
    part.k = whole.k;
    part.v = whole.v;
    part.q.assign(whole.q.begin() + s * hd, whole.q.end());
    part.dout.assign(whole.dout.begin() + s * hd, whole.dout.end());
    const Result got = run_fused(part, hd);
    const std::vector<float> want_out(all.out.begin() + s * hd, all.out.end()), want_lse(all.lse.begin() + s, all.lse.end());
    if (bitwise) {
      EXPECT_TRUE(bitwise_equal(got.out, want_out)) << "slice " << s;
      EXPECT_TRUE(bitwise_equal(got.lse, want_lse)) << "slice " << s;
    } else {
      const float d_out = max_abs_diff(got.out, want_out), d_lse = max_abs_diff(got.lse, want_lse);
      std::cout << "slice " << s << ": max |difference| out " << d_out << ", lse " << d_lse << "\n";
      EXPECT_LE(d_out, 1e-6f) << "slice " << s;
      EXPECT_LE(d_lse, 1e-6f * std::log(static_cast<float>(T))) << "slice " << s;
    }
  }
}

// Central differences of sum(out o dout) w.r.t. every element of q, k and v (double objective over
// the f32 forward; eps 1e-2; |analytic - numeric| <= 1e-3 + 1e-2 |numeric|, as the layer checks).
TEST(FlashAttention, GradientsMatchFiniteDifferences) {
  const Case c{6, 9, 4, 3, 1.0f};
  Problem p(c, 31);
  const Result got = run_fused(p, c.hd);
  const AttentionDims d = c.dims();
  std::vector<float> work(flash_attention_workspace_floats(d)), out(p.q.size()), lse(static_cast<size_t>(c.queries));
  auto objective = [&] {
    flash_attention_forward(d, {p.q.data(), c.hd}, {p.k.data(), c.hd}, {p.v.data(), c.hd}, {out.data(), c.hd},
                            lse.data(), work.data());
    double s = 0.0;
    for (size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * p.dout[i];
    return s;
  };
  const float eps = 1e-2f;
  auto check = [&](std::vector<float>& x, const std::vector<float>& analytic, const char* what) {
    for (size_t i = 0; i < x.size(); ++i) {
      const float saved = x[i];
      x[i] = saved + eps;
      const float up = x[i];
      const double plus = objective();
      x[i] = saved - eps;
      const float down = x[i];
      const double minus = objective();
      x[i] = saved;
      const double numeric = (plus - minus) / (static_cast<double>(up) - down);
      EXPECT_NEAR(analytic[i], numeric, 1e-3 + 1e-2 * std::fabs(numeric)) << what << " entry " << i;
    }
  };
  check(p.q, got.dq, "dq");
  check(p.k, got.dk, "dk");
  check(p.v, got.dv, "dv");
}

TEST(FlashAttention, BadDimensionsThrow) {
  EXPECT_ANY_THROW(flash_attention_workspace_floats({4, 3, 8, 0}));   // fewer keys than queries
  EXPECT_ANY_THROW(flash_attention_workspace_floats({4, 6, 8, 3}));   // offset + queries > keys
  EXPECT_ANY_THROW(flash_attention_workspace_floats({4, 4, 0, 0}));   // no head dim
  EXPECT_NO_THROW(flash_attention_workspace_floats({0, 5, 8, 5}));    // no queries
}

}  // namespace
}  // namespace pf::cpu

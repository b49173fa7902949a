#include "runtime/kernels/cpu/flash_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/core/error.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/kernels/cpu/fast_math.h"
#include "runtime/kernels/cpu/fast_math_lanes.h"
#include "runtime/kernels/cpu/vec8.h"

// The portable build (no AVX) passes the 8-lane vectors of the internal helpers below in two SSE
// registers and GCC notes the ABI change; nothing outside this file sees them.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace pf::cpu {

namespace {

// Block sizes: 32 queries x 128 keys (measured on the core at head_dim 32, T = 64 .. 1024, against
// 64 x 64, 64 x 128, 32 x 64, 32 x 32, 16 x 64 and 16 x 128; within noise of the best everywhere). Products with a key block stop at the keys the
// block's last query sees, so 32-query blocks skip most of the masked half of a diagonal block,
// and the blocks stay in L1/L2 and large enough for OpenBLAS to run near its peak.
constexpr int64_t kQueryBlock = 32, kKeyBlock = 128;
constexpr int64_t kLanes = 8;  // floats per vector

// Row reductions in 8 lanes (GCC/Clang vector extensions: AVX under -march=x86-64-v3, SSE in the
// portable build) instead of one serial chain of dependent adds; lanes and the tail combine in a
// fixed order, so results do not depend on anything but the inputs.
using Vec = v8f;  // runtime/kernels/cpu/vec8.h: load8, store8
static_assert(sizeof(Vec) == kLanes * sizeof(float), "eight lanes");

// p[j] = e^(p[j] - m) for j < n rounded up to whole vectors (the caller's row has room).
inline void exp_minus(float* p, int64_t n, float m) {
  for (int64_t j = 0; j < n; j += kLanes) store8(p + j, exp_lanes(load8(p + j) - m));
}

// n floats of zero (a plain loop becomes a memset call, slow for a few dozen floats).
inline void zero(float* p, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store8(p + i, Vec{});
  for (; i < n; ++i) p[i] = 0.0f;
}

inline float lanes_sum(Vec v) {
  float s = 0.0f;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}

float row_max_of(const float* p, int64_t n) {
  float m = p[0];
  int64_t j = 0;
  if (n >= kLanes) {
    Vec acc = load8(p);
    for (j = kLanes; j + kLanes <= n; j += kLanes) {
      const Vec x = load8(p + j);
      acc = x > acc ? x : acc;
    }
    for (int i = 0; i < kLanes; ++i) m = acc[i] > m ? acc[i] : m;
  }
  for (; j < n; ++j) m = p[j] > m ? p[j] : m;
  return m;
}

float row_sum_of(const float* p, int64_t n) {
  Vec acc{};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) acc += load8(p + j);
  float s = lanes_sum(acc);
  for (; j < n; ++j) s += p[j];
  return s;
}

float row_dot(const float* a, const float* b, int64_t n) {
  Vec acc{};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) acc += load8(a + j) * load8(b + j);
  float s = lanes_sum(acc);
  for (; j < n; ++j) s += a[j] * b[j];
  return s;
}

// dst [hd][ld] = the transpose of src's `rows` rows of hd floats (so the score products run
// untransposed, which OpenBLAS does faster): 8 x 8 tiles transposed in registers, the edges one by one.
void transpose(ConstRows src, int64_t rows, int64_t hd, float* dst, int64_t ld) {
  int64_t j0 = 0;
  for (; j0 + kLanes <= rows; j0 += kLanes) {
    int64_t c0 = 0;
    for (; c0 + kLanes <= hd; c0 += kLanes) {
      Vec r[kLanes];
      for (int i = 0; i < kLanes; ++i) r[i] = load8(src.data + (j0 + i) * src.stride + c0);
      Vec t[kLanes], u[kLanes];
      for (int i = 0; i < kLanes; i += 2) {
        t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
      }
      for (int i = 0; i < kLanes; i += 4) {
        u[i] = __builtin_shufflevector(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
        u[i + 1] = __builtin_shufflevector(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        u[i + 2] = __builtin_shufflevector(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
        u[i + 3] = __builtin_shufflevector(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
      }
      for (int i = 0; i < 4; ++i) {  // column c0 + i from u[i] and u[i + 4], and c0 + i + 4
        store8(dst + (c0 + i) * ld + j0, __builtin_shufflevector(u[i], u[i + 4], 0, 1, 2, 3, 8, 9, 10, 11));
        store8(dst + (c0 + i + 4) * ld + j0, __builtin_shufflevector(u[i], u[i + 4], 4, 5, 6, 7, 12, 13, 14, 15));
      }
    }
    for (int64_t c = c0; c < hd; ++c)
      for (int64_t j = j0; j < j0 + kLanes; ++j) dst[c * ld + j] = src.data[j * src.stride + c];
  }
  for (int64_t c = 0; c < hd; ++c)
    for (int64_t j = j0; j < rows; ++j) dst[c * ld + j] = src.data[j * src.stride + c];
}

void check_dims(const AttentionDims& d) {
  PF_CHECK_ARG(d.queries >= 0 && d.offset >= 0 && d.head_dim >= 1 && d.keys >= d.offset + d.queries,
               "flash attention: need queries >= 0, offset >= 0, head_dim >= 1 and keys >= offset + queries, got ",
               d.queries, " queries, ", d.keys, " keys, head_dim ", d.head_dim, ", offset ", d.offset);
  PF_CHECK_ARG(d.causal || d.offset == 0, "flash attention: bidirectional (non-causal) attention takes no position "
               "offset, got offset ", d.offset);
}

// The last key query row i attends to: its position offset + i, or the last key without the mask.
inline int64_t last_key(const AttentionDims& d, int64_t i) { return d.causal ? d.offset + i : d.keys - 1; }

// Keys query row i attends to inside the key block at j0 of `len` keys.
inline int64_t valid_keys(const AttentionDims& d, int64_t i, int64_t j0, int64_t len) {
  return std::clamp<int64_t>(last_key(d, i) + 1 - j0, 0, len);
}

float inv_sqrt(int64_t hd) { return 1.0f / std::sqrt(static_cast<float>(hd)); }

}  // namespace

size_t flash_attention_workspace_floats(const AttentionDims& dims) {
  check_dims(dims);
  // Forward: k^T, scores, output accumulator, row max and sum. Backward: k^T, v^T, P, dP / dS, D.
  const int64_t kt = dims.head_dim * dims.keys;
  const size_t forward = static_cast<size_t>(kt + kQueryBlock * kKeyBlock + kQueryBlock * dims.head_dim + 2 * kQueryBlock);
  const size_t backward = static_cast<size_t>(2 * kt + 2 * kQueryBlock * kKeyBlock + dims.queries);
  return std::max<size_t>({forward, backward, 1});
}

void flash_attention_forward(const AttentionDims& dims, ConstRows q, ConstRows k, ConstRows v, Rows out,
                             float* lse, float* workspace) {
  check_dims(dims);
  const int64_t hd = dims.head_dim, T = dims.queries, L = dims.keys;
  float* kt = workspace;                    // [hd][L]
  float* s = kt + hd * L;                   // [kQueryBlock][kKeyBlock]: scores, then P
  float* acc = s + kQueryBlock * kKeyBlock;  // [kQueryBlock][hd]
  float* row_max = acc + kQueryBlock * hd;   // [kQueryBlock]
  float* row_sum = row_max + kQueryBlock;    // [kQueryBlock]
  transpose(k, dims.causal ? dims.offset + T : L, hd, kt, L);  // the keys some query attends to
  for (int64_t i0 = 0; i0 < T; i0 += kQueryBlock) {
    const int64_t rows = std::min(kQueryBlock, T - i0);
    const int64_t last = last_key(dims, i0 + rows - 1);  // the last key the block's last query sees
    for (int64_t r = 0; r < rows; ++r) {
      row_max[r] = -std::numeric_limits<float>::infinity();
      row_sum[r] = 0.0f;
    }
    for (int64_t j0 = 0; j0 <= last; j0 += kKeyBlock) {
      const int64_t len = std::min(kKeyBlock, last + 1 - j0);  // keys some row of the block attends to
      gemm(false, false, rows, len, hd, inv_sqrt(hd), q.data + i0 * q.stride, q.stride, kt + j0, L, 0.0f, s,
           kKeyBlock);
      for (int64_t r = 0; r < rows; ++r) {
        float* p = s + r * kKeyBlock;
        const int64_t n = valid_keys(dims, i0 + r, j0, len);
        if (n == 0) {
          zero(p, len);
          continue;
        }
        const float m_new = std::max(row_max[r], row_max_of(p, n));
        // The first block: e^-inf clamps to ~1e-38, times a sum and accumulator that are still 0.
        const float alpha = fast_exp(row_max[r] - m_new);
        // Whole vectors (the row has kKeyBlock floats; past len they are unused), then the mask.
        exp_minus(p, n, m_new);
        zero(p + n, len - n);
        row_sum[r] = row_sum[r] * alpha + row_sum_of(p, n);
        row_max[r] = m_new;
        if (j0 > 0 && alpha != 1.0f) {
          float* a = acc + r * hd;
          for (int64_t c = 0; c < hd; ++c) a[c] *= alpha;
        }
      }
      gemm(false, false, rows, hd, len, 1.0f, s, kKeyBlock, v.data + j0 * v.stride, v.stride, j0 > 0 ? 1.0f : 0.0f,
           acc, hd);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float inv = 1.0f / row_sum[r];
      const float* a = acc + r * hd;
      float* o = out.data + (i0 + r) * out.stride;
      for (int64_t c = 0; c < hd; ++c) o[c] = a[c] * inv;
      lse[i0 + r] = row_max[r] + std::log(row_sum[r]);
    }
  }
}

void flash_attention_backward(const AttentionDims& dims, ConstRows q, ConstRows k, ConstRows v, ConstRows out,
                              const float* lse, ConstRows dout, Rows dq, Rows dk, Rows dv, float* workspace) {
  check_dims(dims);
  const int64_t hd = dims.head_dim, T = dims.queries, L = dims.keys;
  const float scale = inv_sqrt(hd);
  float* kt = workspace;                        // [hd][L]
  float* vt = kt + hd * L;                      // [hd][L]
  float* p = vt + hd * L;                       // [kQueryBlock][kKeyBlock]
  float* ds = p + kQueryBlock * kKeyBlock;      // [kQueryBlock][kKeyBlock]: dP, then dS
  float* row_d = ds + kQueryBlock * kKeyBlock;  // [T]
  transpose(k, L, hd, kt, L);
  transpose(v, L, hd, vt, L);
  for (int64_t i = 0; i < T; ++i) row_d[i] = row_dot(dout.data + i * dout.stride, out.data + i * out.stride, hd);
  for (int64_t j0 = 0; j0 < L; j0 += kKeyBlock) {
    const int64_t len = std::min(kKeyBlock, L - j0);
    for (int64_t j = j0; j < j0 + len; ++j) {  // no query attends to keys after the last one's position
      zero(dk.data + j * dk.stride, hd);
      zero(dv.data + j * dv.stride, hd);
    }
    // The first query that sees key j0 (every query does without the mask).
    const int64_t first = dims.causal ? std::max<int64_t>(0, j0 - dims.offset) : 0;
    for (int64_t i0 = first / kQueryBlock * kQueryBlock; i0 < T; i0 += kQueryBlock) {
      const int64_t rows = std::min(kQueryBlock, T - i0);
      const int64_t cols = std::min(len, last_key(dims, i0 + rows - 1) + 1 - j0);  // keys the block's last row sees
      const float* qi = q.data + i0 * q.stride;
      const float* gi = dout.data + i0 * dout.stride;
      gemm(false, false, rows, cols, hd, scale, qi, q.stride, kt + j0, L, 0.0f, p, kKeyBlock);
      gemm(false, false, rows, cols, hd, 1.0f, gi, dout.stride, vt + j0, L, 0.0f, ds, kKeyBlock);
      for (int64_t r = 0; r < rows; ++r) {
        float* pr = p + r * kKeyBlock;
        float* dsr = ds + r * kKeyBlock;
        const int64_t n = valid_keys(dims, i0 + r, j0, cols);
        const float m = lse[i0 + r], d = row_d[i0 + r];
        // Whole vectors (the row has kKeyBlock floats; past cols they are unused), then the mask.
        exp_minus(pr, n, m);
        zero(pr + n, cols - n);
        for (int64_t j = 0; j < cols; ++j) dsr[j] = pr[j] * (dsr[j] - d);
      }
      // dV += P^T dO, dK += dS^T Q / sqrt(hd), dQ += dS K / sqrt(hd).
      gemm(true, false, cols, hd, rows, 1.0f, p, kKeyBlock, gi, dout.stride, 1.0f, dv.data + j0 * dv.stride, dv.stride);
      gemm(true, false, cols, hd, rows, scale, ds, kKeyBlock, qi, q.stride, 1.0f, dk.data + j0 * dk.stride, dk.stride);
      // Every query sees key block 0, which writes all of dq.
      gemm(false, false, rows, hd, cols, scale, ds, kKeyBlock, k.data + j0 * k.stride, k.stride, j0 > 0 ? 1.0f : 0.0f,
           dq.data + i0 * dq.stride, dq.stride);
    }
  }
}

void attention_reference_forward(const AttentionDims& dims, const float* q, const float* k, const float* v,
                                 float* probs, float* out) {
  check_dims(dims);
  const int64_t steps = dims.queries, keys = dims.keys, hd = dims.head_dim;
  // Scores for all pairs (the masked part is overwritten below), then a causal softmax per row:
  // query i sits at position offset + i (without the mask: a softmax over all keys).
  gemm(false, true, steps, keys, hd, inv_sqrt(hd), q, k, 0.0f, probs);
  for (int64_t i = 0; i < steps; ++i) {
    float* row = probs + i * keys;
    const int64_t last = last_key(dims, i);
    float max_score = row[0];
    for (int64_t j = 1; j <= last; ++j) max_score = row[j] > max_score ? row[j] : max_score;
    float sum = 0.0f;
    for (int64_t j = 0; j <= last; ++j) {
      row[j] = fast_exp(row[j] - max_score);
      sum += row[j];
    }
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j <= last; ++j) row[j] *= inv;
    for (int64_t j = last + 1; j < keys; ++j) row[j] = 0.0f;
  }
  gemm(false, false, steps, hd, keys, 1.0f, probs, v, 0.0f, out);
}

void attention_reference_backward(const AttentionDims& dims, const float* q, const float* k, const float* v,
                                  const float* probs, const float* dout, float* dp, float* dq, float* dk,
                                  float* dv) {
  check_dims(dims);
  const int64_t steps = dims.queries, keys = dims.keys, hd = dims.head_dim;
  const float scale = inv_sqrt(hd);
  // dV = P^T dO ; dP = dO V^T ; dS = P * (dP - rowsum(P * dP)) ; dQ = s dS K ; dK = s dS^T Q.
  gemm(true, false, keys, hd, steps, 1.0f, probs, dout, 0.0f, dv);
  gemm(false, true, steps, keys, hd, 1.0f, dout, v, 0.0f, dp);
  for (int64_t i = 0; i < steps; ++i) {
    const float* prow = probs + i * keys;
    float* drow = dp + i * keys;
    const int64_t last = last_key(dims, i);
    float dot = 0.0f;
    for (int64_t j = 0; j <= last; ++j) dot += prow[j] * drow[j];
    for (int64_t j = 0; j <= last; ++j) drow[j] = prow[j] * (drow[j] - dot);
    for (int64_t j = last + 1; j < keys; ++j) drow[j] = 0.0f;
  }
  gemm(false, false, steps, hd, keys, scale, dp, k, 0.0f, dq);
  gemm(true, false, keys, hd, steps, scale, dp, q, 0.0f, dk);
}

}  // namespace pf::cpu

#include "runtime/kernels/cpu/flash_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/core/error.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/kernels/cpu/fast_math.h"

namespace pf::cpu {

namespace {

// Block sizes: a 64 x 64 score block and its operands stay in L1/L2 for head_dim <= 64.
constexpr int64_t kQueryBlock = 64, kKeyBlock = 64;
constexpr int64_t kLanes = 8;  // floats per vector

typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

inline Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void store(float* p, Vec v) { std::memcpy(p, &v, sizeof(v)); }
inline Vec splat(float x) { return Vec{} + x; }

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// One register tile: C[R][NV lanes] (+)= sum_k A(r, k) B[k][:], with A(r, k) = a[r * ars + k * aks]
// (so A may be a transposed view) and B row-major with row stride ldb. k runs in order.
template <int R, int NV>
inline void tile(int64_t kk, const float* a, int64_t ars, int64_t aks, const float* b, int64_t ldb, float* c,
                 int64_t ldc, bool accumulate) {
  Vec acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n) acc[r][n] = accumulate ? load(c + r * ldc + n * kLanes) : Vec{};
  for (int64_t k = 0; k < kk; ++k) {
    Vec bv[NV];
    for (int n = 0; n < NV; ++n) bv[n] = load(b + k * ldb + n * kLanes);
    for (int r = 0; r < R; ++r) {
      const Vec av = splat(a[r * ars + k * aks]);
      for (int n = 0; n < NV; ++n) acc[r][n] += av * bv[n];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n) store(c + r * ldc + n * kLanes, acc[r][n]);
}

template <int NV>
void tile_rows(int64_t m, int64_t kk, const float* a, int64_t ars, int64_t aks, const float* b, int64_t ldb,
               float* c, int64_t ldc, bool accumulate) {
  int64_t r = 0;
  for (; r + 4 <= m; r += 4) tile<4, NV>(kk, a + r * ars, ars, aks, b, ldb, c + r * ldc, ldc, accumulate);
  const float* ar = a + r * ars;
  float* cr = c + r * ldc;
  switch (m - r) {
    case 3: tile<3, NV>(kk, ar, ars, aks, b, ldb, cr, ldc, accumulate); break;
    case 2: tile<2, NV>(kk, ar, ars, aks, b, ldb, cr, ldc, accumulate); break;
    case 1: tile<1, NV>(kk, ar, ars, aks, b, ldb, cr, ldc, accumulate); break;
    default: break;
  }
}

// C[m][n] (+)= A B for a small block: A(r, k) = a[r * ars + k * aks], B [kk][n] with row stride ldb;
// n a multiple of kLanes. Each entry of C sums over k in order, independently of m and n.
void block_product(int64_t m, int64_t n, int64_t kk, const float* a, int64_t ars, int64_t aks, const float* b,
                   int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  int64_t c0 = 0;
  for (; c0 + 2 * kLanes <= n; c0 += 2 * kLanes) tile_rows<2>(m, kk, a, ars, aks, b + c0, ldb, c + c0, ldc, accumulate);
  if (c0 < n) tile_rows<1>(m, kk, a, ars, aks, b + c0, ldb, c + c0, ldc, accumulate);
}

// dst [rows_padded][width] = src's first `rows` rows of hd floats, zero-padded.
void pack_rows(ConstRows src, int64_t rows, int64_t hd, float* dst, int64_t rows_padded, int64_t width) {
  for (int64_t r = 0; r < rows_padded; ++r) {
    float* d = dst + r * width;
    int64_t i = 0;
    if (r < rows)
      for (const float* s = src.data + r * src.stride; i < hd; ++i) d[i] = s[i];
    for (; i < width; ++i) d[i] = 0.0f;
  }
}

// dst [hd][cols_padded] = the transpose of src's first `cols` rows, zero-padded.
void pack_transposed(ConstRows src, int64_t cols, int64_t hd, float* dst, int64_t cols_padded) {
  for (int64_t d = 0; d < hd; ++d) {
    float* row = dst + d * cols_padded;
    for (int64_t j = 0; j < cols; ++j) row[j] = src.data[j * src.stride + d];
    for (int64_t j = cols; j < cols_padded; ++j) row[j] = 0.0f;
  }
}

void check_dims(const AttentionDims& d) {
  PF_CHECK_ARG(d.queries >= 0 && d.offset >= 0 && d.head_dim >= 1 && d.keys >= d.offset + d.queries,
               "flash attention: need queries >= 0, offset >= 0, head_dim >= 1 and keys >= offset + queries, got ",
               d.queries, " queries, ", d.keys, " keys, head_dim ", d.head_dim, ", offset ", d.offset);
}

// Padded sizes shared by the forward, the backward and the workspace size.
struct Layout {
  int64_t hd, hdp, tp, lp;  // head_dim, padded to lanes; queries and keys padded to whole blocks
  explicit Layout(const AttentionDims& d)
      : hd(d.head_dim), hdp(round_up(d.head_dim, kLanes)), tp(round_up(d.queries, kQueryBlock)),
        lp(round_up(d.keys, kKeyBlock)) {}
  size_t forward_floats() const {  // q, k^T, v, scores, output accumulator, max, sum
    return static_cast<size_t>(tp * hdp + hd * lp + lp * hdp + kQueryBlock * kKeyBlock + kQueryBlock * hdp +
                               2 * kQueryBlock);
  }
  size_t backward_floats() const {  // q, dout, dq; k^T, k, v^T; p, dp; dk, dv blocks; D, lse
    return static_cast<size_t>(3 * tp * hdp + 2 * hd * lp + lp * hdp + 2 * kQueryBlock * kKeyBlock +
                               2 * kKeyBlock * hdp + 2 * tp);
  }
};

// Keys query row i (position offset + i) attends to inside the key block at j0 of `len` keys.
inline int64_t valid_keys(const AttentionDims& d, int64_t i, int64_t j0, int64_t len) {
  if (i >= d.queries) return 0;
  return std::clamp<int64_t>(d.offset + i + 1 - j0, 0, len);
}

float inv_sqrt(int64_t hd) { return 1.0f / std::sqrt(static_cast<float>(hd)); }

}  // namespace

size_t flash_attention_workspace_floats(const AttentionDims& dims) {
  check_dims(dims);
  const Layout lay(dims);
  return std::max(lay.forward_floats(), lay.backward_floats());
}

void flash_attention_forward(const AttentionDims& dims, ConstRows q, ConstRows k, ConstRows v, Rows out,
                             float* lse, float* workspace) {
  check_dims(dims);
  const Layout lay(dims);
  const int64_t hd = lay.hd, hdp = lay.hdp, T = dims.queries, L = dims.keys;
  const float scale = inv_sqrt(hd);
  float* qp = workspace;                       // [tp][hdp]
  float* kt = qp + lay.tp * hdp;               // [hd][lp]
  float* vp = kt + hd * lay.lp;                // [lp][hdp]
  float* s = vp + lay.lp * hdp;                // [kQueryBlock][kKeyBlock]
  float* acc = s + kQueryBlock * kKeyBlock;    // [kQueryBlock][hdp]
  float* row_max = acc + kQueryBlock * hdp;    // [kQueryBlock]
  float* row_sum = row_max + kQueryBlock;      // [kQueryBlock]
  pack_rows(q, T, hd, qp, lay.tp, hdp);
  pack_transposed(k, L, hd, kt, lay.lp);
  pack_rows(v, L, hd, vp, lay.lp, hdp);

  for (int64_t i0 = 0; i0 < T; i0 += kQueryBlock) {
    const int64_t rows = std::min(kQueryBlock, T - i0);
    const int64_t last = dims.offset + i0 + rows - 1;  // the block's last query position
    for (int64_t r = 0; r < kQueryBlock; ++r) {
      row_max[r] = -std::numeric_limits<float>::infinity();
      row_sum[r] = 0.0f;
    }
    std::fill(acc, acc + kQueryBlock * hdp, 0.0f);
    for (int64_t j0 = 0; j0 <= last; j0 += kKeyBlock) {
      const int64_t len = std::min(kKeyBlock, last + 1 - j0);  // keys some row of the block attends to
      const int64_t cols = round_up(len, kLanes);
      block_product(rows, cols, hd, qp + i0 * hdp, hdp, 1, kt + j0, lay.lp, s, kKeyBlock, false);
      for (int64_t r = 0; r < rows; ++r) {
        float* p = s + r * kKeyBlock;
        const int64_t n = valid_keys(dims, i0 + r, j0, len);
        if (n == 0) {
          std::fill(p, p + cols, 0.0f);
          continue;
        }
        float mx = p[0];
        for (int64_t j = 1; j < n; ++j) mx = p[j] > mx ? p[j] : mx;
        const float m_new = std::max(row_max[r], mx * scale);
        const float alpha = fast_exp(row_max[r] - m_new);  // e^-inf clamps to ~1e-38; sum and acc are 0 then
        for (int64_t j = 0; j < n; ++j) p[j] = fast_exp(p[j] * scale - m_new);
        for (int64_t j = n; j < cols; ++j) p[j] = 0.0f;
        float sum = 0.0f;
        for (int64_t j = 0; j < n; ++j) sum += p[j];
        row_sum[r] = row_sum[r] * alpha + sum;
        row_max[r] = m_new;
        if (alpha != 1.0f) {
          float* a = acc + r * hdp;
          for (int64_t c = 0; c < hdp; ++c) a[c] *= alpha;
        }
      }
      block_product(rows, hdp, len, s, kKeyBlock, 1, vp + j0 * hdp, hdp, acc, hdp, true);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float inv = 1.0f / row_sum[r];
      const float* a = acc + r * hdp;
      float* o = out.data + (i0 + r) * out.stride;
      for (int64_t c = 0; c < hd; ++c) o[c] = a[c] * inv;
      lse[i0 + r] = row_max[r] + std::log(row_sum[r]);
    }
  }
}

void flash_attention_backward(const AttentionDims& dims, ConstRows q, ConstRows k, ConstRows v, ConstRows out,
                              const float* lse, ConstRows dout, Rows dq, Rows dk, Rows dv, float* workspace) {
  check_dims(dims);
  const Layout lay(dims);
  const int64_t hd = lay.hd, hdp = lay.hdp, T = dims.queries, L = dims.keys;
  const float scale = inv_sqrt(hd);
  float* qp = workspace;                   // [tp][hdp]
  float* dop = qp + lay.tp * hdp;          // [tp][hdp]
  float* dqacc = dop + lay.tp * hdp;       // [tp][hdp]
  float* kt = dqacc + lay.tp * hdp;        // [hd][lp]
  float* vt = kt + hd * lay.lp;            // [hd][lp]
  float* kp = vt + hd * lay.lp;            // [lp][hdp]
  float* p = kp + lay.lp * hdp;            // [kQueryBlock][kKeyBlock]
  float* ds = p + kQueryBlock * kKeyBlock;  // [kQueryBlock][kKeyBlock]
  float* dkb = ds + kQueryBlock * kKeyBlock;  // [kKeyBlock][hdp]
  float* dvb = dkb + kKeyBlock * hdp;         // [kKeyBlock][hdp]
  float* row_d = dvb + kKeyBlock * hdp;       // [tp]
  float* row_lse = row_d + lay.tp;            // [tp]
  pack_rows(q, T, hd, qp, lay.tp, hdp);
  pack_rows(dout, T, hd, dop, lay.tp, hdp);
  std::fill(dqacc, dqacc + lay.tp * hdp, 0.0f);
  pack_transposed(k, L, hd, kt, lay.lp);
  pack_transposed(v, L, hd, vt, lay.lp);
  pack_rows(k, L, hd, kp, lay.lp, hdp);
  for (int64_t i = 0; i < lay.tp; ++i) {
    float d = 0.0f;
    if (i < T) {
      const float* o = out.data + i * out.stride;
      const float* g = dout.data + i * dout.stride;
      for (int64_t c = 0; c < hd; ++c) d += g[c] * o[c];
    }
    row_d[i] = d;
    row_lse[i] = i < T ? lse[i] : 0.0f;
  }

  for (int64_t j0 = 0; j0 < L; j0 += kKeyBlock) {
    const int64_t len = std::min(kKeyBlock, L - j0), cols = round_up(len, kLanes);
    const int64_t first = std::max<int64_t>(0, j0 - dims.offset);  // the first query that sees key j0
    if (first < T) {
      std::fill(dkb, dkb + kKeyBlock * hdp, 0.0f);
      std::fill(dvb, dvb + kKeyBlock * hdp, 0.0f);
      for (int64_t i0 = first / kQueryBlock * kQueryBlock; i0 < T; i0 += kQueryBlock) {
        const int64_t rows = std::min(kQueryBlock, T - i0);
        block_product(rows, cols, hd, qp + i0 * hdp, hdp, 1, kt + j0, lay.lp, p, kKeyBlock, false);
        block_product(rows, cols, hd, dop + i0 * hdp, hdp, 1, vt + j0, lay.lp, ds, kKeyBlock, false);
        for (int64_t r = 0; r < rows; ++r) {
          float* pr = p + r * kKeyBlock;
          float* dsr = ds + r * kKeyBlock;
          const int64_t n = valid_keys(dims, i0 + r, j0, len);
          const float m = row_lse[i0 + r], d = row_d[i0 + r];
          for (int64_t j = 0; j < n; ++j) {
            const float e = fast_exp(pr[j] * scale - m);
            pr[j] = e;
            dsr[j] = e * (dsr[j] - d);
          }
          for (int64_t j = n; j < cols; ++j) pr[j] = dsr[j] = 0.0f;
        }
        // dV += P^T dO, dK += dS^T Q (A transposed: A(j, i) = P[i][j]), dQ += dS K.
        block_product(len, hdp, rows, p, 1, kKeyBlock, dop + i0 * hdp, hdp, dvb, hdp, true);
        block_product(len, hdp, rows, ds, 1, kKeyBlock, qp + i0 * hdp, hdp, dkb, hdp, true);
        block_product(rows, hdp, len, ds, kKeyBlock, 1, kp + j0 * hdp, hdp, dqacc + i0 * hdp, hdp, true);
      }
    }
    for (int64_t j = 0; j < len; ++j) {
      float* gk = dk.data + (j0 + j) * dk.stride;
      float* gv = dv.data + (j0 + j) * dv.stride;
      const float* sk = dkb + j * hdp;
      const float* sv = dvb + j * hdp;
      for (int64_t c = 0; c < hd; ++c) {
        gk[c] = first < T ? sk[c] * scale : 0.0f;
        gv[c] = first < T ? sv[c] : 0.0f;
      }
    }
  }
  for (int64_t i = 0; i < T; ++i) {
    float* g = dq.data + i * dq.stride;
    const float* a = dqacc + i * hdp;
    for (int64_t c = 0; c < hd; ++c) g[c] = a[c] * scale;
  }
}

void attention_reference_forward(const AttentionDims& dims, const float* q, const float* k, const float* v,
                                 float* probs, float* out) {
  check_dims(dims);
  const int64_t steps = dims.queries, keys = dims.keys, hd = dims.head_dim;
  // Scores for all pairs (the masked part is overwritten below), then a causal softmax per row:
  // query i sits at position offset + i.
  gemm(false, true, steps, keys, hd, inv_sqrt(hd), q, k, 0.0f, probs);
  for (int64_t i = 0; i < steps; ++i) {
    float* row = probs + i * keys;
    const int64_t last = dims.offset + i;
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
    const int64_t last = dims.offset + i;
    float dot = 0.0f;
    for (int64_t j = 0; j <= last; ++j) dot += prow[j] * drow[j];
    for (int64_t j = 0; j <= last; ++j) drow[j] = prow[j] * (drow[j] - dot);
    for (int64_t j = last + 1; j < keys; ++j) drow[j] = 0.0f;
  }
  gemm(false, false, steps, hd, keys, scale, dp, k, 0.0f, dq);
  gemm(true, false, keys, hd, steps, scale, dp, q, 0.0f, dk);
}

}  // namespace pf::cpu

#include "runtime/neuron_groups/diversity.h"

#include <algorithm>
#include <cmath>

#include "runtime/core/error.h"

namespace pf::groups {

namespace {

// Row i of head k: v (the normalised non-target probabilities) and what its backward needs.
template <typename Real>
struct RowTerms {
  std::vector<Real> q, u, v;
  Real s = 0, n = 0;
};

template <typename Real>
void row_terms(const Real* z, int32_t target, int64_t classes, Real temperature, RowTerms<Real>* t) {
  const size_t c = static_cast<size_t>(classes);
  t->q.resize(c);
  t->u.resize(c);
  t->v.resize(c);
  Real top = z[0] / temperature;
  for (size_t j = 1; j < c; ++j) top = std::max(top, z[j] / temperature);
  Real sum = 0;
  for (size_t j = 0; j < c; ++j) {
    t->q[j] = std::exp(z[j] / temperature - top);
    sum += t->q[j];
  }
  for (size_t j = 0; j < c; ++j) t->q[j] /= sum;
  Real s = 0;
  for (size_t j = 0; j < c; ++j) s += static_cast<int32_t>(j) == target ? Real(0) : t->q[j];
  t->s = s + Real(1e-8);
  Real sq = 0;
  for (size_t j = 0; j < c; ++j) {
    t->u[j] = (static_cast<int32_t>(j) == target ? Real(0) : t->q[j]) / t->s;
    sq += t->u[j] * t->u[j];
  }
  t->n = std::sqrt(sq + Real(1e-8));
  for (size_t j = 0; j < c; ++j) t->v[j] = t->u[j] / t->n;
}

}  // namespace

template <typename Real>
Real diversity_loss(const std::vector<const Real*>& logits, const int32_t* targets, int64_t rows, int64_t classes,
                    Real temperature, int head, Real* grad) {
  const int H = static_cast<int>(logits.size());
  PF_CHECK_ARG(H >= 1 && head >= 0 && head < H, "diversity term: head ", head, " of ", H);
  PF_CHECK_ARG(rows >= 1 && classes >= 2, "diversity term: ", rows, " rows of ", classes, " classes");
  PF_CHECK_ARG(temperature > 0, "diversity term: the temperature must be > 0, got ", temperature);
  const size_t c = static_cast<size_t>(classes);
  if (grad) std::fill(grad, grad + rows * classes, Real(0));
  if (H < 2) return 0;
  const Real den = static_cast<Real>(rows) * static_cast<Real>(H - 1) * static_cast<Real>(H);
  std::vector<RowTerms<Real>> terms(static_cast<size_t>(H));
  std::vector<Real> others(c), dv(c), du(c);
  Real loss = 0;
  for (int64_t i = 0; i < rows; ++i) {
    const int32_t y = targets[i];
    PF_CHECK_ARG(y >= 0 && y < classes, "diversity term: row ", i, " has target ", y, ", outside [0, ", classes, ")");
    for (int k = 0; k < H; ++k) row_terms(logits[static_cast<size_t>(k)] + i * classes, y, classes, temperature, &terms[static_cast<size_t>(k)]);
    Real row = 0;
    for (int k = 0; k < H; ++k)
      for (int l = 0; l < H; ++l) {
        if (k == l) continue;
        Real dot = 0;
        for (size_t j = 0; j < c; ++j) dot += terms[static_cast<size_t>(k)].v[j] * terms[static_cast<size_t>(l)].v[j];
        row += dot;
      }
    loss += row;
    if (!grad) continue;
    // d loss / d v_head = 2 sum_{l != head} v_l / den, then back through the normalisations and the
    // softmax.
    const RowTerms<Real>& t = terms[static_cast<size_t>(head)];
    std::fill(others.begin(), others.end(), Real(0));
    for (int l = 0; l < H; ++l)
      if (l != head)
        for (size_t j = 0; j < c; ++j) others[j] += terms[static_cast<size_t>(l)].v[j];
    Real dv_u = 0;
    for (size_t j = 0; j < c; ++j) {
      dv[j] = Real(2) * others[j] / den;
      dv_u += dv[j] * t.u[j];
    }
    const Real n3 = t.n * t.n * t.n;
    Real du_r = 0;
    for (size_t j = 0; j < c; ++j) {
      du[j] = dv[j] / t.n - t.u[j] * dv_u / n3;
      du_r += du[j] * (static_cast<int32_t>(j) == y ? Real(0) : t.q[j]);
    }
    // dq = dr masked (the target's q does not enter r).
    Real dq_q = 0;
    for (size_t j = 0; j < c; ++j) {
      const Real dq = static_cast<int32_t>(j) == y ? Real(0) : du[j] / t.s - du_r / (t.s * t.s);
      dv[j] = dq;  // reused as dq
      dq_q += dq * t.q[j];
    }
    Real* g = grad + i * classes;
    for (size_t j = 0; j < c; ++j) g[j] = t.q[j] * (dv[j] - dq_q) / temperature;
  }
  return loss / den;
}

template float diversity_loss<float>(const std::vector<const float*>&, const int32_t*, int64_t, int64_t, float, int,
                                     float*);
template double diversity_loss<double>(const std::vector<const double*>&, const int32_t*, int64_t, int64_t, double,
                                       int, double*);

}  // namespace pf::groups

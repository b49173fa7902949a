#include "runtime/planner/overhead_fit.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/core/error.h"

namespace pf::plan {
namespace {

// LAPACK's least squares by complete orthogonal factorisation (OpenBLAS exports it).
extern "C" void dgelsy_(const int* m, const int* n, const int* nrhs, double* a, const int* lda, double* b,
                        const int* ldb, int* jpvt, const double* rcond, int* rank, double* work, const int* lwork,
                        int* info);

// The least-squares fit of y by the columns in `active` (LAPACK dgelsy on the columns scaled to
// unit norm, so that the rank test sees their directions, not their units); false when they are
// rank-deficient (collinear to 1e-9, or fewer rows than columns).
bool solve_active(const std::vector<std::vector<double>>& a, const std::vector<double>& y,
                  const std::vector<int>& active, std::vector<double>* x) {
  const int rows = static_cast<int>(a.size()), k = static_cast<int>(active.size());
  if (rows < k) return false;
  std::vector<double> columns(static_cast<size_t>(rows) * static_cast<size_t>(k)), norms(static_cast<size_t>(k));
  for (int j = 0; j < k; ++j) {
    double sq = 0;
    for (int r = 0; r < rows; ++r) sq += a[r][static_cast<size_t>(active[j])] * a[r][static_cast<size_t>(active[j])];
    norms[j] = std::sqrt(sq);
    if (!(norms[j] > 0) || !std::isfinite(norms[j])) return false;
    for (int r = 0; r < rows; ++r)
      columns[static_cast<size_t>(j) * rows + r] = a[r][static_cast<size_t>(active[j])] / norms[j];
  }
  std::vector<double> rhs(y);
  std::vector<int> pivots(static_cast<size_t>(k), 0);
  const int one = 1;
  const double rcond = 1e-9;
  int rank = 0, info = 0, lwork = -1;
  double size = 0;
  dgelsy_(&rows, &k, &one, columns.data(), &rows, rhs.data(), &rows, pivots.data(), &rcond, &rank, &size, &lwork,
          &info);
  lwork = std::max(1, static_cast<int>(size));
  std::vector<double> work(static_cast<size_t>(lwork));
  dgelsy_(&rows, &k, &one, columns.data(), &rows, rhs.data(), &rows, pivots.data(), &rcond, &rank, work.data(),
          &lwork, &info);
  if (info != 0 || rank < k) return false;
  x->assign(a[0].size(), 0.0);
  for (int j = 0; j < k; ++j) (*x)[static_cast<size_t>(active[j])] = rhs[static_cast<size_t>(j)] / norms[j];
  return true;
}

}  // namespace

std::vector<double> nonnegative_least_squares(const std::vector<std::vector<double>>& a, const std::vector<double>& y) {
  PF_CHECK_ARG(!a.empty() && a.size() == y.size(), "nonnegative_least_squares: ", a.size(), " rows for ", y.size(),
               " observations");
  const size_t n = a[0].size();
  PF_CHECK_ARG(n >= 1 && n <= 8, "nonnegative_least_squares: ", n, " columns (1 to 8)");
  for (const auto& row : a) PF_CHECK_ARG(row.size() == n, "nonnegative_least_squares: rows of unequal length");
  std::vector<double> best(n, 0.0);
  double best_error = 0;
  for (double v : y) best_error += v * v;
  int best_count = 0;
  for (unsigned mask = 1; mask < (1u << n); ++mask) {
    std::vector<int> active;
    for (size_t j = 0; j < n; ++j)
      if (mask & (1u << j)) active.push_back(static_cast<int>(j));
    std::vector<double> x;
    if (!solve_active(a, y, active, &x)) continue;
    bool feasible = true;
    for (double v : x) feasible = feasible && v >= 0 && std::isfinite(v);
    if (!feasible) continue;
    double error = 0;
    for (size_t r = 0; r < a.size(); ++r) {
      double fit = 0;
      for (size_t j = 0; j < n; ++j) fit += a[r][j] * x[j];
      error += (fit - y[r]) * (fit - y[r]);
    }
    const int count = static_cast<int>(active.size());
    // A solution with more terms must explain clearly more (1e-9 relative) to win.
    const double margin = 1e-9 * (best_error + 1e-30);
    if (error < best_error - margin || (std::fabs(error - best_error) <= margin && count < best_count)) {
      best = x;
      best_error = error;
      best_count = count;
    }
  }
  return best;
}

OverheadFit fit_overheads(const std::vector<double>& measured,
                          const std::function<double(int run, double per_action, double per_transfer)>& simulate,
                          double noise_variance) {
  PF_CHECK_ARG(!measured.empty(), "fit_overheads: no runs");
  const int n = static_cast<int>(measured.size());
  OverheadFit fit;
  double a = 0, c = 0;
  for (int iteration = 0; iteration < 8; ++iteration) {
    // The step of the finite difference: a tenth of a millisecond, or a tenth of the estimate.
    const double ha = std::max(1e-4, 0.1 * a), hc = std::max(1e-4, 0.1 * c);
    std::vector<std::vector<double>> rows;
    std::vector<double> y;
    for (int i = 0; i < n; ++i) {
      const double base = simulate(i, a, c);
      const double da = (simulate(i, a + ha, c) - base) / ha;
      const double dc = (simulate(i, a, c + hc) - base) / hc;
      rows.push_back({da, dc, 1.0});
      y.push_back(measured[static_cast<size_t>(i)] - base + a * da + c * dc);
    }
    const std::vector<double> x = nonnegative_least_squares(rows, y);
    const bool settled = std::fabs(x[0] - a) <= 1e-7 + 1e-3 * a && std::fabs(x[1] - c) <= 1e-7 + 1e-3 * c;
    a = x[0];
    c = x[1];
    fit.per_step_s = x[2];
    if (settled) break;
  }
  // The per-step constant that goes with (a, c): the mean of what is left, >= 0; and the residual
  // sum of squares.
  auto finish = [&](double per_action, double per_transfer, double* per_step) {
    std::vector<double> simulated(static_cast<size_t>(n));
    double left = 0;
    for (int i = 0; i < n; ++i) {
      simulated[static_cast<size_t>(i)] = simulate(i, per_action, per_transfer);
      left += measured[static_cast<size_t>(i)] - simulated[static_cast<size_t>(i)];
    }
    *per_step = std::max(0.0, left / n);
    double sq = 0;
    for (int i = 0; i < n; ++i) {
      const double r = simulated[static_cast<size_t>(i)] + *per_step - measured[static_cast<size_t>(i)];
      sq += r * r;
    }
    return sq;
  };
  double sq = finish(a, c, &fit.per_step_s);
  fit.per_action_s = a;
  fit.per_transfer_s = c;
  if (noise_variance > 0 && (a > 0 || c > 0)) {
    double per_step = 0;
    const double plain = finish(0, 0, &per_step);
    if (plain - sq <= 2 * 2 * noise_variance) {  // Mallows' Cp: 2 terms, 2 sigma^2 each
      fit.per_action_s = fit.per_transfer_s = 0;
      fit.per_step_s = per_step;
      fit.noise_only = true;
      sq = plain;
    }
  }
  fit.rms_residual_s = std::sqrt(sq / n);
  return fit;
}

double median_variance(const std::vector<double>& samples) {
  const size_t n = samples.size();
  if (n < 2) return 0;
  double mean = 0;
  for (double x : samples) mean += x / static_cast<double>(n);
  double sq = 0;
  for (double x : samples) sq += (x - mean) * (x - mean);
  const double pi = 3.14159265358979323846;
  return pi / 2 * sq / static_cast<double>(n - 1) / static_cast<double>(n);
}

}  // namespace pf::plan

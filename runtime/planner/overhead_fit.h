// The calibration's fit (calibration.h): the runtime's overheads that make the simulated makespans
// of a few measured runs their measured makespans, by least squares with every overhead >= 0.
//
// Each run i is a schedule the simulator times as simulate(i, per_action, per_transfer): every
// F, B and W costs per_action more, every cross-rank dependency per_transfer more. The measured
// makespan is modelled as simulate(i, a, c) + s (s: a per-step constant). The simulated makespan
// is piecewise linear in a and c (the critical path can change), so the fit is Gauss-Newton:
// linearise around the current (a, c) by finite differences, solve the non-negative least squares,
// repeat. With fewer runs than overheads, or runs whose action and transfer counts are
// proportional, the smallest-residual solution with the fewest non-zero terms wins.
//
// Measured makespans are noisy (a median of a few steps on a shared machine varies by several
// percent), and with overheads of microseconds the least squares fits that noise: a "per
// transfer" of a millisecond that predicts many-transfer schedules far too slow. Given the
// measurements' noise variance, the overheads are kept only when they explain more than noise
// would (Mallows' Cp: each of the two terms must lower the residual sum of squares by more than
// twice the variance); else both are 0 and only the per-step constant remains.
#pragma once

#include <functional>
#include <vector>

namespace pf::plan {

// x >= 0 minimising |A x - y|^2, for a few columns: every subset of active columns is solved by
// LAPACK's dgelsy (2^columns small solves, exact for the <= 8 columns taken) and the best feasible
// one kept. A has one row per observation; ties go to the fewer non-zero terms.
std::vector<double> nonnegative_least_squares(const std::vector<std::vector<double>>& a, const std::vector<double>& y);

struct OverheadFit {
  double per_action_s = 0;    // a: per F, B and W
  double per_transfer_s = 0;  // c: per cross-rank activation or gradient
  double per_step_s = 0;      // s
  double rms_residual_s = 0;  // of the measured makespans against the fitted simulation
  bool noise_only = false;    // the overheads explained no more than noise: set to 0
};

// measured[i]: run i's measured makespan (seconds). simulate(i, a, c): its simulated makespan
// with those overheads. noise_variance: of each measured makespan (s^2; 0: unknown, the overheads
// are kept whatever they explain). Throws kInvalidArgument for no runs.
OverheadFit fit_overheads(const std::vector<double>& measured,
                          const std::function<double(int run, double per_action, double per_transfer)>& simulate,
                          double noise_variance = 0);

// The variance of the median of `samples` as an estimate of their centre: pi / 2 times their
// sample variance over their count (normal noise); 0 for fewer than 2.
double median_variance(const std::vector<double>& samples);

}  // namespace pf::plan

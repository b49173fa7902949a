// runtime/glm: dual coordinate descent reaches the optimum that independent primal methods written
// here find (ridge: the normal equations; logistic: Newton's method; hinge: subgradient descent,
// which the solver must not do worse than), with every solver and thread count, dense and sparse;
// SySCD is bitwise deterministic; the libsvm reader names the line and column of bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/glm/glm.h"
#include "runtime/glm/libsvm.h"

namespace pf::glm {
namespace {

constexpr int64_t kRows = 400, kCols = 8;

// n x d uniform values in [-1, 1] (a share `zeros` of them 0), labels from a planted w* with noise:
// ±1 for classification, real for regression. Stored sparse (CSR).
GlmData synthetic(bool classification, double zeros = 0.0, uint64_t seed = 3) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0), coin(0.0, 1.0);
  std::vector<double> planted(kCols);
  for (double& v : planted) v = 2 * u(rng);
  GlmData d;
  d.rows = kRows;
  d.cols = kCols;
  d.name = "synthetic";
  d.row_start.push_back(0);
  for (int64_t i = 0; i < kRows; ++i) {
    double z = 0;
    for (int64_t j = 0; j < kCols; ++j) {
      const float x = static_cast<float>(u(rng));
      if (coin(rng) < zeros) continue;
      d.indices.push_back(static_cast<uint32_t>(j));
      d.values.push_back(x);
      z += x * planted[static_cast<size_t>(j)];
    }
    d.row_start.push_back(static_cast<int64_t>(d.values.size()));
    const double noisy = z + 0.5 * u(rng);
    d.labels.push_back(classification ? (noisy > 0 ? 1.0 : -1.0) : noisy);
  }
  return d;
}

std::vector<std::vector<double>> dense_rows(const GlmData& d) {
  const GlmData dense = to_dense(d);
  std::vector<std::vector<double>> x(static_cast<size_t>(d.rows), std::vector<double>(static_cast<size_t>(d.cols)));
  for (int64_t i = 0; i < d.rows; ++i)
    for (int64_t j = 0; j < d.cols; ++j) x[i][j] = dense.values[static_cast<size_t>(i * d.cols + j)];
  return x;
}

// Solves A w = b (A symmetric positive definite) by Gaussian elimination.
std::vector<double> solve(std::vector<std::vector<double>> a, std::vector<double> b) {
  const size_t n = b.size();
  for (size_t k = 0; k < n; ++k)
    for (size_t i = k + 1; i < n; ++i) {
      const double f = a[i][k] / a[k][k];
      for (size_t j = k; j < n; ++j) a[i][j] -= f * a[k][j];
      b[i] -= f * b[k];
    }
  std::vector<double> w(n);
  for (size_t k = n; k-- > 0;) {
    double s = b[k];
    for (size_t j = k + 1; j < n; ++j) s -= a[k][j] * w[j];
    w[k] = s / a[k][k];
  }
  return w;
}

// Ridge: (XᵀX/n + λI) w = Xᵀy/n.
std::vector<double> ridge_reference(const GlmData& d, double lambda) {
  const auto x = dense_rows(d);
  std::vector<std::vector<double>> a(kCols, std::vector<double>(kCols, 0.0));
  std::vector<double> b(kCols, 0.0);
  for (int64_t i = 0; i < d.rows; ++i)
    for (int64_t j = 0; j < kCols; ++j) {
      b[j] += x[i][j] * d.labels[i] / d.rows;
      for (int64_t k = 0; k < kCols; ++k) a[j][k] += x[i][j] * x[i][k] / d.rows;
    }
  for (int64_t j = 0; j < kCols; ++j) a[j][j] += lambda;
  return solve(a, b);
}

// Logistic regression by Newton's method on the primal.
std::vector<double> logistic_reference(const GlmData& d, double lambda) {
  const auto x = dense_rows(d);
  std::vector<double> w(kCols, 0.0);
  for (int it = 0; it < 50; ++it) {
    std::vector<std::vector<double>> h(kCols, std::vector<double>(kCols, 0.0));
    std::vector<double> g(kCols, 0.0);
    for (int64_t i = 0; i < d.rows; ++i) {
      double z = 0;
      for (int64_t j = 0; j < kCols; ++j) z += x[i][j] * w[j];
      const double y = d.labels[i], s = 1.0 / (1.0 + std::exp(y * z));  // σ(-y z)
      for (int64_t j = 0; j < kCols; ++j) {
        g[j] -= y * s * x[i][j] / d.rows;
        for (int64_t k = 0; k < kCols; ++k) h[j][k] += s * (1 - s) * x[i][j] * x[i][k] / d.rows;
      }
    }
    for (int64_t j = 0; j < kCols; ++j) {
      g[j] += lambda * w[j];
      h[j][j] += lambda;
    }
    const std::vector<double> step = solve(h, g);
    for (int64_t j = 0; j < kCols; ++j) w[j] -= step[j];
  }
  return w;
}

// The linear SVM by subgradient descent on the primal with averaged iterates (Pegasos' step
// 1/(λt)): an upper bound on the optimum that the dual solver must reach.
std::vector<double> svm_reference(const GlmData& d, double lambda) {
  const auto x = dense_rows(d);
  std::vector<double> w(kCols, 0.0), average(kCols, 0.0);
  const int steps = 20000;
  for (int t = 1; t <= steps; ++t) {
    std::vector<double> g(kCols, 0.0);
    for (int64_t i = 0; i < d.rows; ++i) {
      double z = 0;
      for (int64_t j = 0; j < kCols; ++j) z += x[i][j] * w[j];
      if (d.labels[i] * z < 1)
        for (int64_t j = 0; j < kCols; ++j) g[j] -= d.labels[i] * x[i][j] / d.rows;
    }
    for (int64_t j = 0; j < kCols; ++j) w[j] -= (g[j] + lambda * w[j]) / (lambda * t);
    if (t > steps / 2)
      for (int64_t j = 0; j < kCols; ++j) average[j] += w[j] / (steps / 2);
  }
  return average;
}

struct SolverCase {
  Solver solver;
  int threads;
};
const SolverCase kSolvers[] = {{Solver::kSequential, 1}, {Solver::kAsync, 2}, {Solver::kSyscd, 1},
                               {Solver::kSyscd, 2},      {Solver::kSyscd, 3}};

GlmOptions options(Loss loss, const SolverCase& c, double lambda = 1e-2) {
  GlmOptions o;
  o.loss = loss;
  o.lambda = lambda;
  o.solver = c.solver;
  o.threads = c.threads;
  o.tol = 1e-10;
  o.seed = 11;
  o.bucket_rows = 16;
  return o;
}

double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

TEST(Glm, RidgeReachesTheNormalEquationsSolution) {
  for (const double zeros : {0.0, 0.5}) {
    const GlmData data = synthetic(false, zeros);
    const std::vector<double> want = ridge_reference(data, 1e-2);
    const double optimum = primal_objective(data, Loss::kSquared, 1e-2, want);
    for (const GlmData& stored : {data, to_dense(data)}) {
      for (const SolverCase& c : kSolvers) {
        const GlmResult r = train_glm(stored, options(Loss::kSquared, c));
        SCOPED_TRACE(std::string(solver_name(c.solver)) + " x" + std::to_string(c.threads) +
                     (stored.dense ? " dense" : " sparse") + " zeros " + std::to_string(zeros));
        EXPECT_TRUE(r.converged) << r.epochs << " epochs, gap " << r.duality_gap;
        // λ-strong convexity: ‖w - w*‖² <= 2 gap / λ.
        EXPECT_LE(max_difference(r.weights, want), std::sqrt(2 * std::max(0.0, r.duality_gap) / 1e-2) + 1e-12);
        EXPECT_NEAR(r.objective, optimum, 1e-9 * optimum);
        EXPECT_GE(r.duality_gap, -1e-12);
        EXPECT_LE(r.dual_objective, optimum + 1e-12);
      }
    }
  }
}

TEST(Glm, LogisticRegressionReachesNewtonsOptimum) {
  const GlmData data = synthetic(true, 0.3);
  const std::vector<double> want = logistic_reference(data, 1e-2);
  const double optimum = primal_objective(data, Loss::kLogistic, 1e-2, want);
  for (const SolverCase& c : kSolvers) {
    const GlmResult r = train_glm(data, options(Loss::kLogistic, c));
    SCOPED_TRACE(std::string(solver_name(c.solver)) + " x" + std::to_string(c.threads));
    EXPECT_TRUE(r.converged) << r.epochs << " epochs, gap " << r.duality_gap;
    EXPECT_NEAR(r.objective, optimum, 1e-8 * optimum);
    EXPECT_LE(max_difference(r.weights, want), std::sqrt(2 * std::max(0.0, r.duality_gap) / 1e-2) + 1e-9);
    EXPECT_GT(r.accuracy, 0.8);
  }
}

TEST(Glm, TheSvmIsAtLeastAsGoodAsSubgradientDescentAndItsGapIsClosed) {
  const GlmData data = synthetic(true);
  const double bound = primal_objective(data, Loss::kHinge, 1e-2, svm_reference(data, 1e-2));
  for (const SolverCase& c : kSolvers) {
    GlmOptions o = options(Loss::kHinge, c);
    o.tol = 1e-8;  // the SVM's dual converges more slowly with more replicas (CoCoA's σ')
    const GlmResult r = train_glm(data, o);
    SCOPED_TRACE(std::string(solver_name(c.solver)) + " x" + std::to_string(c.threads));
    EXPECT_TRUE(r.converged) << r.epochs << " epochs, gap " << r.duality_gap;
    EXPECT_LE(r.objective, bound + r.duality_gap);  // P(w) - P* <= gap and P* <= bound
    EXPECT_GT(r.objective, bound - 1e-3) << "subgradient descent ended far from the optimum";
    EXPECT_NEAR(r.objective, primal_objective(data, Loss::kHinge, 1e-2, r.weights), 1e-12);
  }
}

// The elastic net (1/n) Σ loss + (λ/2)‖w‖² + μ‖w‖₁ by FISTA (accelerated proximal gradient) on
// the primal: the soft threshold of a gradient step, with Nesterov's momentum.
std::vector<double> elastic_net_reference(const GlmData& d, Loss loss, double lambda, double mu) {
  const auto x = dense_rows(d);
  // The step 1/L: L bounds the smooth part's curvature (the largest row norm² times the loss's
  // curvature bound, plus λ).
  double max_norm = 0;
  for (const auto& row : x) {
    double s = 0;
    for (double v : row) s += v * v;
    max_norm = std::max(max_norm, s);
  }
  const double step = 1.0 / ((loss == Loss::kLogistic ? 0.25 : 1.0) * max_norm + lambda);
  std::vector<double> w(kCols, 0.0), previous = w, y = w;
  double t = 1;
  for (int it = 0; it < 20000; ++it) {
    std::vector<double> g(kCols, 0.0);
    for (int64_t i = 0; i < d.rows; ++i) {
      double z = 0;
      for (int64_t j = 0; j < kCols; ++j) z += x[i][j] * y[j];
      const double l = d.labels[i];
      const double dz = loss == Loss::kSquared ? z - l : -l / (1.0 + std::exp(l * z));
      for (int64_t j = 0; j < kCols; ++j) g[j] += dz * x[i][j] / d.rows;
    }
    previous = w;
    for (int64_t j = 0; j < kCols; ++j) {
      const double v = y[j] - step * (g[j] + lambda * y[j]), k = step * mu;
      w[j] = v > k ? v - k : v < -k ? v + k : 0.0;
    }
    const double next = 0.5 * (1 + std::sqrt(1 + 4 * t * t));
    for (int64_t j = 0; j < kCols; ++j) y[j] = w[j] + (t - 1) / next * (w[j] - previous[j]);
    t = next;
  }
  return w;
}

int zeros_of(const std::vector<double>& w) {
  int n = 0;
  for (double v : w) n += v == 0.0;
  return n;
}

TEST(Glm, TheElasticNetReachesTheProximalGradientOptimum) {
  const double lambda = 1e-2;
  for (const Loss loss : {Loss::kSquared, Loss::kLogistic}) {
    const GlmData data = synthetic(loss != Loss::kSquared, 0.3);
    // The smallest μ of these that zeroes some weights but not most: the test must test L1.
    double mu = 0;
    std::vector<double> want;
    for (const double m : {0.02, 0.05, 0.1, 0.2, 0.3, 0.5}) {
      want = elastic_net_reference(data, loss, lambda, m);
      mu = m;
      if (zeros_of(want) >= 2) break;
    }
    ASSERT_GE(zeros_of(want), 2) << "no μ zeroes a weight";
    ASSERT_LE(zeros_of(want), kCols - 2) << "μ " << mu << " zeroes most weights";
    const double optimum = primal_objective(data, loss, lambda, want, mu);
    for (const GlmData& stored : {data, to_dense(data)}) {
      for (const SolverCase& c : kSolvers) {
        GlmOptions o = options(loss, c, lambda);
        o.l1 = mu;
        const GlmResult r = train_glm(stored, o);
        SCOPED_TRACE(std::string(loss_name(loss)) + " " + solver_name(c.solver) + " x" + std::to_string(c.threads) +
                     (stored.dense ? " dense" : " sparse"));
        EXPECT_TRUE(r.converged) << r.epochs << " epochs, gap " << r.duality_gap;
        EXPECT_GE(r.duality_gap, -1e-12);
        EXPECT_NEAR(r.objective, optimum, 1e-8 * optimum);
        EXPECT_NEAR(r.objective, primal_objective(stored, loss, lambda, r.weights, mu), 1e-12);
        EXPECT_LE(max_difference(r.weights, want), std::sqrt(2 * std::max(0.0, r.duality_gap) / lambda) + 1e-9);
        EXPECT_EQ(zeros_of(r.weights), zeros_of(want)) << "the soft threshold zeroes the same weights";
      }
    }
  }
  // The SVM too: its gap closes and P(w) is what the weights give.
  const GlmData data = synthetic(true);
  GlmOptions o = options(Loss::kHinge, {Solver::kSyscd, 2}, lambda);
  o.l1 = 0.05;
  o.tol = 1e-8;
  const GlmResult r = train_glm(data, o);
  EXPECT_TRUE(r.converged) << r.epochs << " epochs, gap " << r.duality_gap;
  EXPECT_NEAR(r.objective, primal_objective(data, Loss::kHinge, lambda, r.weights, o.l1), 1e-12);
  EXPECT_GT(zeros_of(train_glm(data, [&] { GlmOptions big = o; big.l1 = 0.3; return big; }()).weights), 0);
}

TEST(Glm, SyscdIsBitwiseDeterministicForASeedAndThreadCount) {
  const GlmData data = synthetic(true, 0.5);
  GlmOptions o = options(Loss::kLogistic, {Solver::kSyscd, 3});
  o.max_epochs = 7;
  const GlmResult a = train_glm(data, o), b = train_glm(data, o);
  EXPECT_EQ(a.weights, b.weights);
  EXPECT_EQ(a.epochs, 7);
  o.seed = 12;
  EXPECT_NE(train_glm(data, o).weights, a.weights) << "the seed does not change the order";
}

TEST(Glm, ClassLabelsAndBadOptionsAreNamed) {
  GlmData data = synthetic(true);
  for (double& y : data.labels) y = y > 0 ? 2.0 : 1.0;
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(message([&] { train_glm(data, GlmOptions()); }).find("row 1: label "), std::string::npos);
  EXPECT_EQ(to_signed_labels(data), (std::pair<double, double>{1.0, 2.0}));
  EXPECT_TRUE(train_glm(data, GlmOptions()).converged);
  data.labels[5] = 3.0;
  EXPECT_NE(message([&] { to_signed_labels(data); }).find("exactly two label values"), std::string::npos);

  GlmOptions o;
  o.lambda = 0;
  EXPECT_NE(message([&] { o.validate(); }).find("lambda must be > 0"), std::string::npos);
  o.l1 = 0.1;
  EXPECT_NE(message([&] { o.validate(); }).find("L1 alone has no dual for coordinate ascent"), std::string::npos);
  o = GlmOptions();
  o.l1 = -1;
  EXPECT_NE(message([&] { o.validate(); }).find("l1 must be >= 0"), std::string::npos);
  o = GlmOptions();
  o.solver = Solver::kSequential;
  o.threads = 2;
  EXPECT_NE(message([&] { o.validate(); }).find("sequential solver runs one thread"), std::string::npos);
  o = GlmOptions();
  o.tol = 0;
  EXPECT_NE(message([&] { o.validate(); }).find("tol must be in (0, 1)"), std::string::npos);
  EXPECT_NE(message([] { parse_solver("sycd"); }).find("did you mean 'syscd'"), std::string::npos);
  EXPECT_NE(message([] { parse_loss("log"); }).find("logistic, squared, hinge"), std::string::npos);
}

TEST(Libsvm, ParsesRowsIntoCsr) {
  const GlmData d = parse_libsvm("# a comment\n+1 1:0.5 3:-2\n\n-1 2:1e-3 # trailing\n0.25\n", "text");
  EXPECT_EQ(d.rows, 3);
  EXPECT_EQ(d.cols, 3);
  EXPECT_EQ(d.labels, (std::vector<double>{1, -1, 0.25}));
  EXPECT_EQ(d.row_start, (std::vector<int64_t>{0, 2, 3, 3}));
  EXPECT_EQ(d.indices, (std::vector<uint32_t>{0, 2, 1}));
  EXPECT_EQ(d.values, (std::vector<float>{0.5f, -2.0f, 1e-3f}));
  // FLT_MAX printed with 9 digits reads back above FLT_MAX, and still rounds to it.
  EXPECT_EQ(parse_libsvm("1 1:3.40282347e+38\n", "text").values[0], std::numeric_limits<float>::max());
  LibsvmOptions wide;
  wide.features = 10;
  EXPECT_EQ(parse_libsvm("1 2:1\n", "text", wide).cols, 10);
}

TEST(Libsvm, BadInputNamesTheLineAndColumn) {
  const auto message = [](const std::string& text, LibsvmOptions o = {}) {
    try {
      parse_libsvm(text, "data.svm", o);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(message("1 1:2\nx 1:2\n").find("data.svm: line 2, column 1: the label is not a finite number: 'x'"),
            std::string::npos)
      << message("1 1:2\nx 1:2\n");
  EXPECT_NE(message("1 1:2 1:3\n").find("line 1, column 7: feature 1 after feature 1"), std::string::npos)
      << message("1 1:2 1:3\n");
  EXPECT_NE(message("1 0:2\n").find("feature index '0' is not an integer"), std::string::npos);
  EXPECT_NE(message("1 2\n").find("expected <feature>:<value>, got '2'"), std::string::npos);
  EXPECT_NE(message("1 qid:3 1:2\n").find("qid fields"), std::string::npos);
  EXPECT_NE(message("1 1:nan\n").find("the value of feature 1 is not a finite number"), std::string::npos);
  EXPECT_NE(message("1 1:1e300\n").find("beyond float's range"), std::string::npos);
  EXPECT_NE(message("1 1:-3.4028236e38\n").find("beyond float's range"), std::string::npos);
  LibsvmOptions narrow;
  narrow.features = 2;
  EXPECT_NE(message("1 3:1\n", narrow).find("feature 3 is beyond the 2 features given"), std::string::npos);
  EXPECT_NE(message("# nothing\n\n").find("no examples"), std::string::npos);
  EXPECT_NE(message("1\n").find("no feature has a value"), std::string::npos);
}

}  // namespace
}  // namespace pf::glm

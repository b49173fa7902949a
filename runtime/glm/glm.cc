#include "runtime/glm/glm.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/core/limits.h"
#include "runtime/core/suggest.h"

namespace pf::glm {
namespace {

// The logistic step's Newton iteration stops when it moves b by at most this share of the
// distance to the nearer end of (0, 1): quadratic convergence has then made the last step far
// more precise. 1e-10 took 60% more time than 1e-6 for the same objective to 12 digits (50,000 x
// 500 sparse, 7 epochs either way).
constexpr double kNewtonTol = 1e-6;

const std::vector<std::pair<std::string, Loss>>& losses() {
  static const std::vector<std::pair<std::string, Loss>> v = {
      {"logistic", Loss::kLogistic}, {"squared", Loss::kSquared}, {"hinge", Loss::kHinge}};
  return v;
}
const std::vector<std::pair<std::string, Solver>>& solvers() {
  static const std::vector<std::pair<std::string, Solver>> v = {
      {"sequential", Solver::kSequential}, {"async", Solver::kAsync}, {"syscd", Solver::kSyscd}};
  return v;
}

template <typename T>
T parse_name(const std::vector<std::pair<std::string, T>>& table, const std::string& name, const char* what) {
  std::vector<std::string> names;
  for (const auto& [n, v] : table) {
    if (n == name) return v;
    names.push_back(n);
  }
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  fail(ErrorCode::kInvalidArgument, what, " '", name, "' is not one of ", list, did_you_mean(name, names));
}

// One example's stored values: dense rows have no indices.
struct Row {
  const float* values;
  const uint32_t* indices;  // null for a dense row
  int64_t count;
};

Row row_of(const GlmData& d, int64_t i) {
  if (d.dense) return {d.values.data() + i * d.cols, nullptr, d.cols};
  const int64_t b = d.row_start[static_cast<size_t>(i)];
  return {d.values.data() + b, d.indices.data() + b, d.row_start[static_cast<size_t>(i) + 1] - b};
}

// xᵀw, in a fixed order of eight partial sums (vectorised for dense rows).
double dot(const Row& r, const double* w) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  if (r.indices == nullptr) {
    for (; k + 8 <= r.count; k += 8)
      for (int l = 0; l < 8; ++l) acc[l] += static_cast<double>(r.values[k + l]) * w[k + l];
    for (; k < r.count; ++k) acc[0] += static_cast<double>(r.values[k]) * w[k];
  } else {
    for (; k + 4 <= r.count; k += 4)
      for (int l = 0; l < 4; ++l) acc[l] += static_cast<double>(r.values[k + l]) * w[r.indices[k + l]];
    for (; k < r.count; ++k) acc[0] += static_cast<double>(r.values[k]) * w[r.indices[k]];
  }
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// w += a x.
void axpy(const Row& r, double a, double* w) {
  if (r.indices == nullptr) {
    for (int64_t k = 0; k < r.count; ++k) w[k] += a * static_cast<double>(r.values[k]);
  } else {
    for (int64_t k = 0; k < r.count; ++k) w[r.indices[k]] += a * static_cast<double>(r.values[k]);
  }
}

// The same on a w that other threads update at once (the async solver): relaxed atomic loads and
// stores of each element, no lock and no read-modify-write, as PASSCoDe-Wild does.
double load(const double* p) {
  double v;
  __atomic_load(p, &v, __ATOMIC_RELAXED);
  return v;
}
void store(double* p, double v) { __atomic_store(p, &v, __ATOMIC_RELAXED); }

double dot_shared(const Row& r, const double* w) {
  double acc[4] = {0, 0, 0, 0};
  for (int64_t k = 0; k < r.count; ++k)
    acc[k & 3] += static_cast<double>(r.values[k]) * load(w + (r.indices ? r.indices[k] : k));
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}
void axpy_shared(const Row& r, double a, double* w) {
  for (int64_t k = 0; k < r.count; ++k) {
    double* p = w + (r.indices ? r.indices[k] : k);
    store(p, load(p) + a * static_cast<double>(r.values[k]));
  }
}

// The soft threshold sign(v) max(|v| - k, 0): w of the elastic net's v (k = μ/λ).
double soft(double v, double k) { return v > k ? v - k : v < -k ? v + k : 0.0; }

double primal_loss(Loss loss, double y, double z) {
  switch (loss) {
    case Loss::kLogistic: {
      const double t = -y * z;  // log(1 + e^t), without overflow
      return t > 0 ? t + std::log1p(std::exp(-t)) : std::log1p(std::exp(t));
    }
    case Loss::kSquared: return 0.5 * (y - z) * (y - z);
    case Loss::kHinge: return std::max(0.0, 1.0 - y * z);
  }
  return 0;
}

// -loss*(-α): the example's term of n·D(α) besides the regulariser.
double dual_term(Loss loss, double y, double alpha) {
  switch (loss) {
    case Loss::kLogistic: {
      const double b = std::clamp(y * alpha, 0.0, 1.0);
      const double h0 = b > 0 ? b * std::log(b) : 0.0, h1 = b < 1 ? (1 - b) * std::log1p(-b) : 0.0;
      return -(h0 + h1);
    }
    case Loss::kSquared: return alpha * y - 0.5 * alpha * alpha;
    case Loss::kHinge: return alpha * y;
  }
  return 0;
}

// The step δ of coordinate α that maximises the dual along it, for the margin z = xᵀv of the view
// v the solver reads and q = σ'‖x‖²/(λn).
double coordinate_step(Loss loss, double y, double z, double alpha, double q) {
  switch (loss) {
    case Loss::kSquared: return (y - z - alpha) / (1.0 + q);
    case Loss::kHinge: {
      const double b = q > 0 ? std::clamp(y * alpha + (1.0 - y * z) / q, 0.0, 1.0) : 1.0;
      return y * b - alpha;
    }
    case Loss::kLogistic: {
      // b = yα in (0, 1) solves log((1 - b) / b) - y z - q (b - b0) = 0, a strictly decreasing
      // function of b: Newton's method kept inside the bracket, bisection where it would leave it.
      const double b0 = std::clamp(y * alpha, 0.0, 1.0);
      double lo = 0.0, hi = 1.0, b = std::clamp(b0, 1e-12, 1.0 - 1e-12);
      for (int it = 0; it < 60; ++it) {
        const double g = std::log((1.0 - b) / b) - y * z - q * (b - b0);
        if (g > 0) lo = b;
        else hi = b;
        const double step = g / (1.0 / (b * (1.0 - b)) + q);  // -g / g'
        double next = b + step;
        if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);
        const bool done = std::fabs(next - b) <= kNewtonTol * std::min(next, 1.0 - next);
        b = next;
        if (done) break;
      }
      return y * b - alpha;
    }
  }
  return 0;
}

// Runs fn(t) for t in [0, threads) on `threads` threads (t = 0 on the caller) and rethrows the
// first failure.
template <typename Fn>
void run_threads(int threads, const Fn& fn) {
  if (threads == 1) {
    fn(0);
    return;
  }
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t)
    pool.emplace_back([&, t] {
      try {
        fn(t);
      } catch (...) {
        errors[static_cast<size_t>(t)] = std::current_exception();
      }
    });
  try {
    fn(0);
  } catch (...) {
    errors[0] = std::current_exception();
  }
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

// [begin, end) of part t of n split into `parts`.
std::pair<int64_t, int64_t> part_of(int64_t n, int parts, int t) {
  return {n * t / parts, n * (t + 1) / parts};
}

class DualSolver {
 public:
  DualSolver(const GlmData& data, const GlmOptions& o)
      : d_(data), o_(o), n_(data.rows), scale_(1.0 / (o.lambda * static_cast<double>(data.rows))),
        kappa_(o.l1 / o.lambda), alpha_(static_cast<size_t>(data.rows), 0.0), v_(static_cast<size_t>(data.cols), 0.0),
        q_(static_cast<size_t>(data.rows)), engine_(o.seed) {
    if (l1()) w_.assign(v_.size(), 0.0);
    for (int64_t i = 0; i < n_; ++i) {
      const Row r = row_of(d_, i);
      double s = 0;
      for (int64_t k = 0; k < r.count; ++k) s += static_cast<double>(r.values[k]) * r.values[k];
      q_[static_cast<size_t>(i)] = s * scale_;
    }
    threads_ = o.solver == Solver::kSequential ? 1 : o.threads;
    if (o.solver == Solver::kSyscd) {
      int64_t b = o.bucket_rows;
      // About 1 KiB of values per bucket: a few cache lines of short sparse rows read together, and
      // no more than two or three long dense rows (each already a contiguous read), because larger
      // buckets slow convergence (the same rows meet in every epoch): at 100 dense features,
      // buckets of 40 rows took 783 epochs where single rows took 268 (logistic, λ = 1e-4).
      if (b == 0) b = std::max<int64_t>(1, 256 / std::max<int64_t>(1, data.nonzeros() / std::max<int64_t>(1, n_)));
      bucket_rows_ = b;
    }
  }

  GlmResult solve() {
    const auto start = std::chrono::steady_clock::now();
    const auto since_start = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    GlmResult result;
    std::vector<double> previous;
    int since_check = 0;
    for (int epoch = 1; epoch <= o_.max_epochs; ++epoch) {
      previous = v_;
      switch (o_.solver) {
        case Solver::kSequential: sequential_epoch(); break;
        case Solver::kAsync: async_epoch(); break;
        case Solver::kSyscd: syscd_epoch(epoch); break;
      }
      result.epochs = epoch;
      // The gap costs a pass over the data: computed once w has nearly stopped moving (relative
      // change below sqrt(tol)), at least every 10 epochs, and after the last.
      double change = 0, norm = 0;
      for (size_t j = 0; j < v_.size(); ++j) {
        change += (v_[j] - previous[j]) * (v_[j] - previous[j]);
        norm += v_[j] * v_[j];
      }
      ++since_check;
      if (change > o_.tol * norm && since_check < 10 && epoch < o_.max_epochs) continue;
      since_check = 0;
      // The async solver's races lose some updates of w (as PASSCoDe-Wild's do): w is made
      // w(α) = (1/(λn)) Σ αᵢ xᵢ again before the gap, which certifies only that pair.
      if (o_.solver == Solver::kAsync) resync_w();
      const Objectives obj = objectives();
      result.history.push_back({epoch, since_start(), obj.primal, obj.primal - obj.dual});
      if (obj.primal - obj.dual <= o_.tol * std::fabs(obj.primal)) {
        result.converged = true;
        break;
      }
    }
    if (o_.solver == Solver::kAsync) resync_w();
    result.seconds = since_start();
    const Objectives obj = objectives();
    result.weights = l1() ? w_ : v_;
    result.objective = obj.primal;
    result.dual_objective = obj.dual;
    result.duality_gap = obj.primal - obj.dual;
    result.accuracy = o_.loss == Loss::kSquared ? std::numeric_limits<double>::quiet_NaN()
                                                : static_cast<double>(obj.correct) / static_cast<double>(n_);
    return result;
  }

 private:
  struct Objectives {
    double primal = 0, dual = 0;
    int64_t correct = 0;
  };

  double label(int64_t i) const { return d_.labels[static_cast<size_t>(i)]; }
  bool l1() const { return o_.l1 > 0; }

  // What a thread reads and updates: v and the weights w = soft(v) (one array without L1).
  struct View {
    double* v;
    double* w;
  };
  View view_of(std::vector<double>& v, std::vector<double>& w) { return {v.data(), l1() ? w.data() : v.data()}; }

  // w = soft(v) on the features of row r (after they changed in v).
  void threshold(const Row& r, const View& view) const {
    if (r.indices == nullptr) {
      for (int64_t k = 0; k < r.count; ++k) view.w[k] = soft(view.v[k], kappa_);
    } else {
      for (int64_t k = 0; k < r.count; ++k) view.w[r.indices[k]] = soft(view.v[r.indices[k]], kappa_);
    }
  }
  void threshold_all() {
    if (l1())
      for (size_t j = 0; j < v_.size(); ++j) w_[j] = soft(v_[j], kappa_);
  }

  // The step of αᵢ is the same closed form as without L1 (prox-SDCA): the margin reads w, the
  // change goes to v, and q bounds the curvature because soft() is 1-Lipschitz.
  void update(int64_t i, const View& view, double sigma) {
    const Row r = row_of(d_, i);
    double& a = alpha_[static_cast<size_t>(i)];
    const double step = coordinate_step(o_.loss, label(i), dot(r, view.w), a, sigma * q_[static_cast<size_t>(i)]);
    if (step == 0) return;
    a += step;
    axpy(r, sigma * step * scale_, view.v);
    if (l1()) threshold(r, view);
  }

  std::vector<int64_t> shuffled(int64_t n) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t{0});
    std::shuffle(order.begin(), order.end(), engine_);
    return order;
  }

  // Asks for the first cache lines of example i's values (and indices) ahead of its update: a
  // random order visits the rows out of memory order.
  void prefetch(int64_t i) const {
    const Row r = row_of(d_, i);
    const char* v = reinterpret_cast<const char*>(r.values);
    for (int64_t b = 0; b < std::min<int64_t>(r.count * 4, 512); b += 64) __builtin_prefetch(v + b);
    if (r.indices != nullptr) __builtin_prefetch(r.indices);
  }

  void sequential_epoch() {
    const std::vector<int64_t> order = shuffled(n_);
    for (size_t k = 0; k < order.size(); ++k) {
      if (k + 2 < order.size()) prefetch(order[k + 2]);
      update(order[k], view_of(v_, w_), 1.0);
    }
  }

  void async_epoch() {
    const std::vector<int64_t> order = shuffled(n_);
    const View view = view_of(v_, w_);
    run_threads(threads_, [&](int t) {
      const auto [begin, end] = part_of(n_, threads_, t);
      for (int64_t k = begin; k < end; ++k) {
        const int64_t i = order[static_cast<size_t>(k)];
        if (k + 2 < end) prefetch(order[static_cast<size_t>(k) + 2]);
        const Row r = row_of(d_, i);
        double& a = alpha_[static_cast<size_t>(i)];
        const double step = coordinate_step(o_.loss, label(i), dot_shared(r, view.w), a, q_[static_cast<size_t>(i)]);
        if (step == 0) continue;
        a += step;
        axpy_shared(r, step * scale_, view.v);
        if (!l1()) continue;
        for (int64_t k = 0; k < r.count; ++k) {
          const int64_t j = r.indices ? r.indices[k] : k;
          store(view.w + j, soft(load(view.v + j), kappa_));
        }
      }
    });
  }

  void syscd_epoch(int epoch) {
    const int64_t buckets = (n_ + bucket_rows_ - 1) / bucket_rows_;
    const std::vector<int64_t> order = shuffled(buckets);  // dealt to the threads anew each epoch
    const double sigma = threads_;                        // CoCoA's σ' for adding the replicas
    std::vector<std::vector<double>> replicas(static_cast<size_t>(threads_)), weights(static_cast<size_t>(threads_));
    run_threads(threads_, [&](int t) {
      std::vector<double>& replica = replicas[static_cast<size_t>(t)];
      replica = v_;
      if (l1()) weights[static_cast<size_t>(t)] = w_;
      const View view = view_of(replica, weights[static_cast<size_t>(t)]);
      std::mt19937_64 rng(o_.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch) * 1000003u +
                          static_cast<uint64_t>(t));
      std::vector<int64_t> rows;
      const auto [begin, end] = part_of(buckets, threads_, t);
      for (int64_t k = begin; k < end; ++k) {
        const int64_t first = order[static_cast<size_t>(k)] * bucket_rows_, last = std::min(n_, first + bucket_rows_);
        rows.resize(static_cast<size_t>(last - first));
        std::iota(rows.begin(), rows.end(), first);
        std::shuffle(rows.begin(), rows.end(), rng);
        for (int64_t i : rows) update(i, view, sigma);
      }
    });
    if (threads_ == 1) {
      v_ = std::move(replicas[0]);
      if (l1()) w_ = std::move(weights[0]);
      return;
    }
    // v += Σ_t (replica_t - v) / σ', in thread order (the same bits for a given seed and count).
    run_threads(threads_, [&](int t) {
      const auto [begin, end] = part_of(static_cast<int64_t>(v_.size()), threads_, t);
      for (int64_t j = begin; j < end; ++j) {
        const double base = v_[static_cast<size_t>(j)];
        double sum = base;
        for (const std::vector<double>& r : replicas) sum += (r[static_cast<size_t>(j)] - base) / sigma;
        v_[static_cast<size_t>(j)] = sum;
        if (l1()) w_[static_cast<size_t>(j)] = soft(sum, kappa_);
      }
    });
  }

  void resync_w() {
    std::vector<std::vector<double>> parts(static_cast<size_t>(threads_));
    run_threads(threads_, [&](int t) {
      std::vector<double>& part = parts[static_cast<size_t>(t)];
      part.assign(v_.size(), 0.0);
      const auto [begin, end] = part_of(n_, threads_, t);
      for (int64_t i = begin; i < end; ++i) axpy(row_of(d_, i), alpha_[static_cast<size_t>(i)] * scale_, part.data());
    });
    for (size_t j = 0; j < v_.size(); ++j) {
      double sum = 0;
      for (const std::vector<double>& part : parts) sum += part[j];
      v_[j] = sum;
    }
    threshold_all();
  }

  Objectives objectives() {
    struct Part {
      double loss = 0, dual = 0;
      int64_t correct = 0;
    };
    std::vector<Part> parts(static_cast<size_t>(threads_));
    const double* w = l1() ? w_.data() : v_.data();
    run_threads(threads_, [&](int t) {
      const auto [begin, end] = part_of(n_, threads_, t);
      Part& p = parts[static_cast<size_t>(t)];
      for (int64_t i = begin; i < end; ++i) {
        const double y = label(i), z = dot(row_of(d_, i), w);
        p.loss += primal_loss(o_.loss, y, z);
        p.dual += dual_term(o_.loss, y, alpha_[static_cast<size_t>(i)]);
        p.correct += y * z > 0 ? 1 : 0;
      }
    });
    Part sum;
    for (const Part& p : parts) {
      sum.loss += p.loss;
      sum.dual += p.dual;
      sum.correct += p.correct;
    }
    // With L1 the dual's regulariser is λ g*(v) = (λ/2) ‖soft(v)‖² = (λ/2) ‖w‖².
    double norm = 0, abs_sum = 0;
    for (size_t j = 0; j < v_.size(); ++j) {
      norm += w[j] * w[j];
      abs_sum += std::fabs(w[j]);
    }
    const double n = static_cast<double>(n_);
    return {sum.loss / n + 0.5 * o_.lambda * norm + o_.l1 * abs_sum, sum.dual / n - 0.5 * o_.lambda * norm,
            sum.correct};
  }

  const GlmData& d_;
  const GlmOptions& o_;
  const int64_t n_;
  const double scale_;  // 1 / (λn)
  const double kappa_;  // μ / λ: the soft threshold of w = soft(v)
  // v = (1/(λn)) Σ αᵢ xᵢ; w = soft(v) (empty without L1, where w is v).
  std::vector<double> alpha_, v_, w_, q_;
  std::mt19937_64 engine_;
  int threads_ = 1;
  int64_t bucket_rows_ = 1;
};

}  // namespace

const char* loss_name(Loss loss) {
  for (const auto& [n, v] : losses())
    if (v == loss) return n.c_str();
  return "?";
}
const char* solver_name(Solver solver) {
  for (const auto& [n, v] : solvers())
    if (v == solver) return n.c_str();
  return "?";
}
int default_threads(Solver solver) {
  return solver == Solver::kSequential ? 1 : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

Loss parse_loss(const std::string& name) { return parse_name(losses(), name, "loss"); }
Solver parse_solver(const std::string& name) { return parse_name(solvers(), name, "solver"); }

void GlmOptions::validate() const {
  PF_CHECK_ARG(std::isfinite(lambda) && lambda > 0, "lambda must be > 0 (the L2 regularisation), got ", lambda,
               lambda == 0 && l1 > 0 ? " (L1 alone has no dual for coordinate ascent: use a small lambda beside l1)"
                                     : "");
  PF_CHECK_ARG(std::isfinite(l1) && l1 >= 0, "l1 must be >= 0 (the L1 regularisation), got ", l1);
  PF_CHECK_ARG(threads >= 1 && threads <= 1024, "threads must be in [1, 1024], got ", threads);
  PF_CHECK_ARG(solver != Solver::kSequential || threads == 1, "threads is ", threads,
               " but the sequential solver runs one thread (solver async or syscd runs several)");
  PF_CHECK_ARG(std::isfinite(tol) && tol > 0 && tol < 1, "tol must be in (0, 1) (the relative duality gap), got ", tol);
  PF_CHECK_ARG(max_epochs >= 1, "max_epochs must be >= 1, got ", max_epochs);
  PF_CHECK_ARG(bucket_rows >= 0, "bucket_rows must be >= 0 (0 = about 1 KiB of values per bucket), got ", bucket_rows);
}

nlohmann::json GlmOptions::to_json() const {
  return {{"loss", loss_name(loss)}, {"lambda", lambda},       {"l1", l1}, {"solver", solver_name(solver)},
          {"threads", threads},      {"tol", tol},             {"max_epochs", max_epochs},
          {"seed", seed},            {"bucket_rows", bucket_rows}};
}

nlohmann::json GlmResult::to_json() const {
  nlohmann::json h = nlohmann::json::array();
  for (const GlmEpoch& e : history) h.push_back({{"epoch", e.epoch}, {"seconds", e.seconds}, {"objective", e.objective}, {"gap", e.gap}});
  nlohmann::json j = {{"objective", objective}, {"dual_objective", dual_objective}, {"duality_gap", duality_gap},
                      {"epochs", epochs},       {"converged", converged},          {"seconds", seconds},
                      {"history", h}};
  j["accuracy"] = std::isfinite(accuracy) ? nlohmann::json(accuracy) : nlohmann::json();
  return j;
}

GlmResult train_glm(const GlmData& data, const GlmOptions& options) {
  options.validate();
  check_glm_data(data);
  if (options.loss != Loss::kSquared)
    for (int64_t i = 0; i < data.rows; ++i)
      PF_CHECK_ARG(data.labels[static_cast<size_t>(i)] == 1.0 || data.labels[static_cast<size_t>(i)] == -1.0,
                   data.name, ": row ", i + 1, ": label ", data.labels[static_cast<size_t>(i)], " is not -1 or +1 (loss ",
                   loss_name(options.loss), " is a classifier's: label the two classes -1 and +1)");
  // w, its copy for the change test, a replica per thread; α, q and the order per example.
  const int64_t limit = limits::max_loaded_data_bytes();
  const double copies = options.l1 > 0 ? 2.0 * options.threads + 3 : options.threads + 2;  // L1: w beside v
  const double bytes = 8.0 * static_cast<double>(data.cols) * copies + 32.0 * static_cast<double>(data.rows);
  if (bytes > static_cast<double>(limit))
    fail(ErrorCode::kOutOfMemory, data.name, ": ", data.rows, " examples of ", data.cols, " features need about ",
         static_cast<int64_t>(bytes), " bytes of solver state (the weights once per thread), more than the ", limit,
         " this process may use (limits::max_loaded_data_bytes)");
  return DualSolver(data, options).solve();
}

double primal_objective(const GlmData& data, Loss loss, double lambda, const std::vector<double>& weights,
                        double l1) {
  PF_CHECK_ARG(static_cast<int64_t>(weights.size()) == data.cols, "weights: ", weights.size(), " for ", data.cols,
               " features");
  double sum = 0, norm = 0;
  for (int64_t i = 0; i < data.rows; ++i)
    sum += primal_loss(loss, data.labels[static_cast<size_t>(i)], dot(row_of(data, i), weights.data()));
  double abs_sum = 0;
  for (double v : weights) {
    norm += v * v;
    abs_sum += std::fabs(v);
  }
  return sum / static_cast<double>(data.rows) + 0.5 * lambda * norm + l1 * abs_sum;
}

std::pair<double, double> to_signed_labels(GlmData& data) {
  std::map<double, int64_t> seen;
  for (double y : data.labels) {
    seen[y] += 1;
    if (seen.size() > 2) break;
  }
  std::string values;
  for (const auto& [v, count] : seen) values += (values.empty() ? "" : ", ") + std::to_string(v);
  PF_CHECK_ARG(seen.size() == 2, data.name, ": a classifier needs exactly two label values, found ",
               seen.size() > 2 ? "more than two (" + values + ", ...)" : std::to_string(seen.size()) + " (" + values + ")");
  const double negative = seen.begin()->first, positive = seen.rbegin()->first;
  for (double& y : data.labels) y = y == positive ? 1.0 : -1.0;
  return {negative, positive};
}

}  // namespace pf::glm

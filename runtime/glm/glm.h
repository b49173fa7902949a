// Generalised linear models by coordinate descent on the dual (SDCA): logistic regression, ridge
// regression and the linear SVM, L2-regularised (plus L1: the elastic net), no intercept. The
// primal objective
//   P(w) = (1/n) Σᵢ loss(yᵢ, xᵢᵀw) + (λ/2) ‖w‖² + μ ‖w‖₁
// with loss logistic log(1 + exp(-y z)), squared ½ (y - z)², hinge max(0, 1 - y z) (y = ±1 for
// logistic and hinge). Each dual coordinate αᵢ belongs to example i; v = (1/(λn)) Σᵢ αᵢ xᵢ and
// w = soft(v, μ/λ), the soft threshold (w = v without L1: plain SDCA; with it prox-SDCA,
// Shalev-Shwartz and Zhang 2014, whose dual needs λ > 0: L1 alone has no dual to ascend). The
// duality gap P(w) - D(α) bounds the distance to the optimum and stops the solver.
//
// Three solvers (docs/GLM.md):
//   sequential  one thread, a fresh random order of the examples every epoch;
//   async       PASSCoDe-style: threads update the shared w without locks ("wild"), each on its
//               part of a fresh random order every epoch;
//   syscd       SySCD (Ioannou, Dünner, Kourtis, Parnell, arXiv 1811.01564): examples in buckets
//               of consecutive rows (cache-sized), buckets shuffled and dealt to the threads anew
//               every epoch (dynamic partitioning), each thread updating its own replica of w with
//               CoCoA's σ' = threads, the replicas' updates added at the end of the epoch. Bitwise
//               deterministic for a given seed and thread count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/glm/glm_data.h"

namespace pf::glm {

enum class Loss { kLogistic, kSquared, kHinge };
enum class Solver { kSequential, kAsync, kSyscd };

const char* loss_name(Loss loss);
const char* solver_name(Solver solver);
Loss parse_loss(const std::string& name);      // kInvalidArgument listing the names
Solver parse_solver(const std::string& name);  // kInvalidArgument listing the names
// The threads a solver runs when the caller gives none: 1 for sequential, every hardware thread
// for async and syscd.
int default_threads(Solver solver);

struct GlmOptions {
  Loss loss = Loss::kLogistic;
  double lambda = 1e-4;          // λ > 0
  double l1 = 0;                 // μ >= 0 (0: L2 only)
  Solver solver = Solver::kSyscd;
  int threads = 1;               // sequential: 1
  double tol = 1e-6;             // stop when the duality gap <= tol * |P(w)|
  int max_epochs = 1000;
  uint64_t seed = 0;             // the orders of the examples
  int64_t bucket_rows = 0;       // syscd: examples per bucket; 0 = about 1 KiB of values per bucket
  void validate() const;         // kInvalidArgument naming the field
  nlohmann::json to_json() const;
};

struct GlmEpoch {
  int epoch = 0;
  double seconds = 0;           // since the solver started
  double objective = 0, gap = 0;  // NaN for the epochs whose gap was not computed
};

struct GlmResult {
  std::vector<double> weights;  // w, [cols]
  double objective = 0;         // P(w)
  double dual_objective = 0;    // D(α)
  double duality_gap = 0;       // P(w) - D(α) >= 0 up to rounding
  int epochs = 0;
  bool converged = false;       // the gap reached tol before max_epochs
  double seconds = 0;           // the solver's wall time (the data already loaded)
  double accuracy = 0;          // logistic, hinge: share of examples with y xᵢᵀw > 0; squared: NaN
  std::vector<GlmEpoch> history;  // the epochs whose gap was computed
  nlohmann::json to_json() const;
};

// Checks the data (check_glm_data) and, for logistic and hinge, that every label is -1 or +1.
GlmResult train_glm(const GlmData& data, const GlmOptions& options);

// P(w) of `weights` on the data (what GlmResult::objective is).
double primal_objective(const GlmData& data, Loss loss, double lambda, const std::vector<double>& weights,
                        double l1 = 0);

// Classification labels as ±1: data with exactly two label values gets -1 for the smaller and +1
// for the larger (e.g. 0/1 or 1/2 files); kInvalidArgument naming the values otherwise. Returns
// the two original values {negative, positive}.
std::pair<double, double> to_signed_labels(GlmData& data);

}  // namespace pf::glm

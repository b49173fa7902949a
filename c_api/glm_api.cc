// pf_glm_*: linear models by parallel coordinate descent (runtime/glm) for C callers and the
// language bindings.
#include <cmath>
#include <memory>
#include <tuple>
#include <limits>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "c_api/guard.h"
#include "c_api/struct_io.h"
#include "runtime/core/error.h"
#include "runtime/core/limits.h"
#include "runtime/glm/glm.h"
#include "runtime/glm/libsvm.h"

struct pf_glm_model {
  pf::glm::GlmResult result;
  double negative_label = std::numeric_limits<double>::quiet_NaN();
  double positive_label = std::numeric_limits<double>::quiet_NaN();
  std::string json;  // what pf_glm_model_to_json returned last
};

namespace {

using pf::capi::guard;
using pf::capi::guard_void;
using pf::capi::require;

constexpr size_t kGlmOptionsV1Size = 56;  // 0.13: up to bucket_rows (0.15 added l1)
constexpr size_t kGlmResultV1Size = sizeof(pf_glm_result);
static_assert(sizeof(pf_glm_options) == 64 && kGlmResultV1Size == 80, "a struct layout changed");

pf_glm_options default_glm_options() {
  const pf::glm::GlmOptions d;
  pf_glm_options o{};
  o.struct_size = sizeof(pf_glm_options);
  o.loss = PF_GLM_LOGISTIC;
  o.lambda = d.lambda;
  o.solver = PF_GLM_SYSCD;
  o.threads = 0;
  o.tol = d.tol;
  o.max_epochs = d.max_epochs;
  o.seed = d.seed;
  o.bucket_rows = d.bucket_rows;
  o.l1 = d.l1;
  return o;
}

pf::glm::GlmOptions convert(const pf_glm_options* options) {
  const pf_glm_options o = options == nullptr ? default_glm_options()
                                              : pf::capi::read_struct(*options, kGlmOptionsV1Size, "options",
                                                                      "pf_glm_options", default_glm_options());
  pf::glm::GlmOptions g;
  switch (o.loss) {
    case PF_GLM_LOGISTIC: g.loss = pf::glm::Loss::kLogistic; break;
    case PF_GLM_SQUARED: g.loss = pf::glm::Loss::kSquared; break;
    case PF_GLM_HINGE: g.loss = pf::glm::Loss::kHinge; break;
    default:
      pf::fail(pf::ErrorCode::kInvalidArgument, "options->loss is ", o.loss,
               ", not a pf_glm_loss (PF_GLM_LOGISTIC, PF_GLM_SQUARED or PF_GLM_HINGE)");
  }
  switch (o.solver) {
    case PF_GLM_SYSCD: g.solver = pf::glm::Solver::kSyscd; break;
    case PF_GLM_SEQUENTIAL: g.solver = pf::glm::Solver::kSequential; break;
    case PF_GLM_ASYNC: g.solver = pf::glm::Solver::kAsync; break;
    default:
      pf::fail(pf::ErrorCode::kInvalidArgument, "options->solver is ", o.solver,
               ", not a pf_glm_solver (PF_GLM_SYSCD, PF_GLM_SEQUENTIAL or PF_GLM_ASYNC)");
  }
  PF_CHECK_ARG(o.threads >= 0, "options->threads is ", o.threads, ": expected >= 1 (0 = every hardware thread)");
  g.threads = o.threads > 0 ? o.threads : pf::glm::default_threads(g.solver);
  g.lambda = o.lambda;
  g.l1 = o.l1;
  g.tol = o.tol;
  g.max_epochs = o.max_epochs;
  g.seed = o.seed;
  g.bucket_rows = o.bucket_rows;
  try {
    g.validate();
  } catch (const pf::Error& e) {
    pf::fail(pf::ErrorCode::kInvalidArgument, "options->", e.what());
  }
  return g;
}

// The arrays as GlmData, sizes checked before anything is copied.
pf::glm::GlmData data_of(int64_t rows, int64_t cols, const int64_t* row_start, const uint32_t* indices,
                         const float* values, const double* labels) {
  PF_CHECK_ARG(rows >= 1, "rows is ", rows, ": expected >= 1 examples");
  PF_CHECK_ARG(cols >= 1 && cols <= std::numeric_limits<uint32_t>::max(), "cols is ", cols,
               ": expected d in [1, 4294967295] features");
  require(values, "values");
  require(labels, "labels");
  PF_CHECK_ARG((row_start == nullptr) == (indices == nullptr),
               "row_start and indices are both set (sparse, CSR) or both NULL (dense values)");
  pf::glm::GlmData d;
  d.rows = rows;
  d.cols = cols;
  d.name = "pf_glm_train data";
  const int64_t limit = pf::limits::max_loaded_data_bytes();
  if (row_start == nullptr) {
    PF_CHECK_ARG(rows <= limit / 4 / cols, "rows x cols = ", rows, " x ", cols, " dense values are more than the ",
                 limit, " bytes this process may load");
    d.dense = true;
    d.values.assign(values, values + rows * cols);
  } else {
    PF_CHECK_ARG(row_start[0] == 0, "row_start[0] is ", row_start[0], ": expected 0");
    const int64_t nnz = row_start[rows];
    PF_CHECK_ARG(nnz >= 0 && nnz <= limit / 8, "row_start[rows] is ", nnz, ": expected the stored values' count, at most ",
                 limit / 8);
    for (int64_t i = 0; i < rows; ++i)
      PF_CHECK_ARG(row_start[i] <= row_start[i + 1], "row_start[", i + 1, "] is ", row_start[i + 1], ", below row_start[", i,
                   "] = ", row_start[i]);
    d.row_start.assign(row_start, row_start + rows + 1);
    d.indices.assign(indices, indices + nnz);
    d.values.assign(values, values + nnz);
  }
  d.labels.assign(labels, labels + rows);
  return d;
}

}  // namespace

void pf_glm_options_init(pf_glm_options* options) {
  if (options != nullptr) *options = default_glm_options();
}

pf_status* pf_glm_train(int64_t rows, int64_t cols, const int64_t* row_start, const uint32_t* indices,
                        const float* values, const double* labels, const pf_glm_options* options,
                        pf_glm_model** out) {
  return guard(__func__, [&] {
    require(out, "out");
    const pf::glm::GlmOptions o = convert(options);
    const pf::glm::GlmData data = data_of(rows, cols, row_start, indices, values, labels);
    auto model = std::make_unique<pf_glm_model>();
    model->result = pf::glm::train_glm(data, o);
    *out = model.release();
  });
}

pf_status* pf_glm_train_libsvm(const char* path, int64_t features, const pf_glm_options* options,
                               pf_glm_model** out) {
  return guard(__func__, [&] {
    require(path, "path");
    require(out, "out");
    PF_CHECK_ARG(features >= 0, "features is ", features, ": expected >= 1 (0 = the largest index in the file)");
    const pf::glm::GlmOptions o = convert(options);
    pf::glm::LibsvmOptions read;
    read.features = features;
    pf::glm::GlmData data = pf::glm::dense_if_worthwhile(pf::glm::read_libsvm(path, read));
    auto model = std::make_unique<pf_glm_model>();
    if (o.loss != pf::glm::Loss::kSquared)
      std::tie(model->negative_label, model->positive_label) = pf::glm::to_signed_labels(data);
    model->result = pf::glm::train_glm(data, o);
    *out = model.release();
  });
}

pf_status* pf_glm_model_result(const pf_glm_model* model, pf_glm_result* out) {
  return guard(__func__, [&] {
    require(model, "model");
    require(out, "out");
    pf::capi::check_out_struct(*out, kGlmResultV1Size, "out", "pf_glm_result");
    const pf::glm::GlmResult& r = model->result;
    pf_glm_result c{};
    c.struct_size = sizeof(c);
    c.epochs = r.epochs;
    c.objective = r.objective;
    c.dual_objective = r.dual_objective;
    c.duality_gap = r.duality_gap;
    c.seconds = r.seconds;
    c.accuracy = r.accuracy;
    c.converged = r.converged ? 1 : 0;
    c.features = static_cast<int64_t>(r.weights.size());
    c.negative_label = model->negative_label;
    c.positive_label = model->positive_label;
    pf::capi::write_struct(out, c);
  });
}

pf_status* pf_glm_model_weights(const pf_glm_model* model, const double** weights, size_t* count) {
  return guard(__func__, [&] {
    require(model, "model");
    require(weights, "weights");
    require(count, "count");
    *weights = model->result.weights.data();
    *count = model->result.weights.size();
  });
}

pf_status* pf_glm_model_to_json(pf_glm_model* model, const char** out) {
  return guard(__func__, [&] {
    require(model, "model");
    require(out, "out");
    nlohmann::json j = model->result.to_json();
    j["weights"] = model->result.weights;
    if (std::isfinite(model->negative_label))
      j["labels"] = {{"negative", model->negative_label}, {"positive", model->positive_label}};
    model->json = j.dump();
    *out = model->json.c_str();
  });
}

void pf_glm_model_destroy(pf_glm_model* model) { delete model; }

#include "runtime/glm/glm_data.h"

#include <cmath>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/core/limits.h"

namespace pf::glm {

int64_t GlmData::bytes() const {
  return static_cast<int64_t>(row_start.size() * sizeof(int64_t) + indices.size() * sizeof(uint32_t) +
                              values.size() * sizeof(float) + labels.size() * sizeof(double));
}

GlmData to_dense(const GlmData& sparse) {
  if (sparse.dense) return sparse;
  const int64_t bytes = sparse.rows * sparse.cols * static_cast<int64_t>(sizeof(float));
  PF_CHECK_ARG(sparse.cols == 0 || sparse.rows <= limits::max_loaded_data_bytes() / (sparse.cols * 4), sparse.name,
               ": ", sparse.rows, " x ", sparse.cols, " dense values need ", bytes, " bytes, more than the ",
               limits::max_loaded_data_bytes(), " this process may load");
  GlmData d;
  d.rows = sparse.rows;
  d.cols = sparse.cols;
  d.dense = true;
  d.labels = sparse.labels;
  d.name = sparse.name;
  d.values.assign(static_cast<size_t>(sparse.rows * sparse.cols), 0.0f);
  for (int64_t i = 0; i < sparse.rows; ++i)
    for (int64_t k = sparse.row_start[i]; k < sparse.row_start[i + 1]; ++k)
      d.values[static_cast<size_t>(i * sparse.cols + sparse.indices[k])] = sparse.values[k];
  return d;
}

GlmData dense_if_worthwhile(GlmData data) {
  if (data.dense || data.rows == 0 || data.cols == 0) return data;
  const double density = static_cast<double>(data.values.size()) / (static_cast<double>(data.rows) * data.cols);
  return density >= 0.5 ? to_dense(data) : std::move(data);
}

void check_glm_data(const GlmData& d) {
  PF_CHECK_ARG(d.rows >= 1, d.name, ": no examples");
  PF_CHECK_ARG(d.cols >= 1, d.name, ": no features");
  PF_CHECK_ARG(static_cast<int64_t>(d.labels.size()) == d.rows, d.name, ": ", d.labels.size(), " labels for ", d.rows,
               " rows");
  if (d.dense) {
    PF_CHECK_ARG(static_cast<int64_t>(d.values.size()) == d.rows * d.cols, d.name, ": ", d.values.size(),
                 " values for ", d.rows, " x ", d.cols);
  } else {
    PF_CHECK_ARG(static_cast<int64_t>(d.row_start.size()) == d.rows + 1 && d.row_start.front() == 0 &&
                     d.row_start.back() == static_cast<int64_t>(d.values.size()) && d.indices.size() == d.values.size(),
                 d.name, ": malformed CSR arrays");
  }
  for (int64_t i = 0; i < d.rows; ++i) {
    PF_CHECK_ARG(std::isfinite(d.labels[i]), d.name, ": row ", i + 1, ": the label is not finite");
    const int64_t begin = d.dense ? i * d.cols : d.row_start[i], end = d.dense ? begin + d.cols : d.row_start[i + 1];
    PF_CHECK_ARG(begin <= end, d.name, ": row ", i + 1, ": malformed CSR offsets");
    for (int64_t k = begin; k < end; ++k) {
      PF_CHECK_ARG(std::isfinite(d.values[k]), d.name, ": row ", i + 1, ": a value is not finite");
      if (!d.dense) {
        PF_CHECK_ARG(d.indices[k] < d.cols, d.name, ": row ", i + 1, ": feature ", d.indices[k] + 1, " of ", d.cols);
        PF_CHECK_ARG(k == begin || d.indices[k] > d.indices[k - 1], d.name, ": row ", i + 1,
                     ": features not in ascending order");
      }
    }
  }
}

}  // namespace pf::glm

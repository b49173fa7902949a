// The data of a generalised linear model: n examples of d features with one label each, stored by
// rows (what dual coordinate descent reads: one example per coordinate). Sparse data is CSR
// (row_start, indices, values); dense data keeps values only, row-major, d per row.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pf::glm {

struct GlmData {
  int64_t rows = 0;     // n examples
  int64_t cols = 0;     // d features
  bool dense = false;
  std::vector<int64_t> row_start;  // sparse: rows + 1 offsets into indices/values
  std::vector<uint32_t> indices;   // sparse: 0-based feature of each stored value, ascending per row
  std::vector<float> values;       // sparse: the stored values; dense: rows x cols, row-major
  std::vector<double> labels;      // [rows]
  std::string name;                // where it came from, for messages ("file 'a.svm'")

  int64_t nonzeros() const { return dense ? rows * cols : static_cast<int64_t>(values.size()); }
  // The bytes the arrays hold.
  int64_t bytes() const;
};

// Makes a dense copy of sparse data (every absent value 0).
GlmData to_dense(const GlmData& sparse);
// Dense when at least half the values are stored, so that dense rows are no larger than sparse
// ones; sparse otherwise (the data as it is).
GlmData dense_if_worthwhile(GlmData data);

// Checks the shapes and that every value and label is finite; kInvalidArgument naming the row.
void check_glm_data(const GlmData& data);

}  // namespace pf::glm

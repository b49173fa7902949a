#include "tests/runtime/trainer_fixtures.h"

#include <algorithm>
#include <random>

#include "runtime/core/error.h"

namespace pf::testing {

Batch teacher_batch(int64_t rows, int64_t dim, int64_t classes, uint64_t seed) {
  std::mt19937_64 teacher_gen(12345), gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> teacher(dim * classes);
  for (auto& w : teacher) w = dist(teacher_gen);
  std::vector<float> x(rows * dim);
  std::vector<int32_t> y(rows);
  for (auto& v : x) v = dist(gen);
  for (int64_t r = 0; r < rows; ++r) {
    float best = -1e30f;
    for (int64_t c = 0; c < classes; ++c) {
      float s = 0;
      for (int64_t d = 0; d < dim; ++d) s += x[r * dim + d] * teacher[d * classes + c];
      if (s > best) {
        best = s;
        y[r] = static_cast<int32_t>(c);
      }
    }
  }
  return Batch{Tensor::from_vector({rows, dim}, x), Tensor::from_ints({rows}, y)};
}

Batch text_batch(const std::string& text, int64_t rows, int64_t seq_len, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int64_t> start(0, static_cast<int64_t>(text.size()) - seq_len - 2);
  std::vector<int32_t> in(rows * seq_len), out(rows * seq_len);
  auto id = [](char c) { return std::clamp(static_cast<int32_t>(static_cast<unsigned char>(c)) - 32, 0, 95); };
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t s = start(gen);
    for (int64_t t = 0; t < seq_len; ++t) {
      in[r * seq_len + t] = id(text[s + t]);
      out[r * seq_len + t] = id(text[s + t + 1]);
    }
  }
  return Batch{Tensor::from_ints({rows, seq_len}, in), Tensor::from_ints({rows, seq_len}, out)};
}

Batch TeacherSource::next() {
  if (position_ == fail_at) fail(ErrorCode::kCallbackError, "teacher source: injected failure at position ", position_);
  const bool bad = position_ == bad_label_at;
  Batch b = teacher_batch(rows_, dim_, classes_, static_cast<uint64_t>(position_++));
  if (bad) b.targets.i32()[0] = static_cast<int32_t>(classes_);
  return b;
}

}  // namespace pf::testing

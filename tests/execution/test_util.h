// Shared helpers for the executor tests: small models, data, and bitwise parameter comparison.
#pragma once

#include <algorithm>
#include <atomic>
#include <random>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/layers/cross_entropy.h"
#include "runtime/layers/linear.h"
#include "runtime/models/builders.h"
#include "runtime/train/sequential_trainer.h"
#include "runtime/train/batch.h"

namespace pf::exec::testing {

// Features [rows, dim] and labels = argmax of a fixed linear map.
inline Batch teacher_batch(int64_t rows, int64_t dim, int64_t classes, uint64_t seed) {
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

// Character windows from `text`: ids = byte - 32 (clamped to [0, 95]), targets shifted by one.
inline Batch text_batch(const std::string& text, int64_t rows, int64_t seq_len, uint64_t seed) {
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

// Teacher micro-batches, one per next(); fails (kCallbackError) at position fail_at.
class TeacherSource : public DataSource {
 public:
  TeacherSource(int64_t rows, int64_t dim, int64_t classes) : rows_(rows), dim_(dim), classes_(classes) {}
  Batch next() override {
    if (position_ == fail_at) fail(ErrorCode::kCallbackError, "teacher source: injected failure at position ", position_);
    return teacher_batch(rows_, dim_, classes_, 1000 + position_++);
  }
  int64_t position() const override { return position_; }
  void seek(int64_t position) override { position_ = position; }
  int64_t fail_at = -1;

 private:
  int64_t rows_, dim_, classes_, position_ = 0;
};

inline std::shared_ptr<Model> tiny_mlp(int hidden_layers = 8) {
  MlpConfig c;
  c.input_dim = 12;
  c.hidden.assign(static_cast<size_t>(hidden_layers), 12);
  c.classes = 4;
  return build_mlp(c);
}

inline std::shared_ptr<Model> tiny_gpt(int blocks = 5) {
  GptConfig c;
  c.vocab = 96;
  c.seq_len = 8;
  c.d_model = 16;
  c.heads = 2;
  c.layers = blocks;
  return build_gpt(c);
}

inline const std::string& corpus() {
  static const std::string text = [] {
    std::string t;
    for (int i = 0; i < 10; ++i) t += "the quick brown fox jumps over the lazy dog. pack my box with five dozen jugs. ";
    return t;
  }();
  return text;
}

// Rows per micro-batch: 2.
inline Batch data_for(const Model& model, int micro_batches, int step) {
  if (model.input_spec().kind == InputSpec::Kind::kTokens)
    return text_batch(corpus(), 2 * micro_batches, model.input_spec().seq_len, 100 + step);
  return teacher_batch(2 * micro_batches, model.input_spec().features, model.input_spec().classes,
                                    100 + step);
}

inline bool parameters_bitwise_equal(const Model& a, const Model& b, std::string* first_diff) {
  const auto& pa = a.parameters();
  const auto& pb = b.parameters();
  if (pa.size() != pb.size()) {
    *first_diff = "parameter count";
    return false;
  }
  for (size_t i = 0; i < pa.size(); ++i) {
    if (pa[i]->value.nbytes() != pb[i]->value.nbytes() ||
        std::memcmp(pa[i]->value.data<char>(), pb[i]->value.data<char>(), pa[i]->value.nbytes()) != 0) {
      *first_diff = pa[i]->name;
      return false;
    }
  }
  return true;
}

// An identity layer that can sleep or throw in its forward/backward (for the robustness tests).
class ProbeLayer : public Layer {
 public:
  explicit ProbeLayer(std::string name) : Layer(std::move(name)) {}
  const char* type() const override { return "probe"; }
  nlohmann::json config() const override { return {{"type", "probe"}}; }
  Tensor forward(const Tensor& input, SavedContext&) override {
    if (forward_sleep_ms.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(forward_sleep_ms.load()));
    if (fail_forward.load()) fail(ErrorCode::kCallbackError, "probe layer '", name(), "': injected forward failure");
    return input;
  }
  Tensor backward_input(SavedContext&, const Tensor& grad_output) override {
    if (fail_backward.load()) fail(ErrorCode::kCallbackError, "probe layer '", name(), "': injected backward failure");
    return grad_output;
  }
  std::atomic<int> forward_sleep_ms{0};
  std::atomic<bool> fail_forward{false};
  std::atomic<bool> fail_backward{false};
};

// fc0, probe0, fc1, probe1, head: features 8 -> 4 classes. Probes are returned through the pointers.
inline std::shared_ptr<Model> probe_model(ProbeLayer** probe0, ProbeLayer** probe1) {
  InputSpec in;
  in.kind = InputSpec::Kind::kFeatures;
  in.features = 8;
  in.classes = 4;
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<Linear>("fc0", 8, 8));
  auto p0 = std::make_unique<ProbeLayer>("probe0");
  *probe0 = p0.get();
  layers.push_back(std::move(p0));
  layers.push_back(std::make_unique<Linear>("fc1", 8, 8));
  auto p1 = std::make_unique<ProbeLayer>("probe1");
  *probe1 = p1.get();
  layers.push_back(std::move(p1));
  layers.push_back(std::make_unique<Linear>("head", 8, 4));
  return std::make_shared<Model>(in, std::move(layers), std::make_unique<CrossEntropyLoss>());
}

}  // namespace pf::exec::testing

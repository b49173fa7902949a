// Shared helpers for the executor tests: small models, data, and bitwise parameter comparison.
#pragma once

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/layers/cross_entropy.h"
#include "runtime/layers/linear.h"
#include "runtime/models/builders.h"
#include "runtime/train/sequential_trainer.h"
#include "runtime/train/batch.h"
#include "tests/runtime/trainer_fixtures.h"
#include "tests/util/sanitizer.h"

namespace pf::exec::testing {

// The runtime tests' data fixtures (teacher classification batches, character windows, a failing
// DataSource), shared rather than copied.
using ::pf::testing::teacher_batch;
using ::pf::testing::TeacherSource;
using ::pf::testing::text_batch;

inline std::shared_ptr<Model> tiny_mlp(int hidden_layers = 8) {
  MlpConfig c;
  c.input_dim = 12;
  c.hidden.assign(static_cast<size_t>(hidden_layers), 12);
  c.classes = 4;
  return build_mlp(c);
}

// `mlp_hidden` 0: 4 x d_model. `tied`: the head tied to the token embedding (GPT-2's form).
inline std::shared_ptr<Model> tiny_gpt(int blocks = 5, int64_t mlp_hidden = 0, bool tied = false) {
  GptConfig c;
  c.tie_embeddings = tied;
  c.vocab = 96;
  c.seq_len = 8;
  c.d_model = 16;
  c.heads = 2;
  c.layers = blocks;
  c.mlp_hidden = mlp_hidden;
  return build_gpt(c);
}

// A Llama of `blocks` blocks, grouped-query (4 heads, 2 key/value heads) with rotary positions.
inline std::shared_ptr<Model> tiny_llama(int blocks = 5) {
  LlamaConfig c;
  c.vocab = 96;
  c.seq_len = 8;
  c.d_model = 16;
  c.heads = 4;
  c.kv_heads = 2;
  c.layers = blocks;
  c.mlp_hidden = 24;
  return build_llama(c);
}

// A ResNet on 6x6 single-channel images: stem, two stages of two basic blocks (4 then 8
// channels, the second stage's first block strided with a projection shortcut), pool, head: nine
// top-level layers, enough for 4 ranks of 2 chunks.
inline std::shared_ptr<Model> tiny_resnet() {
  ResNetConfig c;
  c.channels = 1;
  c.image_size = 6;
  c.width = 4;
  c.blocks = {2, 2};
  c.groups = 2;
  c.classes = 4;
  return build_resnet(c);
}

// A ViT on 4x4 single-channel images in 2x2 patches (a class token and 4 patch tokens), 5 blocks.
inline std::shared_ptr<Model> tiny_vit() {
  VitConfig c;
  c.channels = 1;
  c.image_size = 4;
  c.patch = 2;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 5;
  c.mlp_hidden = 24;
  c.classes = 4;
  return build_vit(c);
}

// The models the equivalence tests run every schedule on.
enum class ModelKind { kMlp, kGpt, kLlama, kTiedGpt, kResNet, kViT };
inline std::shared_ptr<Model> model_of(ModelKind kind) {
  switch (kind) {
    case ModelKind::kMlp: return tiny_mlp();
    case ModelKind::kGpt: return tiny_gpt();
    case ModelKind::kLlama: return tiny_llama();
    case ModelKind::kTiedGpt: return tiny_gpt(5, 0, true);
    case ModelKind::kResNet: return tiny_resnet();
    case ModelKind::kViT: return tiny_vit();
  }
  return nullptr;
}
inline const char* kind_name(ModelKind kind) {
  switch (kind) {
    case ModelKind::kMlp: return "mlp";
    case ModelKind::kGpt: return "gpt";
    case ModelKind::kLlama: return "llama";
    case ModelKind::kTiedGpt: return "tied_gpt";
    case ModelKind::kResNet: return "resnet";
    case ModelKind::kViT: return "vit";
  }
  return "";
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

// One synchronous generator with the chunks it takes; all twelve of them.
struct ScheduleCase {
  std::string schedule;
  int chunks;
};
inline std::vector<ScheduleCase> synchronous_schedules() {
  return {{"gpipe", 1}, {"1f1b", 1}, {"interleaved-1f1b", 2}, {"bfs", 2},
          {"zb-h1", 1}, {"zb-h2", 1}, {"zb-v", 2},              {"zb-auto", 1},
          {"interleaved-zb", 2}, {"dualpipe-v", 2}, {"v-half", 2}, {"v-min", 2}};
}
// A gtest parameter name: the parts joined by '_', '-' replaced by '_'.
inline std::string test_name(const std::string& a, const std::string& b) {
  std::string n = a + "_" + b;
  for (char& ch : n)
    if (ch == '-') ch = '_';
  return n;
}

// Trainer options that vary with `variant`: AdamW and SGD with momentum alternating, a small
// clip norm (so that clipping really happens) every third variant, a seed per variant.
inline TrainerOptions varied_options(int m, int variant) {
  TrainerOptions o;
  o.micro_batches = m;
  o.seed = 11 + variant;
  if (variant % 2 == 0) {
    o.optimizer.kind = OptimizerConfig::Kind::kAdamW;
    o.optimizer.lr = 1e-2f;
  } else {
    o.optimizer.kind = OptimizerConfig::Kind::kSgd;
    o.optimizer.lr = 0.1f;
    o.optimizer.momentum = 0.9f;
  }
  o.optimizer.clip_norm = variant % 3 == 0 ? 0.05f : 0.0f;
  return o;
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
  void backward_weight(SavedContext&) override {
    if (weight_sleep_ms.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(weight_sleep_ms.load()));
  }
  std::atomic<int> forward_sleep_ms{0};
  std::atomic<int> weight_sleep_ms{0};
  std::atomic<bool> fail_forward{false};
  std::atomic<bool> fail_backward{false};
};

// fc0, probe0, fc1, probe1, head: features 8 -> 4 classes. Probes are returned through the pointers.
// `tied_head`: the head is 8 -> 8 w classes, its weight a tied copy of fc0's (8 -> 8 w; a pair
// across stages).
inline std::shared_ptr<Model> probe_model(ProbeLayer** probe0, ProbeLayer** probe1, bool tied_head = false,
                                          int64_t w = 1) {
  InputSpec in;
  in.kind = InputSpec::Kind::kFeatures;
  in.features = 8;
  in.classes = tied_head ? 8 * w : 4;
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<Linear>("fc0", 8, 8 * w));
  auto p0 = std::make_unique<ProbeLayer>("probe0");
  *probe0 = p0.get();
  layers.push_back(std::move(p0));
  layers.push_back(std::make_unique<Linear>("fc1", 8 * w, 8));
  auto p1 = std::make_unique<ProbeLayer>("probe1");
  *probe1 = p1.get();
  layers.push_back(std::move(p1));
  if (tied_head) layers.push_back(std::make_unique<Linear>("head", 8, 8 * w, true, 0.02f, "fc0.weight"));
  else layers.push_back(std::make_unique<Linear>("head", 8, 4));
  return std::make_shared<Model>(in, std::move(layers), std::make_unique<CrossEntropyLoss>());
}

}  // namespace pf::exec::testing

// The small models and batches the tensor-parallel tests train (threads here, CUDA members in
// tests/gpu/tensor_parallel_gpu_test.cc): an MLP with a column/row pair, a GPT and a Llama preset
// whose heads, vocabulary and sequences split by 2 and 4.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/models/builders.h"
#include "tests/runtime/trainer_fixtures.h"

namespace pf::tp_test {

constexpr int64_t kInput = 12, kHidden = 16, kMiddle = 12, kClasses = 10, kRows = 16;
constexpr int kSteps = 3;

// fc0 (12 -> 16) column, act0, fc1 (16 -> 12) row, act1, head (12 -> 10) whole: the default splits.
inline MlpConfig mlp_config() {
  MlpConfig c;
  c.input_dim = kInput;
  c.hidden = {kHidden, kMiddle};
  c.classes = kClasses;
  return c;
}
inline std::shared_ptr<Model> mlp() { return build_mlp(mlp_config()); }
inline std::vector<Batch> batches() {
  std::vector<Batch> b;
  for (int s = 0; s < kSteps; ++s) b.push_back(testing::teacher_batch(kRows, kInput, kClasses, 100 + s));
  return b;
}

inline GptConfig gpt_config() {
  GptConfig c;
  c.vocab = 128;
  c.seq_len = 8;
  c.d_model = 16;
  c.heads = 4;
  c.layers = 2;
  return c;
}
inline std::shared_ptr<Model> gpt() { return build_gpt(gpt_config()); }
inline std::vector<Batch> gpt_batches() {
  std::vector<Batch> b;
  const std::string text = "tensor parallel members split the heads of every block; ";
  for (int s = 0; s < kSteps; ++s) b.push_back(testing::text_batch(text, 4, 8, 200 + s));
  return b;
}

// A small llama preset: 4 query heads, 2 key/value heads; `mlp_hidden` 0: the preset's default.
inline std::shared_ptr<Model> llama(int64_t mlp_hidden = 0) {
  LlamaConfig c;
  c.vocab = 128;
  c.seq_len = 8;
  c.d_model = 16;
  c.heads = 4;
  c.kv_heads = 2;
  c.layers = 2;
  c.mlp_hidden = mlp_hidden;
  return build_llama(c);
}

}  // namespace pf::tp_test

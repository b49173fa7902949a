// Many independent one-hidden-layer MLP classifiers trained as one network (ParallelMLPs, Farias et
// al., arXiv 2206.08369): every model's hidden units side by side in one wide layer, so the first
// layer of all the models is one GEMM, and each model's output its own hidden units' contributions
// summed (the paper's element-wise product and scatter-add, here a loop per row and model). Each
// model has its own activation, learning rate, loss, optimizer state and metrics; the total loss is
// the sum of the models' losses, so each model's gradient is the one it would have alone.
//
// Model i is the MLP build_mlp({features, {hidden_i}, classes}) would build, initialised from its
// own seed as the sequential trainer initialises it: its parameters are copied into the packed
// layout, so a packed model starts exactly where that model would start alone, and its training
// follows that model's trajectory up to fp32 summation order (tests/sweep/packed_mlp_test.cc).
//
// Layout (H = the sum of the hidden widths; model i owns hidden units [offset_i, offset_i + h_i)):
//   w1 [H, features]   (each model's fc0.weight, its rows contiguous)
//   b1 [H]             (fc0.bias)
//   w2 [H, classes]    (head.weight transposed: one row of output weights per hidden unit)
//   b2 [models, classes] (head.bias)
// so each model's parameters are four contiguous slices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/optim/optimizer.h"

namespace pf::sweep {

enum class Activation { kRelu, kGelu, kTanh, kSigmoid, kIdentity };
// "relu", "gelu" (GPT-2's tanh approximation, as the library's GELU layer), "tanh", "sigmoid",
// "identity"; kInvalidArgument listing them otherwise.
Activation parse_activation(const std::string& name);
const char* activation_name(Activation activation);
const std::vector<std::string>& activation_names();

// One model of a packed network.
struct MlpSpec {
  int64_t hidden = 16;
  Activation activation = Activation::kRelu;
  uint64_t seed = 0;  // its initial parameters
  float lr = 1e-2f;   // its learning rate
};

class PackedMlp {
 public:
  // The optimizer's kind, momentum, weight decay, betas and eps apply to every model (config.lr and
  // clip_norm are not used: each model has its own rate). `max_rows`: the most rows a batch given
  // to train_step or evaluate may have (the work buffers are sized for it). Throws kInvalidArgument
  // naming the bad field, kOutOfMemory when the parameters, optimizer state and buffers would pass
  // limits::max_parameter_bytes() (checked before allocating).
  PackedMlp(int64_t features, int64_t classes, std::vector<MlpSpec> specs, const OptimizerConfig& optimizer,
            int64_t max_rows);

  int64_t models() const { return static_cast<int64_t>(models_.size()); }
  int64_t features() const { return features_; }
  int64_t classes() const { return classes_; }
  int64_t total_hidden() const { return total_hidden_; }
  const MlpSpec& spec(int64_t model) const { return models_[static_cast<size_t>(model)]; }
  int64_t steps() const { return steps_; }
  // Bytes of parameters, gradients, optimizer state and work buffers.
  int64_t bytes() const;

  // One optimizer step of every model on the batch x [rows, features], y [rows] (labels in
  // [0, classes)). losses[i] = model i's mean cross-entropy over the rows before the update.
  void train_step(const float* x, const int32_t* y, int64_t rows, double* losses);

  // Forward only: adds each model's summed cross-entropy over the rows to loss_sum[i] and its
  // count of rows whose largest logit is the label (the first largest on ties) to correct[i].
  void evaluate(const float* x, const int32_t* y, int64_t rows, double* loss_sum, int64_t* correct);

  // Model i's parameter `name` in the layout the MLP alone has: "fc0.weight" [h, features],
  // "fc0.bias" [h], "head.weight" [classes, h], "head.bias" [classes].
  std::vector<float> parameter(int64_t model, const std::string& name) const;

 private:
  // z = w1 x^T + b1, a = act(z), logits: the forward of `rows` rows into the work buffers.
  void forward(const float* x, int64_t rows);
  void check_batch(const float* x, const int32_t* y, int64_t rows) const;

  int64_t features_, classes_, max_rows_;
  std::vector<MlpSpec> models_;
  OptimizerConfig optimizer_;
  std::vector<int64_t> offset_;  // [models + 1]: model i's hidden units start at offset_[i]
  int64_t total_hidden_ = 0;
  int64_t steps_ = 0;
  // Parameters, gradients and the optimizer's slots (two for AdamW, one for SGD with momentum).
  std::vector<float> w1_, b1_, w2_, b2_;
  std::vector<float> gw1_, gb1_, gw2_, gb2_;
  std::vector<float> s1w1_, s1b1_, s1w2_, s1b2_, s2w1_, s2b1_, s2w2_, s2b2_;
  // Work, hidden-major: z (then dz) and a [H, rows], logits (then their gradient) [models,
  // classes, rows], and two rows of scratch.
  std::vector<float> z_, a_, logits_, row_max_, row_sum_;
};

}  // namespace pf::sweep

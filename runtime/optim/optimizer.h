// Optimizers update parameters from their accumulated gradients. State tensors are keyed by
// parameter name, so a stage that owns a subset of the parameters keeps exactly that subset's state
// and checkpoints stay partition-independent.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/layers/parameter.h"
#include "runtime/tensor_parallel/group.h"

namespace pf {

struct OptimizerConfig {
  enum class Kind { kSgd, kAdamW } kind = Kind::kAdamW;
  float lr = 1e-3f;
  float momentum = 0.0f;       // SGD
  float weight_decay = 0.0f;   // SGD: L2 added to the gradient; AdamW: decoupled
  float beta1 = 0.9f;          // AdamW
  float beta2 = 0.999f;        // AdamW
  float eps = 1e-8f;           // AdamW
  float clip_norm = 0.0f;      // > 0: clip gradients to this global L2 norm before the update

  nlohmann::json to_json() const;
  static OptimizerConfig from_json(const nlohmann::json& j);  // strict: names unknown fields
  void validate() const;  // kInvalidArgument naming the field
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  const OptimizerConfig& config() const { return config_; }
  void set_lr(float lr) { config_.lr = lr; }
  int64_t steps_taken() const { return steps_; }

  // Applies one update to every parameter in `params` (gradients already clipped if wanted):
  // begin_step(params), then update_parameters(params).
  void step(const std::vector<Parameter*>& params);
  // One update split over threads (PipelineTrainer: each rank's worker steps its own stages).
  // begin_step runs on one thread: it checks every parameter, creates the state slots they lack
  // (the state follows a parameter that moved to another device) and counts the step. Then
  // update_parameters may run concurrently from several threads on disjoint subsets of those
  // parameters: each call writes only its parameters' values and slots and only reads the state
  // map. The bits equal step(params)'s however the parameters are split.
  void begin_step(const std::vector<Parameter*>& params);
  void update_parameters(const std::vector<Parameter*>& params);

  // State for checkpoints: "<param>/<slot>" -> tensor (e.g. "fc0.weight/exp_avg").
  std::map<std::string, Tensor>& state() { return state_; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }

 protected:
  explicit Optimizer(OptimizerConfig config) : config_(config) {}
  // Updates one parameter; `step` counts from 1.
  virtual void update(Parameter& param, int64_t step) = 0;
  // The slots update() reads for a parameter with this config (a subset of optimizer_slot_names).
  virtual std::vector<const char*> slots_in_use() const = 0;
  // The state slot tensor for (param, slot), which begin_step created (zeroed, charged to
  // kOptimizerState) on the parameter's device.
  Tensor& slot(const Parameter& param, const char* slot_name);

  OptimizerConfig config_;

 private:
  std::map<std::string, Tensor> state_;
  int64_t steps_ = 0;
};

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config);

// The state slots an optimizer of `kind` may keep per parameter (the "<slot>" of state() keys):
// SGD "momentum"; AdamW "exp_avg" and "exp_avg_sq". Each has its parameter's shape.
const std::vector<std::string>& optimizer_slot_names(OptimizerConfig::Kind kind);

// Sum of squares of one parameter's gradient, accumulated in double in element order; 0 for a tied
// copy (Parameter::tied_to), whose gradient is its primary's: the pair counts once.
double grad_squared_norm(const Parameter& param);
// sqrt of the sum of `squared_norms` added in the given order (what clip_grad_norm sums).
double global_norm(const std::vector<double>& squared_norms);
// Global L2 norm over params (summed in the given order) and, if > max_norm > 0, scales every
// gradient by max_norm / norm. Returns the norm before clipping.
double clip_grad_norm(const std::vector<Parameter*>& params, float max_norm);
// Clipping as the trainers apply it: clip_grad_norm when max_norm > 0; with clipping off
// (max_norm 0) no norm is computed, no gradient changes and it returns 0 (StepResult::grad_norm).
double clip_gradients(const std::vector<Parameter*>& params, float max_norm);
// The same on a member of a tensor-parallel group (null or of one member: the above): the norm is
// the whole model's, each split parameter's squared norm the sum of its slices' over the group in
// rank order, each whole (replicated) parameter counted once. The same norm on every member.
double clip_gradients(const std::vector<Parameter*>& params, float max_norm, TensorParallelGroup* group);
// squared[i] is params[i]'s squared gradient norm on this member; each split parameter's entry
// becomes the sum of its slices' over the group in rank order (a collective: every member calls it
// with the same parameters). A null group or one of one member changes nothing.
void sum_split_squared_norms(const std::vector<Parameter*>& params, std::vector<double>& squared,
                             TensorParallelGroup* group);
// The scale that clip_grad_norm applies for a given total norm (1 when no clipping happens).
float clip_scale(double total_norm, float max_norm);
// Multiplies every gradient by `scale` (what clip_grad_norm does when it clips).
void scale_gradients(const std::vector<Parameter*>& params, float scale);

}  // namespace pf

// A model: an ordered list of top-level layers (the units a pipeline partitions into stages), a
// loss on the last one, and what its input looks like. Built from JSON or by the builders.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/layers/layer.h"
#include "runtime/layers/loss.h"
#include "runtime/tensor_parallel/group.h"

namespace pf {

struct InputSpec {
  enum class Kind { kFeatures, kTokens } kind = Kind::kFeatures;
  int64_t features = 0;  // kFeatures: inputs are f32 [B, features]
  int64_t vocab = 0;     // kTokens: inputs are i32 [B, seq_len] in [0, vocab)
  int64_t seq_len = 0;
  int64_t classes = 0;   // targets are i32 in [0, classes): [B] (features) or [B, seq_len] (tokens)
};

class Model {
 public:
  Model(InputSpec input, std::vector<std::unique_ptr<Layer>> layers, std::unique_ptr<Loss> loss);

  const InputSpec& input_spec() const { return input_; }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  Loss& loss() const { return *loss_; }

  // All parameters in model order (layer order, then each layer's own order).
  const std::vector<Parameter*>& parameters() const { return parameters_; }
  // nullptr when there is no parameter of that name.
  Parameter* find_parameter(const std::string& name) const;
  // The tied parameters (Parameter::tied_to): {primary, copy} in model order of the copies.
  const std::vector<std::pair<Parameter*, Parameter*>>& tied_pairs() const { return tied_; }
  // Elements of every parameter, a tied copy included (what memory and checkpoints hold; a
  // tensor-parallel member's slices of the split ones).
  int64_t num_parameter_elements() const;
  // The model's size as users count it (and Transformers' num_parameters): a tied pair once, a
  // split parameter (tensor parallelism) at its whole size.
  int64_t num_distinct_parameter_elements() const;

  // Moves every parameter's value and gradient to `device` (copies charged to kParameters and
  // kGradients there; a no-op for tensors already on it). Layers then compute on that device
  // (runtime/layers/cuda_dispatch.h); optimizer state follows each parameter the next time the
  // optimizer touches it. Inputs must be moved by the caller (SequentialTrainer does it).
  void to_device(const Device& device);
  // The device of the last to_device call (the CPU for a new model).
  const Device& device() const { return device_; }

  // The kind of auxiliary head local learning gives each stage of this model (model JSON
  // "local_head"; runtime/models/local_head_kind.h): "auto" unless set.
  const std::string& local_head() const { return local_head_; }
  void set_local_head(const std::string& kind);  // kInvalidArgument for an unknown kind

  // The tensor-parallel group the model's split layers reduce over (split_model_for_tensor_parallel,
  // runtime/tensor_parallel/split_model.h), or null for a whole model.
  const std::shared_ptr<TensorParallelGroup>& tensor_parallel_group() const { return tensor_parallel_; }
  void set_tensor_parallel_group(std::shared_ptr<TensorParallelGroup> group) { tensor_parallel_ = std::move(group); }

  // The model JSON (format "pipeforge.model/1") that rebuilds this model.
  nlohmann::json to_json() const;

  // Checks that inputs/targets of one (micro-)batch fit the input spec; throws kInvalidArgument
  // naming `what` (e.g. "batch" or "micro-batch 3") and the offending tensor.
  void check_batch(const Tensor& inputs, const Tensor& targets, const std::string& what) const;

 private:
  InputSpec input_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::unique_ptr<Loss> loss_;
  std::vector<Parameter*> parameters_;
  std::vector<std::pair<Parameter*, Parameter*>> tied_;
  Device device_ = Device::cpu();
  std::string local_head_ = "auto";
  std::shared_ptr<TensorParallelGroup> tensor_parallel_;
};

}  // namespace pf

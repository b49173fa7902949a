// See tiny_trainer.h.
#include "tests/fuzz/tiny_trainer.h"

#include "runtime/models/builders.h"

namespace pf::fuzz {

std::unique_ptr<SequentialTrainer> make_tiny_trainer() {
  MlpConfig model;
  model.input_dim = 4;
  model.hidden = {6};
  model.classes = 3;
  TrainerOptions options;
  options.seed = 7;
  options.optimizer.kind = OptimizerConfig::Kind::kAdamW;
  options.optimizer.lr = 0.01f;
  return std::make_unique<SequentialTrainer>(build_mlp(model), options);
}

Batch tiny_batch() {
  return {Tensor::from_vector({2, 4}, {0.5f, -1.0f, 0.25f, 2.0f, -0.5f, 1.5f, 0.0f, -2.0f}),
          Tensor::from_ints({2}, {1, 2})};
}

}  // namespace pf::fuzz

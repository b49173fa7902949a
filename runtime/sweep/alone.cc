#include "runtime/sweep/alone.h"

#include <chrono>
#include <cmath>

#include "runtime/core/error.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/models/builders.h"
#include "runtime/train/sequential_trainer.h"

namespace pf::sweep {

namespace {

// The held-out rows as one batch.
class OneBatch final : public DataSource {
 public:
  explicit OneBatch(Batch b) : batch_(std::move(b)) {}
  Batch next() override { return batch_; }
  int64_t position() const override { return 0; }
  void seek(int64_t) override {}

 private:
  Batch batch_;
};

}  // namespace

AloneRun train_alone(const SweepSpec& spec, std::shared_ptr<const SweepData> data, int64_t index) {
  spec.validate();
  const MlpSpec m = spec.model(index);
  cpu::set_blas_threads_for_this_thread(1);
  const auto t0 = std::chrono::steady_clock::now();
  MlpConfig config;
  config.input_dim = data->features;
  config.hidden = {m.hidden};
  config.classes = data->classes;
  PF_CHECK_ARG(m.activation == Activation::kRelu || m.activation == Activation::kGelu,
               "training alone: the library's MLP has relu and gelu, not ", activation_name(m.activation));
  config.activation = activation_name(m.activation);
  TrainerOptions options;
  options.seed = m.seed;
  options.optimizer = spec.optimizer_config();
  options.optimizer.lr = m.lr;
  SequentialTrainer trainer(std::shared_ptr<Model>(build_mlp(config)), options);
  SweepBatches batches(data, spec.batch, spec.seed);
  const int64_t f = data->features;
  std::vector<float> x(static_cast<size_t>(batches.max_rows() * f));
  std::vector<int32_t> y(static_cast<size_t>(batches.max_rows()));
  const int64_t steps = spec.epochs * batches.batches_per_epoch();
  SweepBatches::Order order;
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t rows = batches.gather(s, x.data(), y.data(), order);
    trainer.step(Batch{Tensor::from_vector({rows, f}, {x.begin(), x.begin() + rows * f}),
                       Tensor::from_ints({rows}, {y.begin(), y.begin() + rows})});
  }
  AloneRun run;
  run.index = index;
  run.train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  run.held_out_loss = run.held_out_accuracy = std::nan("");
  if (data->held_out_rows() > 0) {
    OneBatch held(Batch{Tensor::from_vector({data->held_out_rows(), f}, data->held_x),
                        Tensor::from_ints({data->held_out_rows()}, data->held_y)});
    const EvalResult e = trainer.evaluate(held, 1);
    run.held_out_loss = e.loss;
    run.held_out_accuracy = e.accuracy;
  }
  return run;
}

}  // namespace pf::sweep

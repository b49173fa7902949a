// A model-selection sweep: a grid of one-hidden-layer MLPs (hidden widths × activations × learning
// rates × repeats) trained together as packed networks (packed_mlp.h) on one classification data
// set, then ranked by their held-out results. `pipeforge sweep` runs one; a pipeline can run one in
// its bubbles (SweepFill). docs/SWEEP.md.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/sweep/packed_mlp.h"

namespace pf::sweep {

// The grid, the data and the training. In JSON (from_json / to_json) every field is optional and
// has the name given here; unknown fields are refused.
struct SweepSpec {
  // Data: a CSV classification file (features then the label; runtime/data/csv_classification.h),
  // or, when empty, the synthetic task of runtime/data/synthetic_classification.h with `samples`
  // rows of `features` features in `classes` classes. `held_out`: the share of the rows held out.
  std::string data;
  double feature_scale = 1.0;  // CSV: every feature is multiplied by this
  double held_out = 0.2;
  int64_t features = 16, classes = 4, samples = 1000;  // synthetic only

  // The grid: every combination of hidden width, activation and learning rate, `repeats` times
  // (repeat r initialises its models from seed + r).
  std::vector<int64_t> hidden = {8, 16, 32};
  std::vector<std::string> activations = {"relu"};
  std::vector<double> lr = {1e-2};
  int64_t repeats = 1;
  uint64_t seed = 0;

  // Training: `epochs` passes over the training rows in batches of `batch` rows (the rows in an
  // order drawn anew each epoch from the seed; the last batch of an epoch holds the remainder).
  std::string optimizer = "adamw";  // or "sgd"
  double momentum = 0.0;            // sgd
  double weight_decay = 0.0;
  int64_t batch = 32;
  int64_t epochs = 10;

  void validate() const;  // kInvalidArgument naming the field
  nlohmann::json to_json() const;
  // Throws kInvalidArgument naming the field (as "<path>.field").
  static SweepSpec from_json(const nlohmann::json& value, const std::string& path = "sweep");
  // The grid's models in order: repeat, then hidden width, activation, learning rate.
  std::vector<MlpSpec> models() const;
  // How many there are, and the one at `index` in that order (without building the list); on a
  // spec that validate() accepts.
  int64_t model_count() const;
  MlpSpec model(int64_t index) const;
  OptimizerConfig optimizer_config() const;
};

// The rows of a sweep, loaded once and shared read-only by every packed network.
struct SweepData {
  int64_t features = 0, classes = 0;
  std::vector<float> train_x, held_x;  // [rows, features]
  std::vector<int32_t> train_y, held_y;
  std::string description;  // e.g. "digits.csv: 1438 training rows, 359 held out, 64 features, 10 classes"
  int64_t train_rows() const { return static_cast<int64_t>(train_y.size()); }
  int64_t held_out_rows() const { return static_cast<int64_t>(held_y.size()); }
};
// Reads spec.data (errors as CsvClassificationDataset::load's) or draws the synthetic rows.
std::shared_ptr<const SweepData> load_sweep_data(const SweepSpec& spec);

// The batches of training: batch `step` of epoch step / batches_per_epoch.
class SweepBatches {
 public:
  // One reader's copy of the current epoch's row order (each shard keeps its own: shards filling
  // different ranks' bubbles are in different epochs).
  struct Order {
    int64_t epoch = -1;
    std::vector<int64_t> rows;
  };

  SweepBatches(std::shared_ptr<const SweepData> data, int64_t batch, uint64_t seed);
  int64_t batches_per_epoch() const { return per_epoch_; }
  int64_t max_rows() const { return batch_; }
  // Writes batch `step`'s rows into x [rows, features] and y [rows]; returns rows. `order` is
  // redrawn when the step is in another epoch than the one it holds.
  int64_t gather(int64_t step, float* x, int32_t* y, Order& order) const;
  // The order of the training rows in `epoch`.
  std::vector<int64_t> epoch_order(int64_t epoch) const;

 private:
  std::shared_ptr<const SweepData> data_;
  int64_t batch_, per_epoch_;
  uint64_t seed_;
};

struct ModelResult {
  int64_t index = 0;  // in SweepSpec::models() order
  MlpSpec spec;
  int64_t parameters = 0;
  int64_t steps = 0;              // optimizer steps taken
  double train_loss = 0;          // mean over the steps of the last whole epoch (or of those so far)
  double held_out_loss = 0;       // mean cross-entropy over the held-out rows (NaN without any)
  double held_out_accuracy = 0;   // share of them classified right (NaN without any)
  nlohmann::json to_json() const;
};

// The grid's models split into `shards` packed networks of about equal total hidden width, each
// trained by whoever calls step(shard): one thread each (run), or a pipeline rank's bubbles.
class Sweep {
 public:
  Sweep(const SweepSpec& spec, std::shared_ptr<const SweepData> data, int shards);

  int shards() const { return static_cast<int>(shards_.size()); }
  int64_t models() const { return static_cast<int64_t>(specs_.size()); }
  int64_t steps_per_model() const { return total_steps_; }
  bool done(int shard) const;
  bool done() const;

  // One step of shard's network on its next batch; false (and nothing done) once it has taken
  // steps_per_model() steps.
  bool step(int shard);
  // Steps of `shard` while the next is predicted to fit in what is left of budget_seconds (the
  // larger of its mean step time and its slowest recent step; the first call takes one step to
  // time it); returns the seconds.
  double run_for(int shard, double budget_seconds);
  // Every shard to the end, on min(threads, shards) threads.
  void run(int threads);

  // Steps taken by all shards together, and the models' steps (steps × models of each shard).
  int64_t steps_taken() const { return steps_taken_.load(); }
  int64_t model_steps() const { return model_steps_.load(); }
  // Every model's result, evaluated now on the held-out rows, in models() order.
  std::vector<ModelResult> results() const;

 private:
  struct Shard {
    std::unique_ptr<PackedMlp> net;
    std::vector<int64_t> model_index;  // the grid index of each packed model
    int64_t step = 0;
    SweepBatches::Order order;
    std::vector<float> x;
    std::vector<int32_t> y;
    std::vector<double> losses, epoch_loss_sum, last_epoch_loss;
    int64_t timed_steps = 0;  // by run_for, for its prediction
    double mean_step_seconds = 0, slow_step_seconds = 0;
    std::unique_ptr<std::mutex> mutex;
  };
  bool step_locked(Shard& s);

  std::shared_ptr<const SweepData> data_;
  std::vector<MlpSpec> specs_;
  SweepBatches batches_;
  int64_t total_steps_ = 0;
  std::vector<Shard> shards_;
  std::atomic<int64_t> steps_taken_{0}, model_steps_{0};
};

// The results ranked best first: by held-out loss (training loss without held-out rows), ties by
// index.
std::vector<ModelResult> ranked(std::vector<ModelResult> results);

}  // namespace pf::sweep

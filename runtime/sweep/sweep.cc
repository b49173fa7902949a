#include "runtime/sweep/sweep.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <thread>

#include <nlohmann/json.hpp>

#include "runtime/core/checked_math.h"
#include "runtime/core/error.h"
#include "runtime/core/json_object.h"
#include "runtime/core/limits.h"
#include "runtime/data/csv_classification.h"
#include "runtime/data/random.h"
#include "runtime/data/synthetic_classification.h"
#include "runtime/kernels/cpu/blas.h"

namespace pf::sweep {

namespace {

// The most models one sweep may hold (each is at least a few dozen floats plus bookkeeping).
constexpr int64_t kMaxModels = int64_t{1} << 22;
// Distinguishes the epochs' row orders from any other use of the seed.
constexpr uint64_t kEpochStream = 0x53574545'50455043ull;  // "SWEEPEPC"

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

}  // namespace

void SweepSpec::validate() const {
  PF_CHECK_ARG(std::isfinite(feature_scale) && feature_scale != 0, "feature_scale must be a finite non-zero number, got ",
               feature_scale);
  PF_CHECK_ARG(held_out >= 0 && held_out < 1, "held_out must be in [0, 1), got ", held_out);
  if (data.empty()) {
    PF_CHECK_ARG(features >= 1 && features <= limits::kMaxDimension, "features must be in [1, ", limits::kMaxDimension,
                 "], got ", features);
    PF_CHECK_ARG(classes >= 2 && classes <= limits::kMaxDimension, "classes must be in [2, ", limits::kMaxDimension,
                 "], got ", classes);
    PF_CHECK_ARG(samples >= 2 && samples <= limits::kMaxDimension, "samples must be in [2, ", limits::kMaxDimension,
                 "], got ", samples);
  }
  PF_CHECK_ARG(!hidden.empty(), "hidden must list at least one width");
  for (size_t k = 0; k < hidden.size(); ++k)
    PF_CHECK_ARG(hidden[k] >= 1 && hidden[k] <= limits::kMaxDimension, "hidden[", k, "] must be in [1, ",
                 limits::kMaxDimension, "], got ", hidden[k]);
  PF_CHECK_ARG(!activations.empty(), "activations must list at least one activation");
  for (size_t k = 0; k < activations.size(); ++k) {
    try {
      parse_activation(activations[k]);
    } catch (const Error& e) {
      fail(ErrorCode::kInvalidArgument, "activations[", k, "]: ", e.what());
    }
  }
  PF_CHECK_ARG(!lr.empty(), "lr must list at least one learning rate");
  for (size_t k = 0; k < lr.size(); ++k)
    PF_CHECK_ARG(std::isfinite(lr[k]) && lr[k] > 0 && lr[k] <= 1e6, "lr[", k, "] must be in (0, 1e6], got ", lr[k]);
  PF_CHECK_ARG(repeats >= 1 && repeats <= kMaxModels, "repeats must be in [1, ", kMaxModels, "], got ", repeats);
  const double grid = static_cast<double>(hidden.size()) * static_cast<double>(activations.size()) *
                      static_cast<double>(lr.size()) * static_cast<double>(repeats);
  PF_CHECK_ARG(grid <= static_cast<double>(kMaxModels), "the grid holds ", grid, " models, more than ", kMaxModels,
               " (hidden x activations x lr x repeats)");
  PF_CHECK_ARG(optimizer == "adamw" || optimizer == "sgd", "optimizer must be adamw or sgd, got '", optimizer, "'");
  PF_CHECK_ARG(std::isfinite(momentum) && momentum >= 0 && momentum < 1, "momentum must be in [0, 1), got ", momentum);
  PF_CHECK_ARG(std::isfinite(weight_decay) && weight_decay >= 0, "weight_decay must be >= 0, got ", weight_decay);
  PF_CHECK_ARG(batch >= 1 && batch <= limits::kMaxDimension, "batch must be in [1, ", limits::kMaxDimension, "], got ",
               batch);
  PF_CHECK_ARG(epochs >= 1 && epochs <= 1000000, "epochs must be in [1, 1000000], got ", epochs);
}

nlohmann::json SweepSpec::to_json() const {
  nlohmann::json j = {{"hidden", hidden},   {"activations", activations}, {"lr", lr},
                      {"repeats", repeats}, {"seed", seed},               {"optimizer", optimizer},
                      {"weight_decay", weight_decay}, {"batch", batch},   {"epochs", epochs},
                      {"held_out", held_out}};
  if (optimizer == "sgd") j["momentum"] = momentum;
  if (data.empty()) {
    j["features"] = features;
    j["classes"] = classes;
    j["samples"] = samples;
  } else {
    j["data"] = data;
    j["feature_scale"] = feature_scale;
  }
  return j;
}

SweepSpec SweepSpec::from_json(const nlohmann::json& value, const std::string& path) {
  JsonObject o(value, path);
  SweepSpec s;
  s.data = o.get_string("data", s.data);
  s.feature_scale = o.get_number("feature_scale", s.feature_scale);
  s.held_out = o.get_number("held_out", s.held_out);
  s.features = o.get_int_in("features", s.features, 1, limits::kMaxDimension);
  s.classes = o.get_int_in("classes", s.classes, 2, limits::kMaxDimension);
  s.samples = o.get_int_in("samples", s.samples, 2, limits::kMaxDimension);
  s.hidden = o.get_int_list("hidden", s.hidden, limits::kMaxDimension, 100000);
  if (o.has("activations")) {
    const nlohmann::json& a = o.get_array("activations");
    PF_CHECK_ARG(a.size() <= 1000, o.path_of("activations"), ": at most 1000 entries, got ", a.size());
    s.activations.clear();
    for (size_t k = 0; k < a.size(); ++k) {
      PF_CHECK_ARG(a[k].is_string(), o.path_of("activations"), "[", k, "]: expected a string");
      s.activations.push_back(a[k].get<std::string>());
    }
  }
  if (o.has("lr")) {
    const nlohmann::json& a = o.get_array("lr");
    PF_CHECK_ARG(a.size() <= 100000, o.path_of("lr"), ": at most 100000 entries, got ", a.size());
    s.lr.clear();
    for (size_t k = 0; k < a.size(); ++k) {
      PF_CHECK_ARG(a[k].is_number(), o.path_of("lr"), "[", k, "]: expected a number");
      s.lr.push_back(a[k].get<double>());
    }
  }
  s.repeats = o.get_int_in("repeats", s.repeats, 1, kMaxModels);
  s.seed = static_cast<uint64_t>(o.get_int_in("seed", 0, 0, std::numeric_limits<int64_t>::max()));
  s.optimizer = o.get_string("optimizer", s.optimizer);
  s.momentum = o.get_number("momentum", s.momentum);
  s.weight_decay = o.get_number("weight_decay", s.weight_decay);
  s.batch = o.get_int_in("batch", s.batch, 1, limits::kMaxDimension);
  s.epochs = o.get_int_in("epochs", s.epochs, 1, 1000000);
  o.reject_unknown();
  try {
    s.validate();
  } catch (const Error& e) {
    fail(ErrorCode::kInvalidArgument, path, ".", e.what());
  }
  return s;
}

int64_t SweepSpec::model_count() const {
  return repeats * static_cast<int64_t>(hidden.size() * activations.size() * lr.size());
}

MlpSpec SweepSpec::model(int64_t index) const {
  PF_CHECK_ARG(index >= 0 && index < model_count(), "model ", index, " is out of range [0, ", model_count(), ")");
  const int64_t n_lr = static_cast<int64_t>(lr.size()), n_act = static_cast<int64_t>(activations.size());
  const int64_t per_repeat = static_cast<int64_t>(hidden.size()) * n_act * n_lr;
  const int64_t r = index / per_repeat, in_repeat = index % per_repeat;
  return {hidden[static_cast<size_t>(in_repeat / (n_act * n_lr))],
          parse_activation(activations[static_cast<size_t>(in_repeat / n_lr % n_act)]),
          seed + static_cast<uint64_t>(r), static_cast<float>(lr[static_cast<size_t>(in_repeat % n_lr)])};
}

std::vector<MlpSpec> SweepSpec::models() const {
  validate();
  std::vector<MlpSpec> out;
  out.reserve(static_cast<size_t>(model_count()));
  for (int64_t i = 0; i < model_count(); ++i) out.push_back(model(i));
  return out;
}

OptimizerConfig SweepSpec::optimizer_config() const {
  OptimizerConfig c;
  c.kind = optimizer == "sgd" ? OptimizerConfig::Kind::kSgd : OptimizerConfig::Kind::kAdamW;
  c.momentum = static_cast<float>(momentum);
  c.weight_decay = static_cast<float>(weight_decay);
  return c;
}

std::shared_ptr<const SweepData> load_sweep_data(const SweepSpec& spec) {
  spec.validate();
  auto d = std::make_shared<SweepData>();
  if (!spec.data.empty()) {
    CsvClassificationOptions o;
    o.path = spec.data;
    o.rows = 1;
    o.feature_scale = static_cast<float>(spec.feature_scale);
    o.held_out_fraction = spec.held_out;
    o.shuffle_seed = spec.seed;
    const CsvClassificationDataset set = CsvClassificationDataset::load(o);
    d->features = set.features();
    d->classes = set.classes();
    PF_CHECK_ARG(d->classes >= 2, spec.data, ": every label is 0; a classification needs two classes at least");
    std::unique_ptr<DataSource> source = set.training_source();
    d->train_x.reserve(static_cast<size_t>(set.train_size() * d->features));
    for (int64_t r = 0; r < set.train_size(); ++r) {
      const Batch b = source->next();
      d->train_x.insert(d->train_x.end(), b.inputs.f32(), b.inputs.f32() + d->features);
      d->train_y.push_back(b.targets.i32()[0]);
    }
    if (set.held_out_size() > 0) {
      for (const Batch& b : set.held_out_batches(set.held_out_size())) {
        d->held_x.assign(b.inputs.f32(), b.inputs.f32() + b.inputs.numel());
        d->held_y.assign(b.targets.i32(), b.targets.i32() + b.targets.numel());
      }
    }
    d->description = spec.data;
  } else {
    const int64_t held = static_cast<int64_t>(std::llround(spec.held_out * static_cast<double>(spec.samples)));
    const int64_t train = spec.samples - held;
    PF_CHECK_ARG(train >= 1, "samples: ", spec.samples, " with held_out ", spec.held_out, " leaves no training rows");
    const int64_t bytes = checked_mul(checked_mul(spec.samples, spec.features + 1, "samples x features"), 4, "bytes");
    if (bytes > limits::max_loaded_data_bytes())
      fail(ErrorCode::kOutOfMemory, "the synthetic data (", spec.samples, " samples of ", spec.features,
           " features) needs ", bytes, " bytes, more than the limit of ", limits::max_loaded_data_bytes());
    SyntheticClassificationOptions o;
    o.features = spec.features;
    o.classes = spec.classes;
    o.seed = spec.seed;
    o.rows = train;
    const Batch t = SyntheticClassification(o).batch_at(0);
    d->train_x.assign(t.inputs.f32(), t.inputs.f32() + t.inputs.numel());
    d->train_y.assign(t.targets.i32(), t.targets.i32() + t.targets.numel());
    if (held > 0) {
      o.rows = held;
      o.held_out = true;
      const Batch h = SyntheticClassification(o).batch_at(0);
      d->held_x.assign(h.inputs.f32(), h.inputs.f32() + h.inputs.numel());
      d->held_y.assign(h.targets.i32(), h.targets.i32() + h.targets.numel());
    }
    d->features = spec.features;
    d->classes = spec.classes;
    d->description = "synthetic";
  }
  d->description += ": " + std::to_string(d->train_rows()) + " training rows, " + std::to_string(d->held_out_rows()) +
                    " held out, " + std::to_string(d->features) + " features, " + std::to_string(d->classes) +
                    " classes";
  return d;
}

SweepBatches::SweepBatches(std::shared_ptr<const SweepData> data, int64_t batch, uint64_t seed)
    : data_(std::move(data)), batch_(std::min(batch, data_->train_rows())), seed_(seed) {
  PF_CHECK_ARG(batch >= 1, "batch must be at least 1, got ", batch);
  PF_CHECK_ARG(data_->train_rows() >= 1, "the sweep has no training rows");
  per_epoch_ = (data_->train_rows() + batch_ - 1) / batch_;
}

std::vector<int64_t> SweepBatches::epoch_order(int64_t epoch) const {
  const int64_t n = data_->train_rows();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t bits = data::hash_words(seed_, kEpochStream, static_cast<uint64_t>(epoch), static_cast<uint64_t>(i));
    std::swap(order[static_cast<size_t>(i)], order[data::uniform_below(bits, static_cast<uint64_t>(i) + 1)]);
  }
  return order;
}

int64_t SweepBatches::gather(int64_t step, float* x, int32_t* y, Order& order) const {
  const int64_t epoch = step / per_epoch_, k = step % per_epoch_;
  const int64_t n = data_->train_rows(), f = data_->features;
  const int64_t begin = k * batch_, rows = std::min(batch_, n - begin);
  if (order.epoch != epoch) {
    order.rows = epoch_order(epoch);
    order.epoch = epoch;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = order.rows[static_cast<size_t>(begin + r)];
    std::copy(data_->train_x.begin() + row * f, data_->train_x.begin() + (row + 1) * f, x + r * f);
    y[r] = data_->train_y[static_cast<size_t>(row)];
  }
  return rows;
}

nlohmann::json ModelResult::to_json() const {
  auto number = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  return {{"index", index},
          {"hidden", spec.hidden},
          {"activation", activation_name(spec.activation)},
          {"lr", spec.lr},
          {"seed", spec.seed},
          {"parameters", parameters},
          {"steps", steps},
          {"train_loss", number(train_loss)},
          {"held_out_loss", number(held_out_loss)},
          {"held_out_accuracy", number(held_out_accuracy)}};
}

Sweep::Sweep(const SweepSpec& spec, std::shared_ptr<const SweepData> data, int shards)
    : data_(std::move(data)), specs_(spec.models()), batches_(data_, spec.batch, spec.seed) {
  PF_CHECK_ARG(shards >= 1 && shards <= 4096, "shards must be in [1, 4096], got ", shards);
  total_steps_ = checked_mul(spec.epochs, batches_.batches_per_epoch(), "epochs x batches per epoch");
  // Contiguous runs of the grid with about equal total hidden width (the work of a step).
  const int n_shards = static_cast<int>(std::min<int64_t>(shards, models()));
  double total = 0;
  for (const MlpSpec& m : specs_) total += static_cast<double>(m.hidden);
  shards_.resize(static_cast<size_t>(n_shards));
  double acc = 0;
  size_t next = 0;
  for (int s = 0; s < n_shards; ++s) {
    Shard& sh = shards_[static_cast<size_t>(s)];
    const double target = total * (s + 1) / n_shards;
    const size_t left_for_others = static_cast<size_t>(n_shards - s - 1);
    while (next < specs_.size() - left_for_others && (sh.model_index.empty() || acc + 0.5 * specs_[next].hidden <= target || s == n_shards - 1)) {
      acc += static_cast<double>(specs_[next].hidden);
      sh.model_index.push_back(static_cast<int64_t>(next++));
    }
  }
  const OptimizerConfig opt = spec.optimizer_config();
  for (Shard& sh : shards_) {
    std::vector<MlpSpec> mine;
    for (int64_t i : sh.model_index) mine.push_back(specs_[static_cast<size_t>(i)]);
    sh.net = std::make_unique<PackedMlp>(data_->features, data_->classes, std::move(mine), opt, batches_.max_rows());
    sh.x.resize(static_cast<size_t>(batches_.max_rows() * data_->features));
    sh.y.resize(static_cast<size_t>(batches_.max_rows()));
    sh.losses.assign(sh.model_index.size(), 0.0);
    sh.epoch_loss_sum.assign(sh.model_index.size(), 0.0);
    sh.last_epoch_loss.assign(sh.model_index.size(), std::nan(""));
    sh.mutex = std::make_unique<std::mutex>();
  }
}

bool Sweep::done(int shard) const {
  PF_CHECK_ARG(shard >= 0 && shard < shards(), "shard ", shard, " is out of range [0, ", shards(), ")");
  return shards_[static_cast<size_t>(shard)].step >= total_steps_;
}

bool Sweep::done() const {
  for (int s = 0; s < shards(); ++s)
    if (!done(s)) return false;
  return true;
}

bool Sweep::step_locked(Shard& s) {
  if (s.step >= total_steps_) return false;
  const int64_t rows = batches_.gather(s.step, s.x.data(), s.y.data(), s.order);
  s.net->train_step(s.x.data(), s.y.data(), rows, s.losses.data());
  for (size_t i = 0; i < s.losses.size(); ++i) s.epoch_loss_sum[i] += s.losses[i];
  ++s.step;
  if (s.step % batches_.batches_per_epoch() == 0) {
    for (size_t i = 0; i < s.losses.size(); ++i) {
      s.last_epoch_loss[i] = s.epoch_loss_sum[i] / static_cast<double>(batches_.batches_per_epoch());
      s.epoch_loss_sum[i] = 0;
    }
  }
  steps_taken_.fetch_add(1);
  model_steps_.fetch_add(s.net->models());
  return true;
}

bool Sweep::step(int shard) {
  PF_CHECK_ARG(shard >= 0 && shard < shards(), "shard ", shard, " is out of range [0, ", shards(), ")");
  Shard& s = shards_[static_cast<size_t>(shard)];
  std::lock_guard<std::mutex> lock(*s.mutex);
  return step_locked(s);
}

double Sweep::run_for(int shard, double budget_seconds) {
  PF_CHECK_ARG(shard >= 0 && shard < shards(), "shard ", shard, " is out of range [0, ", shards(), ")");
  Shard& s = shards_[static_cast<size_t>(shard)];
  std::lock_guard<std::mutex> lock(*s.mutex);
  const clock_type::time_point t0 = clock_type::now();
  // A step's time, predicted: the larger of the mean of the last steps and the slowest recent one
  // (decaying by 5% a step), so that a step starts only where even a slow one fits.
  auto timed_step = [&s, this] {
    const clock_type::time_point t = clock_type::now();
    step_locked(s);
    const double seconds = seconds_since(t);
    ++s.timed_steps;
    s.mean_step_seconds += (seconds - s.mean_step_seconds) / static_cast<double>(std::min<int64_t>(s.timed_steps, 16));
    s.slow_step_seconds = std::max(seconds, 0.95 * s.slow_step_seconds);
  };
  // The first call times one step wherever it is: a prediction needs one.
  if (s.timed_steps == 0 && s.step < total_steps_) timed_step();
  while (s.step < total_steps_) {
    const double predicted = std::max(s.mean_step_seconds, s.slow_step_seconds);
    if (seconds_since(t0) + predicted > budget_seconds) break;
    timed_step();
  }
  return seconds_since(t0);
}

void Sweep::run(int threads) {
  PF_CHECK_ARG(threads >= 1, "threads must be at least 1, got ", threads);
  const int n = std::min(threads, shards());
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t) {
    pool.emplace_back([this, t, n, &errors] {
      try {
        cpu::set_blas_threads_for_this_thread(1);
        for (int s = t; s < shards(); s += n)
          while (step(s)) {
          }
      } catch (...) {
        errors[static_cast<size_t>(t)] = std::current_exception();
      }
    });
  }
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

std::vector<ModelResult> Sweep::results() const {
  std::vector<ModelResult> out(specs_.size());
  const int64_t held = data_->held_out_rows(), f = data_->features;
  for (const Shard& s : shards_) {
    std::lock_guard<std::mutex> lock(*s.mutex);
    const int64_t n = s.net->models();
    std::vector<double> loss(static_cast<size_t>(n), 0.0);
    std::vector<int64_t> correct(static_cast<size_t>(n), 0);
    for (int64_t begin = 0; begin < held; begin += batches_.max_rows()) {
      const int64_t rows = std::min(batches_.max_rows(), held - begin);
      s.net->evaluate(data_->held_x.data() + begin * f, data_->held_y.data() + begin, rows, loss.data(), correct.data());
    }
    for (int64_t k = 0; k < n; ++k) {
      ModelResult& r = out[static_cast<size_t>(s.model_index[static_cast<size_t>(k)])];
      r.index = s.model_index[static_cast<size_t>(k)];
      r.spec = s.net->spec(k);
      r.parameters = r.spec.hidden * (data_->features + 1) + data_->classes * (r.spec.hidden + 1);
      r.steps = s.step;
      const size_t i = static_cast<size_t>(k);
      const int64_t this_epoch = s.step % batches_.batches_per_epoch();  // steps into the epoch under way
      r.train_loss = s.step >= batches_.batches_per_epoch() ? s.last_epoch_loss[i]
                     : this_epoch > 0 ? s.epoch_loss_sum[i] / static_cast<double>(this_epoch)
                                      : std::nan("");
      r.held_out_loss = held > 0 ? loss[i] / static_cast<double>(held) : std::nan("");
      r.held_out_accuracy = held > 0 ? static_cast<double>(correct[i]) / static_cast<double>(held) : std::nan("");
    }
  }
  return out;
}

std::vector<ModelResult> ranked(std::vector<ModelResult> results) {
  auto key = [](const ModelResult& r) {
    const double v = std::isfinite(r.held_out_loss) ? r.held_out_loss : r.train_loss;
    return std::isfinite(v) ? v : std::numeric_limits<double>::infinity();
  };
  std::stable_sort(results.begin(), results.end(),
                   [&](const ModelResult& a, const ModelResult& b) { return key(a) < key(b); });
  return results;
}

}  // namespace pf::sweep

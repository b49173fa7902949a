// The packed MLP sweep (runtime/sweep): each packed model trains as it would alone, against
//  - the library's own MLP and sequential trainer (relu and gelu, AdamW and SGD with momentum), and
//  - an independent reference written here in double precision (every activation, SGD),
// within fp32 summation error; the sweep's sharding does not change a model's results; bad input
// is refused naming the field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/kernels/cpu/fast_math.h"
#include "runtime/models/builders.h"
#include "runtime/sweep/packed_mlp.h"
#include "runtime/sweep/sweep.h"
#include "runtime/sweep/sweep_fill.h"
#include "runtime/train/sequential_trainer.h"

namespace pf::sweep {
namespace {

SweepSpec small_spec() {
  SweepSpec s;
  s.features = 7;
  s.classes = 4;
  s.samples = 90;
  s.held_out = 0.2;
  s.batch = 16;
  s.epochs = 3;
  s.hidden = {3, 9};
  s.activations = {"relu", "gelu"};
  s.lr = {1e-2, 3e-3};
  s.repeats = 2;
  s.seed = 5;
  return s;
}

double max_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t k = 0; k < a.size() && k < b.size(); ++k)
    worst = std::max(worst, std::abs(static_cast<double>(a[k]) - b[k]) / (1e-3 + std::abs(static_cast<double>(b[k]))));
  return worst;
}

// Trains model `index` of the grid alone with the library's MLP and SequentialTrainer on the same
// batches, and compares its losses and final parameters with the packed network's.
void expect_alone_equals_packed(const SweepSpec& spec) {
  std::shared_ptr<const SweepData> data = load_sweep_data(spec);
  const std::vector<MlpSpec> models = spec.models();
  PackedMlp packed(data->features, data->classes, models, spec.optimizer_config(), spec.batch);
  SweepBatches batches(data, spec.batch, spec.seed);
  const int64_t steps = spec.epochs * batches.batches_per_epoch();

  std::vector<std::unique_ptr<SequentialTrainer>> alone;
  for (const MlpSpec& m : models) {
    MlpConfig c;
    c.input_dim = data->features;
    c.hidden = {m.hidden};
    c.classes = data->classes;
    c.activation = activation_name(m.activation);
    TrainerOptions o;
    o.seed = m.seed;
    o.optimizer = spec.optimizer_config();
    o.optimizer.lr = m.lr;
    alone.push_back(std::make_unique<SequentialTrainer>(std::shared_ptr<Model>(build_mlp(c)), o));
  }
  std::vector<float> x(static_cast<size_t>(spec.batch * data->features));
  std::vector<int32_t> y(static_cast<size_t>(spec.batch));
  std::vector<double> losses(models.size());
  SweepBatches::Order order;
  double worst_loss = 0;
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t rows = batches.gather(s, x.data(), y.data(), order);
    packed.train_step(x.data(), y.data(), rows, losses.data());
    Batch b{Tensor::from_vector({rows, data->features}, {x.begin(), x.begin() + rows * data->features}),
            Tensor::from_ints({rows}, {y.begin(), y.begin() + rows})};
    for (size_t i = 0; i < models.size(); ++i) {
      const double loss = alone[i]->step(b).loss;
      worst_loss = std::max(worst_loss, std::abs(loss - losses[i]) / loss);
    }
  }
  EXPECT_LT(worst_loss, 1e-6) << "a packed model's loss left its trajectory alone";
  for (size_t i = 0; i < models.size(); ++i)
    for (Parameter* p : alone[i]->model().parameters()) {
      const std::vector<float> ref(p->value.f32(), p->value.f32() + p->value.numel());
      EXPECT_LT(max_relative_difference(packed.parameter(static_cast<int64_t>(i), p->name), ref), 1e-5)
          << "model " << i << " " << p->name;
    }
}

TEST(PackedMlp, EachModelFollowsItsTrajectoryAloneWithAdamW) { expect_alone_equals_packed(small_spec()); }

TEST(PackedMlp, EachModelFollowsItsTrajectoryAloneWithSgdAndMomentum) {
  SweepSpec s = small_spec();
  s.optimizer = "sgd";
  s.momentum = 0.9;
  s.weight_decay = 1e-3;
  s.lr = {0.1, 0.03};
  expect_alone_equals_packed(s);
}

// An independent reference: one MLP, double precision, plain loops, SGD.
struct ReferenceMlp {
  int64_t f, h, c;
  Activation act;
  std::vector<double> w1, b1, w2, b2;  // w1 [h, f], w2 [c, h] as the library's layout

  static double activate(Activation a, double z) {
    switch (a) {
      case Activation::kRelu: return z > 0 ? z : 0;
      case Activation::kGelu: return 0.5 * z * (1 + std::tanh(0.7978845608028654 * (z + 0.044715 * z * z * z)));
      case Activation::kTanh: return std::tanh(z);
      case Activation::kSigmoid: return 1 / (1 + std::exp(-z));
      case Activation::kIdentity: return z;
    }
    return z;
  }
  static double derivative(Activation a, double z) {
    const double eps = 1e-6;
    if (a == Activation::kRelu) return z > 0 ? 1 : 0;
    return (activate(a, z + eps) - activate(a, z - eps)) / (2 * eps);
  }
  // One SGD step on rows x, y; returns the mean loss before it.
  double step(const float* x, const int32_t* y, int64_t rows, double lr) {
    std::vector<double> gw1(w1.size()), gb1(b1.size()), gw2(w2.size()), gb2(b2.size());
    double total = 0;
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> z(h), a(h), logit(c);
      for (int64_t j = 0; j < h; ++j) {
        z[j] = b1[j];
        for (int64_t k = 0; k < f; ++k) z[j] += w1[j * f + k] * x[r * f + k];
        a[j] = activate(act, z[j]);
      }
      double mx = -1e300;
      for (int64_t o = 0; o < c; ++o) {
        logit[o] = b2[o];
        for (int64_t j = 0; j < h; ++j) logit[o] += w2[o * h + j] * a[j];
        mx = std::max(mx, logit[o]);
      }
      double sum = 0;
      for (int64_t o = 0; o < c; ++o) sum += std::exp(logit[o] - mx);
      total += mx + std::log(sum) - logit[y[r]];
      for (int64_t o = 0; o < c; ++o) {
        const double g = (std::exp(logit[o] - mx) / sum - (o == y[r] ? 1 : 0)) / rows;
        gb2[o] += g;
        for (int64_t j = 0; j < h; ++j) gw2[o * h + j] += g * a[j];
      }
      for (int64_t j = 0; j < h; ++j) {
        double da = 0;
        for (int64_t o = 0; o < c; ++o) da += (std::exp(logit[o] - mx) / sum - (o == y[r] ? 1 : 0)) / rows * w2[o * h + j];
        const double dz = da * derivative(act, z[j]);
        gb1[j] += dz;
        for (int64_t k = 0; k < f; ++k) gw1[j * f + k] += dz * x[r * f + k];
      }
    }
    for (size_t k = 0; k < w1.size(); ++k) w1[k] -= lr * gw1[k];
    for (size_t k = 0; k < b1.size(); ++k) b1[k] -= lr * gb1[k];
    for (size_t k = 0; k < w2.size(); ++k) w2[k] -= lr * gw2[k];
    for (size_t k = 0; k < b2.size(); ++k) b2[k] -= lr * gb2[k];
    return total / rows;
  }
};

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

TEST(PackedMlp, EveryActivationMatchesAReferenceInDoublePrecision) {
  SweepSpec spec = small_spec();
  spec.activations = {"relu", "gelu", "tanh", "sigmoid", "identity"};
  spec.optimizer = "sgd";
  spec.lr = {0.2};
  spec.repeats = 1;
  std::shared_ptr<const SweepData> data = load_sweep_data(spec);
  const std::vector<MlpSpec> models = spec.models();
  PackedMlp packed(data->features, data->classes, models, spec.optimizer_config(), spec.batch);
  std::vector<ReferenceMlp> refs;
  for (size_t i = 0; i < models.size(); ++i)
    refs.push_back({data->features, models[i].hidden, data->classes, models[i].activation,
                    to_double(packed.parameter(static_cast<int64_t>(i), "fc0.weight")),
                    to_double(packed.parameter(static_cast<int64_t>(i), "fc0.bias")),
                    to_double(packed.parameter(static_cast<int64_t>(i), "head.weight")),
                    to_double(packed.parameter(static_cast<int64_t>(i), "head.bias"))});
  SweepBatches batches(data, spec.batch, spec.seed);
  std::vector<float> x(static_cast<size_t>(spec.batch * data->features));
  std::vector<int32_t> y(static_cast<size_t>(spec.batch));
  std::vector<double> losses(models.size());
  SweepBatches::Order order;
  for (int64_t s = 0; s < 12; ++s) {
    const int64_t rows = batches.gather(s, x.data(), y.data(), order);
    packed.train_step(x.data(), y.data(), rows, losses.data());
    for (size_t i = 0; i < models.size(); ++i) {
      const double ref = refs[i].step(x.data(), y.data(), rows, 0.2);
      EXPECT_NEAR(losses[i], ref, 1e-6 * ref) << activation_name(models[i].activation) << " step " << s;
    }
  }
  for (size_t i = 0; i < models.size(); ++i) {
    const std::vector<float> w1 = packed.parameter(static_cast<int64_t>(i), "fc0.weight");
    std::vector<float> ref(refs[i].w1.begin(), refs[i].w1.end());
    EXPECT_LT(max_relative_difference(w1, ref), 1e-5) << activation_name(models[i].activation);
  }
}

TEST(Sweep, ShardingDoesNotChangeAModelsResults) {
  const SweepSpec spec = small_spec();
  std::shared_ptr<const SweepData> data = load_sweep_data(spec);
  Sweep one(spec, data, 1), three(spec, data, 3);
  one.run(1);
  three.run(2);
  EXPECT_TRUE(one.done());
  EXPECT_TRUE(three.done());
  EXPECT_EQ(three.shards(), 3);
  const std::vector<ModelResult> a = one.results(), b = three.results();
  ASSERT_EQ(a.size(), spec.models().size());
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].index, static_cast<int64_t>(i));
    EXPECT_EQ(b[i].spec.hidden, a[i].spec.hidden);
    EXPECT_EQ(a[i].steps, spec.epochs * 5);  // 72 training rows in batches of 16
    EXPECT_NEAR(b[i].held_out_loss, a[i].held_out_loss, 1e-5 * a[i].held_out_loss);
    EXPECT_NEAR(b[i].train_loss, a[i].train_loss, 1e-5 * a[i].train_loss);
    EXPECT_GE(a[i].held_out_accuracy, 0.0);
    EXPECT_LE(a[i].held_out_accuracy, 1.0);
  }
  EXPECT_EQ(one.model_steps(), static_cast<int64_t>(a.size()) * spec.epochs * 5);
}

TEST(Sweep, TrainingLowersTheHeldOutLossAndRankingPutsTheBestFirst) {
  SweepSpec spec = small_spec();
  spec.samples = 400;
  spec.epochs = 20;
  std::shared_ptr<const SweepData> data = load_sweep_data(spec);
  Sweep before(spec, data, 1), after(spec, data, 1);
  after.run(1);
  const std::vector<ModelResult> r0 = before.results(), r1 = ranked(after.results());
  const std::vector<ModelResult> unranked = after.results();
  for (size_t i = 0; i < unranked.size(); ++i) EXPECT_LT(unranked[i].held_out_loss, r0[i].held_out_loss) << i;
  for (size_t i = 1; i < r1.size(); ++i) EXPECT_LE(r1[i - 1].held_out_loss, r1[i].held_out_loss);
  EXPECT_GT(r1.front().held_out_accuracy, 0.7);  // 4 linearly separable classes
}

TEST(Sweep, TheGridIsOrderedByRepeatThenWidthActivationAndRate) {
  const SweepSpec spec = small_spec();  // hidden 3, 9 x relu, gelu x lr 1e-2, 3e-3 x 2 repeats from seed 5
  const std::vector<MlpSpec> models = spec.models();
  ASSERT_EQ(static_cast<int64_t>(models.size()), spec.model_count());
  ASSERT_EQ(models.size(), 16u);
  auto expect = [&](size_t i, int64_t hidden, Activation act, uint64_t seed, float lr) {
    EXPECT_EQ(models[i].hidden, hidden) << i;
    EXPECT_EQ(models[i].activation, act) << i;
    EXPECT_EQ(models[i].seed, seed) << i;
    EXPECT_EQ(models[i].lr, lr) << i;
  };
  expect(0, 3, Activation::kRelu, 5, 1e-2f);
  expect(1, 3, Activation::kRelu, 5, 3e-3f);
  expect(2, 3, Activation::kGelu, 5, 1e-2f);
  expect(4, 9, Activation::kRelu, 5, 1e-2f);
  expect(15, 9, Activation::kGelu, 6, 3e-3f);
  EXPECT_THROW(spec.model(16), Error);
}

TEST(Sweep, EachEpochVisitsEveryTrainingRowOnceInItsOwnOrder) {
  const SweepSpec spec = small_spec();
  std::shared_ptr<const SweepData> data = load_sweep_data(spec);
  SweepBatches batches(data, spec.batch, spec.seed);
  EXPECT_EQ(batches.batches_per_epoch(), 5);  // 72 rows: 4 of 16 and the remainder of 8
  std::vector<int64_t> first = batches.epoch_order(0), second = batches.epoch_order(1);
  EXPECT_NE(first, second);
  EXPECT_EQ(first, batches.epoch_order(0));
  std::sort(first.begin(), first.end());
  for (int64_t r = 0; r < data->train_rows(); ++r) EXPECT_EQ(first[static_cast<size_t>(r)], r);
  std::vector<float> x(static_cast<size_t>(spec.batch * data->features));
  std::vector<int32_t> y(static_cast<size_t>(spec.batch));
  SweepBatches::Order order;
  int64_t rows = 0;
  for (int64_t s = 0; s < 5; ++s) rows += batches.gather(s, x.data(), y.data(), order);
  EXPECT_EQ(rows, data->train_rows());
  EXPECT_EQ(batches.gather(4, x.data(), y.data(), order), 8);
  EXPECT_EQ(y[7], data->train_y[static_cast<size_t>(batches.epoch_order(0)[71])]);
}

TEST(Sweep, RunForStopsWhenTheNextStepWouldNotFit) {
  const SweepSpec spec = small_spec();
  Sweep sweep(spec, load_sweep_data(spec), 2);
  sweep.run_for(0, 0.0);  // times one step: the prediction needs one
  EXPECT_EQ(sweep.steps_taken(), 1);
  sweep.run_for(0, 0.0);
  EXPECT_EQ(sweep.steps_taken(), 1);
  sweep.run_for(0, 1e9);
  EXPECT_TRUE(sweep.done(0));
  EXPECT_FALSE(sweep.done(1));
  EXPECT_EQ(sweep.steps_taken(), sweep.steps_per_model());
  EXPECT_FALSE(sweep.step(0));
}

TEST(Sweep, BadInputIsRefusedNamingTheField) {
  auto message = [](const nlohmann::json& j) {
    try {
      SweepSpec::from_json(j);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"activations", {"relu", "swish"}}}).find("activations[1]: unknown activation 'swish'"),
            std::string::npos);
  EXPECT_NE(message({{"hidden", {8, 0}}}).find("sweep.hidden"), std::string::npos);
  EXPECT_NE(message({{"lr", {-1.0}}}).find("lr[0]"), std::string::npos);
  EXPECT_NE(message({{"epoch", 3}}).find("epoch"), std::string::npos);
  EXPECT_NE(message({{"optimizer", "lamb"}}).find("optimizer must be adamw or sgd"), std::string::npos);
  EXPECT_NE(message({{"hidden", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}, {"repeats", 1 << 20}}).find("the grid holds"),
            std::string::npos);
  EXPECT_EQ(message(small_spec().to_json()), "no error");

  std::vector<MlpSpec> one = {{8, Activation::kRelu, 0, 0.01f}};
  PackedMlp net(3, 2, one, OptimizerConfig(), 4);
  std::vector<float> x(12, 0.0f);
  std::vector<int32_t> y = {0, 1, 2, 0};
  std::vector<double> losses(1);
  try {
    net.train_step(x.data(), y.data(), 4, losses.data());
    ADD_FAILURE() << "a label out of range was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("label 2 at row 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(net.train_step(x.data(), y.data(), 5, losses.data()), Error);  // more rows than sized for
  std::vector<MlpSpec> huge(1, {int64_t{1} << 30, Activation::kRelu, 0, 0.01f});
  try {
    PackedMlp too_big(1000, 10, huge, OptimizerConfig(), 64);
    ADD_FAILURE() << "a packed network past the memory limit was allocated";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory) << e.what();
  }
}

}  // namespace
}  // namespace pf::sweep

namespace pf::sweep {
namespace {

TEST(SweepFill, EachRankTrainsItsOwnShareInItsBubbles) {
  SweepFill fill(small_spec(), 2);
  EXPECT_EQ(fill.sweep().shards(), 2);
  EXPECT_EQ(fill.run(5, 1.0), 0.0);  // no such rank: nothing to do
  EXPECT_GT(fill.run(1, 1e9), 0.0);  // rank 1's whole share
  EXPECT_TRUE(fill.sweep().done(1));
  EXPECT_FALSE(fill.sweep().done(0));
  EXPECT_EQ(fill.run(1, 1e9), 0.0);  // done: its bubbles stay empty
  const nlohmann::json r = fill.report();
  EXPECT_EQ(r.at("kind"), "sweep");
  EXPECT_EQ(r.at("steps_taken"), fill.sweep().steps_per_model());
  EXPECT_EQ(r.at("steps_total"), 2 * fill.sweep().steps_per_model());
  EXPECT_FALSE(r.at("done").get<bool>());
  EXPECT_EQ(r.at("models").size(), small_spec().models().size());
  const std::string summary = fill.summary(r);
  EXPECT_NE(summary.find("sweep of 16 models: 15 of 30 steps (50.0%)"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\nbest: model "), std::string::npos) << summary;
}

TEST(SweepFill, ASpecFilesDataPathStaysInsideItsFolder) {
  const std::string dir = ::testing::TempDir();
  for (const char* data : {"/etc/passwd", "../rows.csv", "a/../../rows.csv", ".."}) {
    const std::string path = dir + "/spec_escape.json";
    std::ofstream(path) << nlohmann::json{{"data", data}}.dump();
    try {
      read_sweep_spec_file(path);
      ADD_FAILURE() << data << " was taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("must stay inside the file's folder"), std::string::npos) << e.what();
    }
  }
  const std::string link = dir + "/spec_link";
  std::remove(link.c_str());
  ASSERT_EQ(::symlink("/etc", link.c_str()), 0);
  std::ofstream(dir + "/spec_through_link.json") << R"({"data": "spec_link/passwd"})";
  try {
    read_sweep_spec_file(dir + "/spec_through_link.json");
    ADD_FAILURE() << "a data path through a symbolic link was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'spec_link' is a symbolic link"), std::string::npos) << e.what();
  }
  std::ofstream(dir + "/spec_ok.json") << R"({"data": "sub/rows..csv", "hidden": [2]})";
  EXPECT_EQ(read_sweep_spec_file(dir + "/spec_ok.json").data, dir + "/sub/rows..csv");
}

}  // namespace
}  // namespace pf::sweep

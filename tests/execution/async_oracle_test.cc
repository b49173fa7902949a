// The asynchronous schedules against independent oracles (docs/SCHEDULES.md, "Asynchronous
// schedules"): each oracle replays its method's recurrence one micro-batch at a time on a model of
// its own (sharing only the layer code): which weight version every (micro-batch, stage) forward
// and backward uses, and when every update lands, keeping every version it ever made. After three
// steps and the drain, the pipelined run's parameters must equal the oracle's bitwise, every step's
// loss too, and the weight versions each rank kept alive must equal the method's formula.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <map>

#include "runtime/checkpoint/sharded_checkpoint.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/models/init.h"
#include "runtime/train/micro_batches.h"
#include "tests/execution/test_util.h"

namespace pf::exec {
namespace {

enum class ModelKind { kMlp, kGpt };

std::shared_ptr<Model> make_model(ModelKind kind) {
  return kind == ModelKind::kMlp ? testing::tiny_mlp(6) : testing::tiny_gpt(4);
}

struct Method {
  std::string label;
  std::string schedule;
  AsyncOptions options;
};

std::vector<Method> methods() {
  std::vector<Method> out;
  out.push_back({"pipedream", "pipedream", {}});
  AsyncOptions vs;
  vs.vertical_sync = true;
  out.push_back({"pipedream_vertical_sync", "pipedream", vs});
  out.push_back({"pipedream_2bw", "pipedream-2bw", {}});
  out.push_back({"spectrain", "spectrain", {}});
  AsyncOptions v2;
  v2.spectrain_version = 2;
  out.push_back({"spectrain_v2", "spectrain", v2});
  AsyncOptions mare;
  mare.pipemare_anneal_updates = 5;  // annealing ends inside the run
  mare.pipemare_decay = 0.5f;
  out.push_back({"pipemare", "pipemare", mare});
  return out;
}

OptimizerConfig optimizer_for(const Method& method, int ranks) {
  OptimizerConfig o;
  // SpecTrain needs SGD's momentum; the others alternate AdamW (p = 2) and SGD (p = 4).
  if (method.schedule == "spectrain" || ranks == 4) {
    o.kind = OptimizerConfig::Kind::kSgd;
    o.lr = 0.05f;
    o.momentum = 0.9f;
    o.weight_decay = 1e-4f;
  } else {
    o.kind = OptimizerConfig::Kind::kAdamW;
    o.lr = 1e-2f;
    o.weight_decay = 0.01f;
  }
  return o;
}

using Values = std::vector<Tensor>;  // one tensor per parameter of a stage

Values copy_of(const std::vector<Parameter*>& params) {
  Values v;
  for (Parameter* p : params) v.push_back(p->value.clone());
  return v;
}

// W - scale * buffer, elementwise.
Values minus_scaled(const Values& w, float scale, const Values& buffer) {
  Values out;
  for (size_t i = 0; i < w.size(); ++i) {
    Tensor t = w[i].clone();
    float* y = t.f32();
    const float* b = buffer[i].f32();
    for (int64_t j = 0; j < t.numel(); ++j) y[j] = y[j] - scale * b[j];
    out.push_back(std::move(t));
  }
  return out;
}

// The sequential replay. Every stage keeps the whole history of its weights (and of SGD's momentum
// for SpecTrain, of the discrepancy average for PipeMare): version j = after j updates.
class Oracle {
 public:
  Oracle(ModelKind kind, const Method& method, int ranks, int micro_batches, const TrainerOptions& base,
         const std::vector<StageRange>& partition)
      : method_(method), p_(ranks), m_(micro_batches), lr_(base.optimizer.lr), model_(make_model(kind)) {
    initialize_parameters(model_->parameters(), base.seed);
    std::vector<std::pair<int, int>> ranges;
    for (const StageRange& r : partition) ranges.emplace_back(r.begin, r.end);
    stages_ = make_stages(*model_, ranges);
    for (const Stage& s : stages_) {
      optimizers_.push_back(make_optimizer(base.optimizer));
      weights_.push_back({copy_of(s.parameters())});
      momentum_.push_back({Values()});
      Values zero;
      for (Parameter* q : s.parameters()) zero.push_back(Tensor::zeros(q->shape));
      delta_.push_back({zero});
    }
  }

  // Runs the step's micro-batches (the global micro-batches g_ .. g_ + m - 1); returns the mean loss.
  double step(const std::vector<Batch>& micro) {
    double sum = 0.0;
    for (const Batch& b : micro) sum += micro_batch(b);
    return method_.schedule == "pipedream-2bw" ? sum : sum / m_;
  }

  const Model& model() const { return *model_; }

 private:
  int S() const { return static_cast<int>(stages_.size()); }
  int delay(int s) const { return p_ - s - 1; }  // updates between F and BW in the steady state

  // The weights F(g) of stage s uses, and those its BW uses.
  Values forward_weights(int s, int64_t g) const {
    const auto& w = weights_[static_cast<size_t>(s)];
    const int64_t steady = std::max<int64_t>(0, g - delay(s));
    if (method_.schedule == "pipedream") {
      return w[static_cast<size_t>(method_.options.vertical_sync ? std::max<int64_t>(0, g - (p_ - 1)) : steady)];
    }
    if (method_.schedule == "pipedream-2bw") return w[static_cast<size_t>(std::max<int64_t>(0, g / m_ - 1))];
    if (method_.schedule == "spectrain") {
      const int shift = method_.options.spectrain_version == 1 ? s / 2 + p_ - s - 1 : p_ - s - 1;
      return predicted(s, steady, shift);
    }
    return w[static_cast<size_t>(steady)];  // pipemare
  }

  Values backward_weights(int s, int64_t g, const Values& forward) const {
    if (method_.schedule == "pipedream" || method_.schedule == "pipedream-2bw") return forward;
    if (method_.schedule == "spectrain")
      return method_.options.spectrain_version == 1 ? predicted(s, g, s / 2) : forward;
    // pipemare: the current weights (after g updates) minus D times the discrepancy average.
    const int64_t at_forward = std::max<int64_t>(0, g - delay(s));
    const int64_t d = g - at_forward;
    const Values& w = weights_[static_cast<size_t>(s)][static_cast<size_t>(g)];
    if (d == 0) return w;
    return minus_scaled(w, static_cast<float>(d), delta_[static_cast<size_t>(s)][static_cast<size_t>(g)]);
  }

  // SpecTrain: version j's weights minus shift * lr * its momentum (no momentum before the first update).
  Values predicted(int s, int64_t j, int shift) const {
    const Values& w = weights_[static_cast<size_t>(s)][static_cast<size_t>(j)];
    const Values& v = momentum_[static_cast<size_t>(s)][static_cast<size_t>(j)];
    if (v.empty()) return w;
    return minus_scaled(w, static_cast<float>(shift) * lr_, v);
  }

  static void use(const Stage& stage, const Values& values) {
    const auto& params = stage.parameters();
    for (size_t i = 0; i < params.size(); ++i) params[i]->value = values[i];
  }

  float micro_batch(const Batch& b) {
    const int64_t g = g_++;
    const bool batch_updates = method_.schedule == "pipedream-2bw";
    const float scale = batch_updates ? 1.0f / static_cast<float>(m_) : 1.0f;
    std::vector<Values> used(static_cast<size_t>(S()));
    std::vector<std::vector<SavedContext>> contexts(static_cast<size_t>(S()));
    Tensor x = b.inputs;
    float loss = 0.0f;
    Tensor dy;
    for (int s = 0; s < S(); ++s) {
      const Stage& stage = stages_[static_cast<size_t>(s)];
      used[static_cast<size_t>(s)] = forward_weights(s, g);
      use(stage, used[static_cast<size_t>(s)]);
      x = stage.forward(std::move(x), contexts[static_cast<size_t>(s)]);
      if (stage.has_loss()) {
        SavedContext loss_context;
        loss = stage.loss_forward(x, b.targets, scale, loss_context);
        dy = stage.loss_backward(loss_context);
      }
    }
    for (int s = S() - 1; s >= 0; --s) {
      const Stage& stage = stages_[static_cast<size_t>(s)];
      use(stage, backward_weights(s, g, used[static_cast<size_t>(s)]));
      dy = stage.backward(contexts[static_cast<size_t>(s)], std::move(dy));
    }
    if (!batch_updates || (g + 1) % m_ == 0) {
      for (int s = 0; s < S(); ++s) update(s);
    }
    return loss;
  }

  // Applies stage s's accumulated gradient to its newest weights, records the new version.
  void update(int s) {
    const Stage& stage = stages_[static_cast<size_t>(s)];
    auto& history = weights_[static_cast<size_t>(s)];
    const int64_t t = static_cast<int64_t>(history.size()) - 1;  // updates so far
    use(stage, history.back());
    Values now = copy_of(stage.parameters());  // the optimizer writes these in place
    use(stage, now);
    Optimizer& opt = *optimizers_[static_cast<size_t>(s)];
    if (method_.schedule == "pipemare") {
      const double tau = std::max(1, delay(s));
      const double K = static_cast<double>(method_.options.pipemare_anneal_updates);
      const double progress = K > 0 ? std::min(static_cast<double>(t) / K, 1.0) : 1.0;
      opt.set_lr(static_cast<float>(lr_ * std::pow(tau, -(1.0 - progress))));
    }
    opt.step(stage.parameters());
    for (Parameter* q : stage.parameters()) std::memset(q->grad.data<char>(), 0, q->grad.nbytes());
    history.push_back(copy_of(stage.parameters()));
    // SGD's momentum after this update (SpecTrain predicts from it).
    Values v;
    for (Parameter* q : stage.parameters()) {
      auto it = opt.state().find(q->name + "/momentum");
      if (it != opt.state().end()) v.push_back(it->second.clone());
    }
    momentum_[static_cast<size_t>(s)].push_back(v);
    // PipeMare's discrepancy average: d <- g d + (1 - g)(W_new - W_old).
    const float decay = method_.options.pipemare_decay;
    Values d = delta_[static_cast<size_t>(s)].back();
    Values next;
    const Values& old_w = history[history.size() - 2];
    const Values& new_w = history.back();
    for (size_t i = 0; i < d.size(); ++i) {
      Tensor t2 = d[i].clone();
      float* y = t2.f32();
      const float* a = new_w[i].f32();
      const float* o = old_w[i].f32();
      for (int64_t j = 0; j < t2.numel(); ++j) y[j] = decay * y[j] + (1.0f - decay) * (a[j] - o[j]);
      next.push_back(std::move(t2));
    }
    delta_[static_cast<size_t>(s)].push_back(next);
    use(stage, history.back());
  }

  Method method_;
  int p_, m_;
  float lr_;
  std::shared_ptr<Model> model_;
  std::vector<Stage> stages_;
  std::vector<std::unique_ptr<Optimizer>> optimizers_;
  std::vector<std::vector<Values>> weights_, momentum_, delta_;  // [stage][version]
  int64_t g_ = 0;
};

// The most weight versions rank s keeps alive at once (counting its current weights).
int expected_versions(const Method& method, int p, int s) {
  if (method.schedule == "pipedream") return method.options.vertical_sync ? p : p - s;
  if (method.schedule == "pipedream-2bw") return 2;
  if (method.schedule == "spectrain") return method.options.spectrain_version == 1 ? 1 : p - s + 1;
  return 1;  // pipemare
}

// What an asynchronous schedule cannot do is refused before anything runs, naming what clashes.
TEST(AsyncOptions, RefusedWithTheScheduleAndTheOptionNamed) {
  auto error_of = [](const PipelineOptions& o) -> std::string {
    try {
      PipelineTrainer t(testing::tiny_mlp(2), o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return "";
  };
  auto make = [](const std::string& schedule) {
    PipelineOptions o;
    o.schedule = schedule;
    o.ranks = 2;
    o.base.micro_batches = 2;
    return o;
  };
  PipelineOptions o = make("spectrain");
  o.async.vertical_sync = true;
  EXPECT_NE(error_of(o).find("vertical_sync applies to schedule pipedream only, not to 'spectrain'"), std::string::npos);
  o = make("1f1b");
  o.async.pipemare_anneal_updates = 7;
  EXPECT_NE(error_of(o).find("pipemare_anneal_updates applies to schedule pipemare only, not to '1f1b'"),
            std::string::npos);
  o = make("pipemare");
  o.async.pipemare_decay = 1.0f;
  EXPECT_NE(error_of(o).find("pipemare_decay must be in [0, 1)"), std::string::npos);
  o = make("pipedream");
  o.activation_policy = "offload-host";
  EXPECT_NE(error_of(o).find("activation policy 'offload-host' cannot apply to asynchronous schedule 'pipedream'"),
            std::string::npos);
  o = make("pipemare");
  o.activation_policy = "recompute";
  EXPECT_NE(error_of(o).find("keeps no copy of the weights a forward used"), std::string::npos);
  o = make("pipedream-2bw");
  o.base.optimizer.clip_norm = 1.0f;
  EXPECT_NE(error_of(o).find("cannot apply to asynchronous schedule 'pipedream-2bw'"), std::string::npos);
  o = make("spectrain");  // AdamW: nothing to predict from
  EXPECT_NE(error_of(o).find("spectrain predicts weights from SGD's momentum"), std::string::npos);
  o = make("pipedream");
  o.ranks = 4;
  EXPECT_NE(error_of(o).find("micro_batches (2) must be >= ranks - 1 (3)"), std::string::npos);
  o = make("pipedream");
  o.schedule_text = "name: custom\nranks: 1\nstages: 1\nmicrobatches: 2\nrank 0: 0F0 0BW0 0UPDATE0 0F1 0BW1 0UPDATE1\n";
  EXPECT_NE(error_of(o).find("has UPDATE or HEAD actions"), std::string::npos) << error_of(o);
}

// A drained asynchronous trainer saves its stages' optimizers and update counts: a trainer that
// loads the checkpoint continues exactly as the one that saved it (both refill the pipeline).
TEST(AsyncCheckpoint, ADrainedPipelineResumesExactly) {
  for (const std::string schedule : {"pipedream", "pipedream-2bw", "spectrain"}) {
    for (bool vertical_sync : {false, true}) {
      if (vertical_sync && schedule != "pipedream") continue;
      PipelineOptions o;
      o.schedule = schedule;
      o.ranks = 3;
      o.async.vertical_sync = vertical_sync;
      o.base.micro_batches = 3;
      o.base.seed = 2;
      o.base.optimizer.kind = OptimizerConfig::Kind::kSgd;
      o.base.optimizer.lr = 0.05f;
      o.base.optimizer.momentum = 0.9f;
      PipelineTrainer first(testing::tiny_mlp(4), o);
      for (int step = 0; step < 3; ++step) first.step(testing::data_for(first.model(), 3, step));
      const std::string path = ::testing::TempDir() + "/async_" + schedule + ".ckpt";
      EXPECT_THROW(save_trainer_checkpoint(first, path), Error) << "saved with micro-batches in flight";
      first.drain();
      save_trainer_checkpoint(first, path);
      PipelineTrainer resumed(testing::tiny_mlp(4), o);
      load_trainer_checkpoint(resumed, path);
      EXPECT_EQ(resumed.parameter_checksum(), first.parameter_checksum());
      for (int step = 3; step < 5; ++step) {
        const Batch batch = testing::data_for(first.model(), 3, step);
        EXPECT_EQ(first.step(batch).loss, resumed.step(batch).loss) << schedule << " step " << step;
      }
      first.drain();
      resumed.drain();
      EXPECT_EQ(resumed.parameter_checksum(), first.parameter_checksum()) << schedule;
      EXPECT_EQ(resumed.parts().async.stage_weights(0)->updates(), first.parts().async.stage_weights(0)->updates());
    }
  }
  PipelineOptions o;
  o.schedule = "pipemare";
  o.ranks = 2;
  o.base.micro_batches = 2;
  PipelineTrainer mare(testing::tiny_mlp(2), o);
  try {
    save_trainer_checkpoint(mare, ::testing::TempDir() + "/pipemare.ckpt");
    ADD_FAILURE() << "a pipemare checkpoint was saved";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("discrepancy average"), std::string::npos) << e.what();
  }
}

class AsyncOracle : public ::testing::TestWithParam<std::tuple<Method, int, ModelKind>> {};

TEST_P(AsyncOracle, BitwiseEqualToTheRecurrence) {
  const Method method = std::get<0>(GetParam());
  const int p = std::get<1>(GetParam());
  const ModelKind kind = std::get<2>(GetParam());
  const int m = p + 1, steps = 3;
  PipelineOptions o;
  o.schedule = method.schedule;
  o.ranks = p;
  o.async = method.options;
  o.base.micro_batches = m;
  o.base.seed = 5 + p;
  o.base.optimizer = optimizer_for(method, p);
  PipelineTrainer pipe(make_model(kind), o);
  ASSERT_TRUE(pipe.plan().schedule.traits.asynchronous());
  Oracle oracle(kind, method, p, m, o.base, pipe.parts().stages.ranges());
  std::vector<int> peak_versions(static_cast<size_t>(p), 0);
  std::vector<size_t> peak_bytes(static_cast<size_t>(p), 0);
  auto note = [&] {
    for (int r = 0; r < p; ++r) {
      const RankStats& rs = pipe.last_stats().ranks[static_cast<size_t>(r)];
      peak_versions[static_cast<size_t>(r)] = std::max(peak_versions[static_cast<size_t>(r)], rs.peak_weight_versions);
      peak_bytes[static_cast<size_t>(r)] = std::max(peak_bytes[static_cast<size_t>(r)], rs.peak_weight_version_bytes);
    }
  };
  for (int step = 0; step < steps; ++step) {
    const Batch batch = testing::data_for(pipe.model(), m, step);
    const StepResult r = pipe.step(batch);
    note();
    const double want = oracle.step(split_into_micro_batches(oracle.model(), batch, m));
    EXPECT_EQ(r.loss, want) << "step " << step;
    EXPECT_FALSE(pipe.parts().async.pipeline_empty() && p > 1) << "the pipeline drained after step " << step;
  }
  pipe.drain();
  note();
  EXPECT_TRUE(pipe.parts().async.pipeline_empty());
  std::string diff;
  EXPECT_TRUE(testing::parameters_bitwise_equal(pipe.model(), oracle.model(), &diff))
      << method.label << " p=" << p << ": parameter " << diff << " differs from the oracle";
  // The stashing methods also run with activation recompute: a forward rerun with the weights the
  // forward used rebuilds its activations exactly.
  if (method.schedule == "pipedream" || method.schedule == "pipedream-2bw") {
    PipelineOptions r = o;
    r.activation_policy = "recompute";
    PipelineTrainer recomputed(make_model(kind), r);
    int recomputes = 0;
    for (int step = 0; step < steps; ++step) {
      recomputed.step(testing::data_for(pipe.model(), m, step));
      for (const RankStats& rs : recomputed.last_stats().ranks) recomputes += rs.recomputes;
    }
    recomputed.drain();
    EXPECT_EQ(recomputes, steps * m * p - (p * (p - 1)) / 2) << "one RECOMPUTE per backward run in the steps";
    EXPECT_TRUE(testing::parameters_bitwise_equal(recomputed.model(), oracle.model(), &diff))
        << method.label << " with recompute, p=" << p << ": parameter " << diff << " differs from the oracle";
  }
  for (int r = 0; r < p; ++r) {
    const StageWeights* w = pipe.parts().async.stage_weights(r);
    ASSERT_NE(w, nullptr);
    std::cout << method.label << " p=" << p << " rank " << r << ": " << peak_versions[static_cast<size_t>(r)]
              << " weight versions alive at most, " << peak_bytes[static_cast<size_t>(r)] << " bytes ("
              << w->version_bytes() << " per version)\n";
    EXPECT_EQ(peak_versions[static_cast<size_t>(r)], expected_versions(method, p, r)) << "rank " << r;
    EXPECT_EQ(peak_bytes[static_cast<size_t>(r)], static_cast<size_t>(expected_versions(method, p, r)) * w->version_bytes());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Methods, AsyncOracle,
    ::testing::Combine(::testing::ValuesIn(methods()), ::testing::Values(2, 4),
                       ::testing::Values(ModelKind::kMlp, ModelKind::kGpt)),
    [](const ::testing::TestParamInfo<std::tuple<Method, int, ModelKind>>& info) {
      return std::get<0>(info.param).label + "_p" + std::to_string(std::get<1>(info.param)) +
             (std::get<2>(info.param) == ModelKind::kMlp ? "_mlp" : "_gpt");
    });

}  // namespace
}  // namespace pf::exec

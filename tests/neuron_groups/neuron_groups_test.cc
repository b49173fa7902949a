// Local learning with neuron groups (runtime/neuron_groups) against a sequential reference written
// here: the same grouped network built from its own slices of the MLP, trained one micro-batch at
// a time, stage after stage, group after group, with the head, the diversity term and the update
// in the order the paper's code runs them. The threaded run (one rank per group) must equal it
// bitwise: every group's layers and head, the whole model written back, every step's loss. With
// one group per stage the trainer must also equal the pipelined ppll (PipelineTrainer) bitwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "runtime/core/error.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/layers/activations.h"
#include "runtime/layers/cross_entropy.h"
#include "runtime/layers/linear.h"
#include "runtime/models/init.h"
#include "runtime/neuron_groups/diversity.h"
#include "runtime/neuron_groups/neuron_group_trainer.h"
#include "runtime/train/local_heads.h"
#include "runtime/train/micro_batches.h"
#include "tests/execution/test_util.h"

namespace pf::groups {
namespace {

// An MLP of `hidden` layers of width `width`.
std::shared_ptr<Model> mlp(int hidden, int64_t width) {
  MlpConfig c;
  c.input_dim = 10;
  c.hidden.assign(static_cast<size_t>(hidden), width);
  c.classes = 5;
  return build_mlp(c);
}

Batch batch_for(const Model& model, int m, int step) {
  return testing::teacher_batch(4 * m, model.input_spec().features, model.input_spec().classes, 300 + step);
}

// The reference: its own copy of the MLP (initialised from the seed), cut into stages at the
// given layer ranges, every stage but the last into G groups whose linears it slices itself.
class Reference {
 public:
  Reference(int hidden, int64_t width, const std::vector<std::pair<int, int>>& ranges, int G, const TrainerOptions& base,
            int every, const NeuronGroupOptions& groups)
      : ranges_(ranges), G_(G), every_(every), groups_(groups), whole_(mlp(hidden, width)) {
    scale_ = 1.0f / static_cast<float>(every);
    initialize_parameters(whole_->parameters(), base.seed);
    const int K = static_cast<int>(ranges.size());
    for (int k = 0; k + 1 < K; ++k) {
      for (int g = 0; g < G; ++g) {
        Group grp;
        std::vector<std::unique_ptr<Layer>> layers;
        bool first = true;
        int64_t in_width = 0;
        for (int i = ranges[k].first; i < ranges[k].second; ++i) {
          Layer& layer = *whole_->layers()[static_cast<size_t>(i)];
          if (std::string(layer.type()) == "relu") {
            layers.push_back(std::make_unique<ReLU>(layer.name()));
            continue;
          }
          PF_CHECK_ARG(std::string(layer.type()) == "linear", "reference: unexpected layer ", layer.type());
          Parameter* w = layer.parameters()[0];
          Parameter* b = layer.parameters()[1];
          const int64_t out = w->value.dim(0), in = w->value.dim(1);
          const int64_t gout = out / G, gin = first ? in : in / G, col = first ? 0 : g * gin;
          auto lin = std::make_unique<Linear>(layer.name(), gin, gout);
          Parameter* lw = lin->parameters()[0];
          Parameter* lb = lin->parameters()[1];
          for (int64_t r = 0; r < gout; ++r)
            for (int64_t c = 0; c < gin; ++c) lw->value.f32()[r * gin + c] = w->value.f32()[(g * gout + r) * in + col + c];
          for (int64_t r = 0; r < gout; ++r) lb->value.f32()[r] = b->value.f32()[g * gout + r];
          if (first) in_width = in;
          first = false;
          layers.push_back(std::move(lin));
          grp.width = gout;
        }
        InputSpec spec;
        spec.features = in_width;
        spec.classes = whole_->input_spec().classes;
        grp.body = std::make_unique<Model>(spec, std::move(layers), std::make_unique<CrossEntropyLoss>());
        grp.stage = std::make_unique<Stage>(*grp.body, 0, 2, 0, static_cast<int>(grp.body->layers().size()));
        grp.head = make_local_head(*whole_, k, ranges[k].second, "linear");
        initialize_parameters(grp.head->parameters(), local_head_seed(base.seed, k * G + g));
        grp.head_stage = std::make_unique<Stage>(*grp.head, 0, 1, 0, static_cast<int>(grp.head->layers().size()));
        grp.optimizer = make_optimizer(base.optimizer);
        grp.params = grp.stage->parameters();
        for (Parameter* p : grp.head->parameters()) grp.params.push_back(p);
        groups_of_.push_back(std::move(grp));
      }
    }
    last_ = std::make_unique<Stage>(*whole_, K - 1, K, ranges[K - 1].first, ranges[K - 1].second);
    last_optimizer_ = make_optimizer(base.optimizer);
  }

  void micro_batch(const Batch& b) {
    const int64_t e = trained_++;
    const int K = static_cast<int>(ranges_.size());
    Tensor x = b.inputs;
    for (int k = 0; k + 1 < K; ++k) {
      std::vector<Tensor> outputs;
      std::vector<std::vector<SavedContext>> contexts(static_cast<size_t>(G_));
      for (int g = 0; g < G_; ++g) outputs.push_back(group(k, g).stage->forward(x, contexts[static_cast<size_t>(g)]));
      // The stage output: the groups' units side by side.
      const int64_t rows = x.dim(0), gw = outputs[0].dim(1), w = gw * G_;
      Tensor full = Tensor::empty({rows, w});
      for (int g = 0; g < G_; ++g)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < gw; ++c) full.f32()[r * w + g * gw + c] = outputs[static_cast<size_t>(g)].f32()[r * gw + c];
      std::vector<Tensor> logits(static_cast<size_t>(G_));
      std::vector<std::vector<SavedContext>> head_contexts(static_cast<size_t>(G_));
      std::vector<Tensor> dlogits(static_cast<size_t>(G_));
      for (int g = 0; g < G_; ++g) {
        Group& grp = group(k, g);
        SavedContext loss_context;
        logits[static_cast<size_t>(g)] = grp.head_stage->forward(full, head_contexts[static_cast<size_t>(g)]);
        grp.head_stage->loss_forward(logits[static_cast<size_t>(g)], b.targets, scale_, loss_context);
        dlogits[static_cast<size_t>(g)] = grp.head_stage->loss_backward(loss_context);
      }
      if (groups_.diversity_weight > 0 && G_ > 1) {
        std::vector<const float*> all;
        for (const Tensor& t : logits) all.push_back(t.f32());
        for (int g = 0; g < G_; ++g) {
          Tensor grad = Tensor::empty(logits[0].shape());
          diversity_loss<float>(all, b.targets.i32(), rows, logits[0].dim(1), groups_.diversity_temperature, g, grad.f32());
          for (int64_t i = 0; i < grad.numel(); ++i)
            dlogits[static_cast<size_t>(g)].f32()[i] += groups_.diversity_weight * scale_ * grad.f32()[i];
        }
      }
      for (int g = 0; g < G_; ++g) {
        Group& grp = group(k, g);
        const Tensor dfull = grp.head_stage->backward(head_contexts[static_cast<size_t>(g)], dlogits[static_cast<size_t>(g)]);
        Tensor dy = Tensor::empty({rows, gw});
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < gw; ++c) dy.f32()[r * gw + c] = dfull.f32()[r * w + g * gw + c];
        grp.stage->backward(contexts[static_cast<size_t>(g)], dy);
        if ((e + 1) % every_ == 0) step(*grp.optimizer, grp.params);
      }
      x = full;
    }
    std::vector<SavedContext> contexts;
    SavedContext loss_context;
    const Tensor y = last_->forward(x, contexts);
    losses_.push_back(last_->loss_forward(y, b.targets, scale_, loss_context));
    last_->backward(contexts, last_->loss_backward(loss_context));
    if ((e + 1) % every_ == 0) step(*last_optimizer_, last_->parameters());
  }

  // The mean unscaled loss of the last stage over micro-batches [from, to).
  double loss(int64_t from, int64_t to) const {
    double sum = 0;
    for (int64_t i = from; i < to; ++i) sum += losses_[static_cast<size_t>(i)];
    return to - from == every_ ? sum : sum / (static_cast<double>(scale_) * static_cast<double>(to - from));
  }
  const std::vector<Parameter*>& group_parameters(int k, int g) { return group(k, g).params; }
  const std::vector<Parameter*>& last_parameters() const { return last_->parameters(); }

 private:
  struct Group {
    std::unique_ptr<Model> body, head;
    std::unique_ptr<Stage> stage, head_stage;
    std::unique_ptr<Optimizer> optimizer;
    std::vector<Parameter*> params;
    int64_t width = 0;
  };
  Group& group(int k, int g) { return groups_of_[static_cast<size_t>(k * G_ + g)]; }
  static void step(Optimizer& opt, const std::vector<Parameter*>& params) {
    opt.step(params);
    for (Parameter* p : params) std::memset(p->grad.data<char>(), 0, p->grad.nbytes());
  }

  std::vector<std::pair<int, int>> ranges_;
  int G_, every_;
  NeuronGroupOptions groups_;
  float scale_ = 1.0f;
  std::shared_ptr<Model> whole_;
  std::vector<Group> groups_of_;
  std::unique_ptr<Stage> last_;
  std::unique_ptr<Optimizer> last_optimizer_;
  std::vector<float> losses_;
  int64_t trained_ = 0;
};

bool bitwise_equal(const std::vector<Parameter*>& a, const std::vector<Parameter*>& b, std::string* diff) {
  if (a.size() != b.size()) {
    *diff = "parameter counts " + std::to_string(a.size()) + " and " + std::to_string(b.size());
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i]->value.shape() != b[i]->value.shape() ||
        std::memcmp(a[i]->value.f32(), b[i]->value.f32(), a[i]->value.nbytes()) != 0) {
      *diff = a[i]->name;
      return false;
    }
  }
  return true;
}

OptimizerConfig adamw() {
  OptimizerConfig o;
  o.kind = OptimizerConfig::Kind::kAdamW;
  o.lr = 1e-2f;
  o.weight_decay = 0.01f;
  return o;
}

OptimizerConfig sgd() {
  OptimizerConfig o;
  o.kind = OptimizerConfig::Kind::kSgd;
  o.lr = 0.05f;
  o.momentum = 0.9f;
  return o;
}

struct Case {
  int hidden, stages, groups;
  bool per_step;       // local-updates rather than ppll
  float diversity;
  bool use_sgd;
};

class NeuronGroups : public ::testing::TestWithParam<Case> {};

TEST_P(NeuronGroups, BitwiseEqualToTheSequentialReference) {
  const Case c = GetParam();
  const int m = 4, steps = 3;
  const int64_t width = 12;
  TrainerOptions base;
  base.micro_batches = m;
  base.seed = 21 + c.groups;
  base.optimizer = c.use_sgd ? sgd() : adamw();
  NeuronGroupOptions o;
  o.groups = c.groups;
  o.stages = c.stages;
  o.diversity_weight = c.diversity;
  const int every = c.per_step ? m : 1;
  NeuronGroupTrainer trainer(mlp(c.hidden, width), base, o, every);
  const GroupNetwork& net = trainer.network();
  ASSERT_EQ(net.ranks(), (c.stages - 1) * c.groups + 1);
  Reference ref(c.hidden, width, net.ranges(), c.groups, base, every, o);
  int64_t reference_trained = 0;
  const int lag = c.stages - 1;
  for (int step = 0; step < steps; ++step) {
    const Batch batch = batch_for(trainer.model(), m, step);
    const StepResult r = trainer.step(batch);
    for (const Batch& b : split_into_micro_batches(trainer.model(), batch, m)) ref.micro_batch(b);
    reference_trained += m;
    const int64_t from = std::max<int64_t>(0, static_cast<int64_t>(step) * m - lag);
    EXPECT_EQ(r.loss, ref.loss(from, reference_trained - lag)) << "step " << step;
    // Only forward values cross ranks, in the amounts the layout gives.
    const int64_t rows = batch.rows() / m, bytes_of_group = rows * (width / c.groups) * 4;
    const int64_t micro_batches = step == 0 ? m : m;  // every stage but the last sends m per step
    int64_t expect_stage = 0, expect_group = 0, expect_logits = 0;
    for (int k = 0; k + 1 < c.stages; ++k) {
      const int64_t sent = step == 0 ? m - k : micro_batches;
      const int receivers = k + 2 < c.stages ? c.groups : 1;
      expect_stage += sent * c.groups * receivers * bytes_of_group;
      expect_group += sent * c.groups * (c.groups - 1) * bytes_of_group;
      if (c.diversity > 0) expect_logits += sent * c.groups * (c.groups - 1) * rows * 5 * 4;
    }
    EXPECT_EQ(trainer.last_traffic().stage_outputs, expect_stage) << "step " << step;
    EXPECT_EQ(trainer.last_traffic().group_outputs, expect_group) << "step " << step;
    EXPECT_EQ(trainer.last_traffic().logits, expect_logits) << "step " << step;
  }
  trainer.drain();
  std::string diff;
  for (int k = 0; k + 1 < c.stages; ++k)
    for (int g = 0; g < c.groups; ++g)
      EXPECT_TRUE(bitwise_equal(trainer.network().part(net.rank_of(k, g)).parameters, ref.group_parameters(k, g), &diff))
          << "stage " << k << " group " << g << ": " << diff;
  EXPECT_TRUE(bitwise_equal(trainer.network().part(net.ranks() - 1).parameters, ref.last_parameters(), &diff))
      << "last stage: " << diff;
}

INSTANTIATE_TEST_SUITE_P(Layouts, NeuronGroups,
                         ::testing::Values(Case{4, 2, 2, false, 0.0f, false}, Case{4, 2, 3, false, 0.5f, false},
                                           Case{5, 3, 2, false, 0.5f, true}, Case{4, 2, 4, true, 0.5f, false},
                                           Case{5, 3, 3, true, 0.0f, true}, Case{3, 2, 1, false, 0.5f, false}));

// The whole model written back computes the grouped network: the same logits within rounding, and
// its weights between groups are zero.
TEST(NeuronGroupNetwork, TheWholeModelComputesTheGroupedNetwork) {
  TrainerOptions base;
  base.micro_batches = 2;
  base.optimizer = adamw();
  NeuronGroupOptions o;
  o.groups = 3;
  o.stages = 2;
  NeuronGroupTrainer trainer(mlp(4, 12), base, o, 1);
  for (int s = 0; s < 2; ++s) trainer.step(batch_for(trainer.model(), 2, s));
  trainer.drain();
  const Model& whole = trainer.model();
  const GroupNetwork& net = trainer.network();
  // fc1 (layer 2) is inside stage 0 and not its first linear: block-diagonal.
  const Parameter* w = whole.find_parameter("fc1.weight");
  ASSERT_NE(w, nullptr);
  int64_t nonzero_off = 0, nonzero_diag = 0;
  for (int64_t r = 0; r < 12; ++r)
    for (int64_t c = 0; c < 12; ++c) (r / 4 == c / 4 ? nonzero_diag : nonzero_off) += w->value.f32()[r * 12 + c] != 0.0f;
  EXPECT_EQ(nonzero_off, 0);
  EXPECT_EQ(nonzero_diag, 3 * 16);
  // Forward: groups side by side against the whole model.
  const Batch b = batch_for(whole, 1, 9);
  std::vector<Tensor> parts;
  for (int g = 0; g < 3; ++g) {
    std::vector<SavedContext> ctx;
    parts.push_back(net.part(net.rank_of(0, g)).body_stage->forward(b.inputs, ctx));
  }
  std::vector<SavedContext> ctx;
  const Stage first(whole, 0, 2, net.ranges()[0].first, net.ranges()[0].second);
  const Tensor y = first.forward(b.inputs, ctx);
  for (int64_t r = 0; r < y.dim(0); ++r)
    for (int64_t c = 0; c < 12; ++c)
      EXPECT_NEAR(y.f32()[r * 12 + c], parts[static_cast<size_t>(c / 4)].f32()[r * 4 + c % 4], 1e-5f);
}

// With one group per stage the trainer is ppll: bitwise equal to the pipelined PipelineTrainer.
TEST(NeuronGroupNetwork, OneGroupIsPpll) {
  for (const std::string schedule : {"ppll", "local-updates"}) {
    const int m = 3, p = 3;
    exec::PipelineOptions o;
    o.schedule = schedule;
    o.ranks = p;
    o.local_head = "linear";
    o.base.micro_batches = m;
    o.base.seed = 5;
    o.base.optimizer = adamw();
    NeuronGroupOptions g;
    g.groups = 1;
    g.stages = p;
    NeuronGroupTrainer groups(mlp(5, 12), o.base, g, schedule == "ppll" ? 1 : m);
    for (const auto& r : groups.network().ranges()) o.layers_per_stage.push_back(r.second - r.first);
    exec::PipelineTrainer pipe(mlp(5, 12), o);
    for (int step = 0; step < 3; ++step) {
      const Batch batch = batch_for(pipe.model(), m, step);
      const StepResult a = pipe.step(batch);
      const StepResult b = groups.step(batch);
      EXPECT_EQ(a.loss, b.loss) << schedule << " step " << step;
    }
    pipe.drain();
    groups.drain();
    std::string diff;
    EXPECT_TRUE(exec::testing::parameters_bitwise_equal(pipe.model(), groups.model(), &diff)) << schedule << ": " << diff;
    for (int s = 0; s + 1 < p; ++s)
      EXPECT_TRUE(bitwise_equal(pipe.parts().async.local_head(s)->parameters(), groups.network().part(s).head->parameters(),
                                &diff))
          << schedule << " head " << s << ": " << diff;
  }
}

// The diversity term: its value against a formula written here, its gradient against central
// differences (double precision), and float against double.
TEST(Diversity, ValueAndGradient) {
  const int H = 3, rows = 4, classes = 5;
  std::mt19937 gen(7);
  std::normal_distribution<double> dist(0.0, 1.5);
  std::vector<std::vector<double>> z(H, std::vector<double>(rows * classes));
  for (auto& h : z)
    for (double& v : h) v = dist(gen);
  const std::vector<int32_t> y = {0, 3, 4, 1};
  const double T = 3.0;
  auto value = [&](const std::vector<std::vector<double>>& logits) {
    // sum over rows, k != l of cos(non-target softmax_k, non-target softmax_l) / (rows H (H-1)).
    double total = 0;
    for (int i = 0; i < rows; ++i) {
      std::vector<std::vector<double>> v(H);
      for (int k = 0; k < H; ++k) {
        double mx = -1e300, sum = 0;
        for (int j = 0; j < classes; ++j) mx = std::max(mx, logits[k][i * classes + j] / T);
        std::vector<double> q(classes);
        for (int j = 0; j < classes; ++j) sum += q[j] = std::exp(logits[k][i * classes + j] / T - mx);
        double s = 0;
        for (int j = 0; j < classes; ++j) s += (q[j] /= sum) * (j != y[i]);
        double sq = 0;
        v[k].resize(classes);
        for (int j = 0; j < classes; ++j) sq += std::pow(v[k][j] = (j != y[i]) * q[j] / (s + 1e-8), 2);
        for (int j = 0; j < classes; ++j) v[k][j] /= std::sqrt(sq + 1e-8);
      }
      for (int k = 0; k < H; ++k)
        for (int l = 0; l < H; ++l)
          if (k != l)
            for (int j = 0; j < classes; ++j) total += v[k][j] * v[l][j];
    }
    return total / (rows * H * (H - 1));
  };
  std::vector<const double*> ptrs;
  for (const auto& h : z) ptrs.push_back(h.data());
  std::vector<double> grad(rows * classes);
  const double loss = diversity_loss<double>(ptrs, y.data(), rows, classes, T, 1, grad.data());
  EXPECT_NEAR(loss, value(z), 1e-14);
  EXPECT_GT(loss, 0.0);
  for (int i = 0; i < rows * classes; ++i) {
    auto zp = z, zm = z;
    zp[1][i] += 1e-6;
    zm[1][i] -= 1e-6;
    EXPECT_NEAR(grad[i], (value(zp) - value(zm)) / 2e-6, 1e-8) << "element " << i;
  }
  std::vector<std::vector<float>> zf(H);
  std::vector<const float*> fptrs;
  for (int k = 0; k < H; ++k) {
    zf[k].assign(z[k].begin(), z[k].end());
    fptrs.push_back(zf[k].data());
  }
  std::vector<float> fgrad(rows * classes);
  EXPECT_NEAR(diversity_loss<float>(fptrs, y.data(), rows, classes, 3.0f, 1, fgrad.data()), loss, 1e-6);
  for (int i = 0; i < rows * classes; ++i) EXPECT_NEAR(fgrad[i], grad[i], 1e-6);
  // One head: no diversity to measure.
  EXPECT_EQ(diversity_loss<double>({ptrs[0]}, y.data(), rows, classes, T, 0, grad.data()), 0.0);
}

// Bad layouts are refused with what is wrong and where.
TEST(NeuronGroupNetwork, RefusesWhatDoesNotSplit) {
  TrainerOptions base;
  base.micro_batches = 2;
  auto message = [&](std::shared_ptr<Model> model, NeuronGroupOptions o, TrainerOptions b, int every) {
    try {
      NeuronGroupTrainer t(std::move(model), b, o, every);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  NeuronGroupOptions o;
  o.groups = 5;
  EXPECT_NE(message(mlp(4, 12), o, base, 1).find("has 12 outputs, which do not split into 5 groups"), std::string::npos);
  o.groups = 2;
  o.stages = 3;
  o.layers_per_stage = {3, 2, 4};
  EXPECT_NE(message(mlp(4, 12), o, base, 1).find("stage 1 begins with layer 3"), std::string::npos);
  o.stages = 2;
  o.layers_per_stage = {4, 4};
  EXPECT_NE(message(mlp(4, 12), o, base, 1).find("sums to 8 layers; the model has 9"), std::string::npos);
  o.layers_per_stage.clear();
  o.stages = 4;
  EXPECT_NE(message(mlp(4, 12), o, base, 1).find("micro_batches (2) must be >= stages - 1 (3)"), std::string::npos);
  o.stages = 2;
  EXPECT_NE(message(exec::testing::tiny_gpt(2), o, base, 1).find("must take features"), std::string::npos);
  TrainerOptions clipped = base;
  clipped.optimizer.clip_norm = 1.0f;
  EXPECT_NE(message(mlp(4, 12), o, clipped, 1).find("clip_norm must be 0"), std::string::npos);
  o.diversity_weight = -1.0f;
  EXPECT_NE(message(mlp(4, 12), o, base, 1).find("diversity_weight"), std::string::npos);
}

}  // namespace
}  // namespace pf::groups

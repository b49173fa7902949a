// Local learning (ppll, local-updates) against a sequential reference that trains one micro-batch
// at a time, one stage after another, each stage on its own auxiliary head (the last on the
// model's loss), updating every stage and its head in the same order as the pipeline does. After
// three steps and the drain the pipelined run's parameters (model and heads) must equal the
// reference's bitwise, and every step's loss too.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "runtime/execution/pipeline_trainer.h"
#include "runtime/models/init.h"
#include "runtime/schedules/generators.h"
#include "runtime/schedules/lowering.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/validator.h"
#include "runtime/train/local_heads.h"
#include "runtime/train/micro_batches.h"
#include "tests/execution/test_util.h"

namespace pf::exec {
namespace {

// The ResNet's stages end in feature maps (heads: global average pool, then the kind's layers),
// the ViT's in patch tokens (heads: its class token, then the kind's layers).
enum class ModelKind { kMlp, kGpt, kResNet, kViT };

std::shared_ptr<Model> make_model(ModelKind kind) {
  switch (kind) {
    case ModelKind::kMlp: return testing::tiny_mlp(6);
    case ModelKind::kGpt: return testing::tiny_gpt(4);
    case ModelKind::kResNet: return testing::tiny_resnet();
    case ModelKind::kViT: return testing::tiny_vit();
  }
  return nullptr;
}

const char* kind_name(ModelKind kind) {
  switch (kind) {
    case ModelKind::kMlp: return "mlp";
    case ModelKind::kGpt: return "gpt";
    case ModelKind::kResNet: return "resnet";
    case ModelKind::kViT: return "vit";
  }
  return "";
}

class LocalReference {
 public:
  LocalReference(ModelKind kind, const std::string& schedule, int p, int m, const TrainerOptions& base,
                 const std::vector<StageRange>& partition, const std::string& head_kind)
      : p_(p), m_(m), every_(schedule == "local-updates" ? m : 1), model_(make_model(kind)) {
    scale_ = schedule == "local-updates" ? 1.0f / static_cast<float>(m) : 1.0f;
    initialize_parameters(model_->parameters(), base.seed);
    std::vector<std::pair<int, int>> ranges;
    for (const StageRange& r : partition) ranges.emplace_back(r.begin, r.end);
    stages_ = make_stages(*model_, ranges);
    for (int s = 0; s < static_cast<int>(stages_.size()); ++s) {
      optimizers_.push_back(make_optimizer(base.optimizer));
      std::vector<Parameter*> params = stages_[static_cast<size_t>(s)].parameters();
      if (s + 1 < static_cast<int>(stages_.size())) {
        heads_.push_back(make_local_head(*model_, s, ranges[static_cast<size_t>(s)].second, head_kind));
        initialize_parameters(heads_.back()->parameters(), local_head_seed(base.seed, s));
        const auto& hp = heads_.back()->parameters();
        params.insert(params.end(), hp.begin(), hp.end());
      }
      params_.push_back(params);
    }
    for (const auto& h : heads_) head_stages_.push_back(make_stages(*h, {{0, static_cast<int>(h->layers().size())}})[0]);
  }

  // Trains the micro-batches; returns the loss a pipelined step reports: the mean of the last
  // stage's losses of the micro-batches it forwarded in that step (it lags p - 1 micro-batches).
  double step(const std::vector<Batch>& micro, int step) {
    for (const Batch& b : micro) micro_batch(b);
    const int64_t lag = p_ - 1;
    const int64_t from = std::max<int64_t>(0, static_cast<int64_t>(step) * m_ - lag);
    const int64_t to = static_cast<int64_t>(step + 1) * m_ - lag;
    double sum = 0.0;
    int count = 0;
    for (int64_t g = from; g < to; ++g) {
      sum += last_losses_[static_cast<size_t>(g)];
      ++count;
    }
    if (scale_ == 1.0f) return sum / count;
    return count == m_ ? sum : sum / (static_cast<double>(scale_) * count);
  }

  const Model& model() const { return *model_; }
  const Model& head(int s) const { return *heads_[static_cast<size_t>(s)]; }

 private:
  void micro_batch(const Batch& b) {
    const int64_t g = g_++;
    const int S = static_cast<int>(stages_.size());
    Tensor x = b.inputs;
    for (int s = 0; s < S; ++s) {
      const Stage& stage = stages_[static_cast<size_t>(s)];
      std::vector<SavedContext> contexts;
      Tensor y = stage.forward(x, contexts);
      Tensor dy;
      SavedContext loss_context;
      if (s + 1 < S) {
        // The stage's own head and loss give the gradient of its output.
        const Stage& head = head_stages_[static_cast<size_t>(s)];
        std::vector<SavedContext> head_contexts;
        const Tensor logits = head.forward(y, head_contexts);
        head.loss_forward(logits, b.targets, scale_, loss_context);
        dy = head.backward(head_contexts, head.loss_backward(loss_context));
      } else {
        last_losses_.push_back(stage.loss_forward(y, b.targets, scale_, loss_context));
        dy = stage.loss_backward(loss_context);
      }
      stage.backward(contexts, std::move(dy));  // the input gradient goes nowhere
      if ((g + 1) % every_ == 0) {
        optimizers_[static_cast<size_t>(s)]->step(params_[static_cast<size_t>(s)]);
        for (Parameter* q : params_[static_cast<size_t>(s)]) std::memset(q->grad.data<char>(), 0, q->grad.nbytes());
      }
      x = y;  // detached: only the values go on
    }
  }

  int p_, m_, every_;
  float scale_ = 1.0f;
  std::shared_ptr<Model> model_;
  std::vector<Stage> stages_;
  std::vector<std::unique_ptr<Model>> heads_;
  std::vector<Stage> head_stages_;
  std::vector<std::unique_ptr<Optimizer>> optimizers_;
  std::vector<std::vector<Parameter*>> params_;  // [stage]: its parameters and its head's
  std::vector<float> last_losses_;               // [micro-batch]: the last stage's (scaled) loss
  int64_t g_ = 0;
};

OptimizerConfig optimizer_for(int p) {
  OptimizerConfig o;
  if (p == 2) {
    o.kind = OptimizerConfig::Kind::kAdamW;
    o.lr = 1e-2f;
    o.weight_decay = 0.01f;
  } else {
    o.kind = OptimizerConfig::Kind::kSgd;
    o.lr = 0.05f;
    o.momentum = 0.9f;
  }
  return o;
}

using Param = std::tuple<std::string, int, ModelKind, std::string>;

class LocalLearning : public ::testing::TestWithParam<Param> {};

TEST_P(LocalLearning, BitwiseEqualToTheSequentialReference) {
  const auto& [schedule, p, kind, head_kind] = GetParam();
  const int m = p + 1, steps = 3;
  PipelineOptions o;
  o.schedule = schedule;
  o.ranks = p;
  o.local_head = head_kind;
  o.base.micro_batches = m;
  o.base.seed = 9 + p;
  o.base.optimizer = optimizer_for(p);
  PipelineTrainer pipe(make_model(kind), o);
  ASSERT_TRUE(pipe.plan().schedule.traits.local_learning());
  EXPECT_FALSE(pipe.plan().schedule.traits.asynchronous());
  LocalReference ref(kind, schedule, p, m, o.base, pipe.parts().stages.ranges(), head_kind);
  for (int step = 0; step < steps; ++step) {
    const Batch batch = testing::data_for(pipe.model(), m, step);
    const StepResult r = pipe.step(batch);
    EXPECT_EQ(r.loss, ref.step(split_into_micro_batches(ref.model(), batch, m), step)) << "step " << step;
    // No gradient crosses ranks: the step's actions have no SEND_B or RECV_B.
    for (const auto& rank : pipe.last_timeline().ranks)
      for (const auto& ta : rank)
        EXPECT_TRUE(ta.action.kind != sched::ActionKind::kSendB && ta.action.kind != sched::ActionKind::kRecvB)
            << sched::action_to_string(ta.action);
  }
  pipe.drain();
  std::string diff;
  EXPECT_TRUE(testing::parameters_bitwise_equal(pipe.model(), ref.model(), &diff)) << "parameter " << diff;
  for (int s = 0; s + 1 < p; ++s) {
    ASSERT_NE(pipe.parts().async.local_head(s), nullptr);
    EXPECT_TRUE(testing::parameters_bitwise_equal(*pipe.parts().async.local_head(s), ref.head(s), &diff))
        << "head of stage " << s << ": parameter " << diff;
  }
  EXPECT_EQ(pipe.parts().async.local_head(p - 1), nullptr) << "the last stage trains on the model's own loss";
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, LocalLearning,
    ::testing::Values(Param{"ppll", 2, ModelKind::kMlp, "auto"}, Param{"ppll", 4, ModelKind::kMlp, "auto"},
                      Param{"ppll", 2, ModelKind::kGpt, "auto"}, Param{"ppll", 4, ModelKind::kGpt, "auto"},
                      Param{"local-updates", 2, ModelKind::kMlp, "auto"},
                      Param{"local-updates", 4, ModelKind::kMlp, "auto"},
                      Param{"local-updates", 2, ModelKind::kGpt, "auto"},
                      Param{"local-updates", 4, ModelKind::kGpt, "auto"}, Param{"ppll", 4, ModelKind::kMlp, "mlp"},
                      Param{"ppll", 2, ModelKind::kGpt, "linear"}, Param{"ppll", 4, ModelKind::kResNet, "auto"},
                      Param{"local-updates", 2, ModelKind::kResNet, "auto"},
                      Param{"ppll", 2, ModelKind::kResNet, "mlp"}, Param{"ppll", 4, ModelKind::kViT, "auto"},
                      Param{"local-updates", 2, ModelKind::kViT, "linear"}),
    [](const ::testing::TestParamInfo<Param>& info) {
      std::string n = std::get<0>(info.param) + "_p" + std::to_string(std::get<1>(info.param)) + "_" +
                      kind_name(std::get<2>(info.param)) + "_" + std::get<3>(info.param);
      for (char& c : n)
        if (c == '-') c = '_';
      return n;
    });

// The heads read the stage output's form from the layers' configs: a ResNet stage ending in a
// block gives feature maps (a global average pool first), one ending in the pool gives rows; a ViT
// stage gives patch tokens (its class token first); a GPT stage tokens (a row per token).
TEST(LocalHeads, PoolWhereTheStageOutputNeedsIt) {
  using Form = StageOutput::Form;
  auto resnet = testing::tiny_resnet();  // stem, stem_norm, stem_act, blocks.0-3, pool, head
  EXPECT_EQ(stage_output(*resnet, 1, 0).form, Form::kFeatureMaps);
  EXPECT_EQ(stage_output(*resnet, 1, 0).width, 4);
  EXPECT_EQ(stage_output(*resnet, 7, 0).form, Form::kFeatureMaps);
  EXPECT_EQ(stage_output(*resnet, 7, 0).width, 8);  // the last block's second conv, read inside its residual
  EXPECT_EQ(stage_output(*resnet, 8, 0).form, Form::kRows);
  EXPECT_EQ(stage_output(*resnet, 8, 0).width, 8);
  auto vit = testing::tiny_vit();
  EXPECT_EQ(stage_output(*vit, 3, 0).form, Form::kImageTokens);
  EXPECT_EQ(stage_output(*vit, 3, 0).width, 16);
  EXPECT_EQ(stage_output(*testing::tiny_gpt(4), 3, 0).form, Form::kTokens);
  EXPECT_EQ(stage_output(*testing::tiny_mlp(6), 3, 0).form, Form::kRows);
  auto head = make_local_head(*resnet, 1, 5, "auto");
  ASSERT_EQ(head->layers().size(), 2u);
  EXPECT_STREQ(head->layers()[0]->type(), "global_avg_pool");
  auto vit_head = make_local_head(*vit, 0, 3, "auto");
  ASSERT_EQ(vit_head->layers().size(), 3u);
  EXPECT_STREQ(vit_head->layers()[0]->type(), "class_token");
  EXPECT_STREQ(vit_head->layers()[1]->type(), "layernorm");
}

// The IR: a stage with a HEAD needs no gradient from the next one; a SEND_B to it is refused.
TEST(LocalSchedules, ValidatorAndSimulator) {
  const sched::Schedule s = sched::generate_schedule("ppll", {4, 8});
  const sched::ValidationReport ok = sched::validate(s);
  EXPECT_TRUE(ok.ok()) << ok.to_string();
  sched::CostModel c = sched::CostModel::uniform(4);
  c.t_head = {0.5, 0.5, 0.5, 0.5};
  const sched::SimulationResult r = sched::simulate(s, c);
  // Per micro-batch: F 1, HEAD 0.5, BW 2 on ranks 0..2 (the last has no head): rank 0 is busy
  // 8 x 3.5 = 28 from time 0; rank 3 starts after three forwards and runs 8 x 3.
  EXPECT_DOUBLE_EQ(r.busy[0], 28.0);
  EXPECT_DOUBLE_EQ(r.busy[3], 24.0);
  for (const auto& rank : s.ranks)
    for (const auto& a : rank) EXPECT_NE(a.kind, sched::ActionKind::kSendB);
  sched::Schedule bad = sched::lower_communication(s);
  bad.ranks[1].push_back(sched::Action{sched::ActionKind::kSendB, 1, 0});
  bad.ranks[0].push_back(sched::Action{sched::ActionKind::kRecvB, 0, 0});
  const sched::ValidationReport refused = sched::validate(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.to_string().find("trains on its local head"), std::string::npos) << refused.to_string();
  sched::Schedule last = s;
  last.ranks[3].insert(last.ranks[3].begin() + 1, sched::Action{sched::ActionKind::kHead, 3, 0});
  EXPECT_NE(sched::validate(last).to_string().find("the last stage has the model's own loss"), std::string::npos);
}

// The head kind can come with the model (model JSON "local_head"); the trainer option wins.
TEST(LocalSchedules, TheModelJsonNamesTheHead) {
  const std::string json = R"({"preset": "mlp", "input_dim": 12, "hidden": [12, 12, 12, 12, 12, 12],
                               "classes": 4, "local_head": "mlp"})";
  std::shared_ptr<Model> from_json = build_model_from_json_text(json);
  EXPECT_EQ(from_json->local_head(), "mlp");
  EXPECT_EQ(from_json->to_json().at("local_head"), "mlp");
  EXPECT_EQ(build_model_from_json(from_json->to_json())->local_head(), "mlp");
  PipelineOptions o;
  o.schedule = "ppll";
  o.ranks = 2;
  o.base.micro_batches = 2;
  PipelineTrainer by_model(from_json, o);
  o.local_head = "mlp";
  PipelineTrainer by_option(testing::tiny_mlp(6), o);
  o.local_head = "auto";
  PipelineTrainer plain(testing::tiny_mlp(6), o);
  for (int step = 0; step < 2; ++step) {
    const Batch batch = testing::data_for(plain.model(), 2, step);
    by_model.step(batch);
    by_option.step(batch);
    plain.step(batch);
  }
  for (PipelineTrainer* t : {&by_model, &by_option, &plain}) t->drain();
  EXPECT_EQ(by_model.parameter_checksum(), by_option.parameter_checksum());
  EXPECT_NE(plain.parameter_checksum(), by_option.parameter_checksum());
  try {
    build_model_from_json_text(R"({"preset": "mlp", "local_head": "conv"})");
    ADD_FAILURE() << "an unknown head kind was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("local_head: unknown head 'conv'"), std::string::npos) << e.what();
  }
}

TEST(LocalSchedules, RefusedWithTheReason) {
  auto error_of = [](const PipelineOptions& o) -> std::string {
    try {
      PipelineTrainer t(testing::tiny_mlp(2), o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  PipelineOptions o;
  o.schedule = "ppll";
  o.ranks = 2;
  o.base.micro_batches = 2;
  o.local_head = "conv";
  EXPECT_NE(error_of(o).find("unknown head 'conv'"), std::string::npos) << error_of(o);
  o.local_head = "auto";
  o.activation_policy = "recompute";
  EXPECT_NE(error_of(o).find("cannot apply to local-learning schedule 'ppll'"), std::string::npos);
  o.activation_policy = "none";
  o.schedule = "1f1b";
  o.local_head = "mlp";
  EXPECT_NE(error_of(o).find("local_head 'mlp' applies to the local-learning schedules"), std::string::npos);
}

}  // namespace
}  // namespace pf::exec

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "runtime/core/error.h"
#include "runtime/models/builders.h"
#include "runtime/train/sequential_trainer.h"
#include "tests/runtime/trainer_fixtures.h"

namespace pf {
namespace {

std::shared_ptr<Model> small_mlp() {
  MlpConfig c;
  c.input_dim = 16;
  c.hidden = {32};
  c.classes = 4;
  return build_mlp(c);
}

TrainerOptions options(int micro_batches, OptimizerConfig::Kind kind, float lr) {
  TrainerOptions o;
  o.micro_batches = micro_batches;
  o.seed = 3;
  o.optimizer.kind = kind;
  o.optimizer.lr = lr;
  o.optimizer.momentum = kind == OptimizerConfig::Kind::kSgd ? 0.9f : 0.0f;
  return o;
}

std::vector<float> all_parameters(const Model& m) {
  std::vector<float> out;
  for (Parameter* p : m.parameters()) {
    auto v = p->value.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST(SequentialTrainer, MlpLossFallsWithSgdAndAdamW) {
  for (auto kind : {OptimizerConfig::Kind::kSgd, OptimizerConfig::Kind::kAdamW}) {
    SequentialTrainer trainer(small_mlp(), options(4, kind, kind == OptimizerConfig::Kind::kSgd ? 0.1f : 0.01f));
    double first = 0, last = 0;
    for (int step = 0; step < 60; ++step) {
      StepResult r = trainer.step(testing::teacher_batch(64, 16, 4, step));
      if (step == 0) first = r.loss;
      last = r.loss;
      EXPECT_EQ(r.samples, 64);
    }
    EXPECT_NEAR(first, std::log(4.0), 0.3);
    EXPECT_LT(last, 0.6 * first) << "optimizer " << static_cast<int>(kind);
    EXPECT_EQ(trainer.metrics().step, 60);
  }
}

TEST(SequentialTrainer, GptLearnsRepeatedTextBelowThreshold) {
  GptConfig c;
  c.vocab = 96;
  c.seq_len = 16;
  c.d_model = 32;
  c.heads = 2;
  c.layers = 1;
  SequentialTrainer trainer(build_gpt(c), options(2, OptimizerConfig::Kind::kAdamW, 3e-3f));
  const std::string text =
      "the quick brown fox jumps over the lazy dog. pack my box with five dozen liquor jugs. ";
  std::string corpus;
  for (int i = 0; i < 20; ++i) corpus += text;
  double loss = 0;
  for (int step = 0; step < 150; ++step) loss = trainer.step(testing::text_batch(corpus, 8, 16, step)).loss;
  // Uniform guessing is ln(96) = 4.56; the text is periodic, so a working model gets far below.
  EXPECT_LT(loss, 1.5);
}

TEST(SequentialTrainer, RunsAreBitwiseReproducible) {
  std::vector<float> runs[2];
  for (auto& run : runs) {
    SequentialTrainer trainer(small_mlp(), options(4, OptimizerConfig::Kind::kAdamW, 0.01f));
    for (int step = 0; step < 5; ++step) trainer.step(testing::teacher_batch(32, 16, 4, step));
    run = all_parameters(trainer.model());
  }
  ASSERT_EQ(runs[0].size(), runs[1].size());
  EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * 4), 0);
}

TEST(SequentialTrainer, MicroBatchesAccumulateToTheFullBatchGradient) {
  // Same data, m = 1 vs m = 4: equal up to float rounding (not bitwise: different sum order).
  std::vector<float> result[2];
  int m_values[2] = {1, 4};
  for (int i = 0; i < 2; ++i) {
    SequentialTrainer trainer(small_mlp(), options(m_values[i], OptimizerConfig::Kind::kSgd, 0.1f));
    for (int step = 0; step < 3; ++step) trainer.step(testing::teacher_batch(32, 16, 4, step));
    result[i] = all_parameters(trainer.model());
  }
  for (size_t j = 0; j < result[0].size(); ++j) ASSERT_NEAR(result[0][j], result[1][j], 1e-5) << j;
}

TEST(SequentialTrainer, DataSourceFailureLosesNothing) {
  SequentialTrainer trainer(small_mlp(), options(2, OptimizerConfig::Kind::kSgd, 0.1f));
  testing::TeacherSource source(16, 16, 4);
  trainer.step(source);
  EXPECT_EQ(source.position(), 2);
  const std::vector<float> before = all_parameters(trainer.model());
  source.fail_at = 3;
  try {
    trainer.step(source);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCallbackError);
    EXPECT_NE(std::string(e.what()).find("position 3"), std::string::npos);
  }
  EXPECT_EQ(source.position(), 2);  // rewound: the retried step sees the same micro-batches
  EXPECT_EQ(all_parameters(trainer.model()), before);
  EXPECT_EQ(trainer.metrics().step, 1);
  source.fail_at = -1;
  trainer.step(source);
  EXPECT_EQ(trainer.metrics().step, 2);
  EXPECT_EQ(trainer.metrics().data_position, 4);
}

TEST(SequentialTrainer, ComputeFailureRewindsTheDataSource) {
  SequentialTrainer trainer(small_mlp(), options(2, OptimizerConfig::Kind::kSgd, 0.1f));
  testing::TeacherSource source(16, 16, 4);
  trainer.step(source);
  const std::vector<float> before = all_parameters(trainer.model());
  source.bad_label_at = 3;  // the second micro-batch of the next step
  try {
    trainer.step(source);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  }
  EXPECT_EQ(source.position(), 2);
  EXPECT_EQ(all_parameters(trainer.model()), before);
  EXPECT_EQ(trainer.metrics().step, 1);
  EXPECT_EQ(trainer.metrics().data_position, 2);
  source.bad_label_at = -1;
  trainer.step(source);
  EXPECT_EQ(trainer.metrics().data_position, 4);
}

TEST(SequentialTrainer, BadBatchIsRejectedBeforeAnyUpdate) {
  SequentialTrainer trainer(small_mlp(), options(3, OptimizerConfig::Kind::kSgd, 0.1f));
  const std::vector<float> before = all_parameters(trainer.model());
  try {
    trainer.step(testing::teacher_batch(32, 16, 4, 0));  // 32 rows do not split into 3
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("micro_batches"), std::string::npos) << e.what();
  }
  EXPECT_EQ(all_parameters(trainer.model()), before);
}

// A NaN or infinity in the inputs is refused before the step, naming the row and column (a ReLU
// used to turn it into 0, so the loss stayed finite while the weights took the damage).
TEST(SequentialTrainer, NonFiniteInputsAreRefusedNamingTheRowAndColumn) {
  SequentialTrainer trainer(small_mlp(), options(2, OptimizerConfig::Kind::kAdamW, 0.01f));
  const std::vector<float> before = all_parameters(trainer.model());
  for (const float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    Batch batch = testing::teacher_batch(8, 16, 4, 0);
    batch.inputs.f32()[5 * 16 + 7] = bad;
    try {
      trainer.step(batch);
      ADD_FAILURE() << "stepped on " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      const std::string expected = std::string("batch: inputs: row 5, column 7 is ") +
                                   (std::isnan(bad) ? "nan" : bad > 0 ? "inf" : "-inf") + " (inputs must be finite";
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(all_parameters(trainer.model()), before);
  EXPECT_EQ(trainer.metrics().step, 0);
}

TEST(SequentialTrainer, ActivationMemoryIsAccountedAndReleased) {
  auto& tracker = memory_tracker(Device::cpu());
  SequentialTrainer trainer(small_mlp(), options(1, OptimizerConfig::Kind::kAdamW, 0.01f));
  const int act = static_cast<int>(MemoryCategory::kActivations);
  const int opt = static_cast<int>(MemoryCategory::kOptimizerState);
  const int64_t before = tracker.stats().current[act];
  tracker.reset_peaks();
  trainer.step(testing::teacher_batch(64, 16, 4, 0));
  const MemoryStats s = tracker.stats();
  EXPECT_EQ(s.current[act], before);              // everything saved for backward is gone
  EXPECT_GE(s.peak[act] - before, 64 * 32 * 4);   // at least the hidden layer's output was held
  EXPECT_GE(s.current[opt], 2 * trainer.model().num_parameter_elements() * 4);  // AdamW m and v
}

}  // namespace
}  // namespace pf

namespace pf {
namespace {

std::shared_ptr<Model> tied_gpt() {
  GptConfig c;
  c.vocab = 128;  // text_batch's ids are the bytes
  c.seq_len = 8;
  c.d_model = 8;
  c.heads = 2;
  c.layers = 1;
  c.tie_embeddings = true;
  return build_gpt(c);
}

const std::string& tied_text() {
  static const std::string t = "tied weights: one matrix reads the tokens and writes the logits. ";
  return t;
}

// Weight tying (GPT-2's head = its token embedding): the copy starts equal and stays equal; the
// gradient both get is d loss / d (the shared matrix), checked against central differences that
// move both copies together; and the gradient norm counts the matrix once.
TEST(SequentialTrainer, TiedEmbeddingsShareOneGradient) {
  auto model = tied_gpt();
  ASSERT_EQ(model->tied_pairs().size(), 1u);
  EXPECT_EQ(model->find_parameter("head.bias"), nullptr);
  Parameter* embed = model->find_parameter("embed.token_weight");
  Parameter* head = model->find_parameter("head.weight");
  TrainerOptions o;
  o.micro_batches = 2;
  o.optimizer.kind = OptimizerConfig::Kind::kSgd;
  o.optimizer.lr = 1.0f;  // SGD without momentum: after = before - gradient
  o.optimizer.momentum = 0.0f;
  o.optimizer.weight_decay = 0.0f;
  SequentialTrainer trainer(model, o);
  EXPECT_EQ(embed->value.to_vector(), head->value.to_vector());
  const Batch batch = testing::text_batch(tied_text(), 4, 8, 3);
  std::vector<std::vector<float>> before;
  for (Parameter* p : model->parameters()) before.push_back(p->value.to_vector());
  const std::vector<float> shared = embed->value.to_vector();
  // The loss at the current values (lr 0 leaves them), moving both copies of element i by +-eps.
  auto loss_at = [&](int64_t i, float delta) {
    SequentialTrainer probe(tied_gpt(), o);
    for (size_t k = 0; k < model->parameters().size(); ++k) {
      std::vector<float> v = before[k];
      if (!probe.model().parameters()[k]->tied_to.empty() || probe.model().parameters()[k]->name == embed->name)
        v[static_cast<size_t>(i)] += delta;
      std::memcpy(probe.model().parameters()[k]->value.f32(), v.data(), v.size() * sizeof(float));
    }
    return probe.step(batch).loss;  // the loss before the update
  };
  trainer.step(batch);
  EXPECT_EQ(embed->value.to_vector(), head->value.to_vector());
  const std::vector<float> after = embed->value.to_vector();
  const float eps = 1e-2f;
  int checked = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(shared.size()); i += 13) {
    const double numeric = (loss_at(i, eps) - loss_at(i, -eps)) / (2.0 * eps);
    const double analytic = static_cast<double>(shared[static_cast<size_t>(i)]) - after[static_cast<size_t>(i)];
    EXPECT_NEAR(analytic, numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << "element " << i;
    ++checked;
  }
  EXPECT_GT(checked, 40);

  // The norm: every parameter's gradient (before - after) once, the copy not again.
  double squares = 0.0;
  for (size_t k = 0; k < model->parameters().size(); ++k) {
    if (!model->parameters()[k]->tied_to.empty()) continue;
    const std::vector<float> now = model->parameters()[k]->value.to_vector();
    for (size_t j = 0; j < now.size(); ++j) squares += std::pow(static_cast<double>(before[k][j]) - now[j], 2);
  }
  TrainerOptions clipped = o;
  clipped.optimizer.clip_norm = 1e-3f;
  SequentialTrainer again(tied_gpt(), clipped);
  const StepResult r = again.step(batch);
  EXPECT_NEAR(r.grad_norm, std::sqrt(squares), 1e-4 * std::sqrt(squares));
  EXPECT_EQ(again.model().find_parameter("head.weight")->value.to_vector(),
            again.model().find_parameter("embed.token_weight")->value.to_vector());
}

}  // namespace
}  // namespace pf

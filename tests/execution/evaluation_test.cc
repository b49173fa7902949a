// Evaluation through the pipeline (PipelineTrainer::evaluate, a forward-only schedule) against an
// independent reference written here: the model's layers run one after another on each held-out
// micro-batch, the loss averaged and the correct targets counted by a plain argmax. Every
// synchronous schedule must give the reference's numbers bitwise, change no parameter and leave
// the training data position alone.
#include <gtest/gtest.h>

#include <cstring>

#include "runtime/execution/pipeline_trainer.h"
#include "runtime/layers/saved_context.h"
#include "tests/execution/test_util.h"

namespace pf::exec {
namespace {

using testing::synchronous_schedules;
using testing::TeacherSource;

struct Reference {
  double loss = 0;
  int64_t correct = 0, targets = 0;
};

// Forward of every layer and the loss, micro-batch by micro-batch, on the model as it is.
Reference reference_evaluation(const Model& model, DataSource& source, int micro_batches) {
  Reference r;
  for (int i = 0; i < micro_batches; ++i) {
    const Batch b = source.next();
    Tensor x = b.inputs;
    for (const auto& layer : model.layers()) {
      SavedContext ctx;
      x = layer->forward(x, ctx);
    }
    SavedContext loss_ctx;
    r.loss += model.loss().forward(x, b.targets, 1.0f, loss_ctx);
    const int64_t classes = x.dim(-1);
    for (int64_t row = 0; row < b.targets.numel(); ++row) {
      const float* logits = x.f32() + row * classes;
      int64_t best = 0;
      for (int64_t c = 1; c < classes; ++c)
        if (logits[c] > logits[best]) best = c;
      r.correct += best == b.targets.i32()[row] ? 1 : 0;
    }
    r.targets += b.targets.numel();
  }
  r.loss /= micro_batches;
  return r;
}

std::vector<char> parameter_bytes(const Model& model) {
  std::vector<char> bytes;
  for (const Parameter* p : model.parameters())
    bytes.insert(bytes.end(), p->value.data<char>(), p->value.data<char>() + p->value.nbytes());
  return bytes;
}

class Evaluation : public ::testing::TestWithParam<testing::ScheduleCase> {};

TEST_P(Evaluation, ForwardOnlyThroughThePipelineEqualsTheReferenceAndChangesNothing) {
  const auto& param = GetParam();
  auto model = testing::tiny_mlp(6);
  PipelineOptions o;
  o.base.micro_batches = 4;
  o.base.seed = 3;
  o.schedule = param.schedule;
  o.ranks = 2;
  o.chunks = param.chunks;
  PipelineTrainer trainer(model, o);
  TeacherSource train(2, 12, 4);
  for (int s = 0; s < 3; ++s) trainer.step(train);  // weights that are not the initial ones
  const int64_t position = train.position();
  const std::vector<char> before = parameter_bytes(*model);

  TeacherSource held_out(3, 12, 4), reference_source(3, 12, 4);
  held_out.seek(1000);
  reference_source.seek(1000);
  const EvalResult got = trainer.evaluate(held_out, 5);
  const Reference want = reference_evaluation(*model, reference_source, 5);

  EXPECT_EQ(got.loss, want.loss);  // bitwise: the same layers in the same order
  EXPECT_EQ(got.targets, want.targets);
  EXPECT_EQ(got.accuracy, static_cast<double>(want.correct) / static_cast<double>(want.targets));
  EXPECT_EQ(got.micro_batches, 5);
  EXPECT_EQ(got.samples, 15);
  EXPECT_EQ(held_out.position(), 1005);
  EXPECT_EQ(train.position(), position);
  EXPECT_EQ(parameter_bytes(*model), before);

  // Training goes on as if no evaluation had happened: equal to a trainer that never evaluated.
  auto twin_model = testing::tiny_mlp(6);
  PipelineTrainer twin(twin_model, o);
  TeacherSource twin_train(2, 12, 4);
  for (int s = 0; s < 4; ++s) twin.step(twin_train);
  trainer.step(train);
  std::string diff;
  EXPECT_TRUE(testing::parameters_bitwise_equal(*model, *twin_model, &diff)) << diff;
}

INSTANTIATE_TEST_SUITE_P(Schedules, Evaluation, ::testing::ValuesIn(synchronous_schedules()),
                         [](const auto& info) { return testing::test_name(info.param.schedule, "v" + std::to_string(info.param.chunks)); });

TEST(Evaluation, TheSequentialTrainerGivesTheReferenceToo) {
  auto model = testing::tiny_gpt(2);
  TrainerOptions o;
  o.micro_batches = 2;
  SequentialTrainer trainer(model, o);
  trainer.step(testing::data_for(*model, 2, 0));
  struct TextSource : DataSource {
    explicit TextSource(int64_t seq) : seq_(seq) {}
    Batch next() override { return testing::text_batch(testing::corpus(), 2, seq_, 500 + position_++); }
    int64_t position() const override { return position_; }
    void seek(int64_t p) override { position_ = p; }
    int64_t seq_, position_ = 0;
  } held_out(model->input_spec().seq_len), reference_source(model->input_spec().seq_len);
  const EvalResult got = trainer.evaluate(held_out, 3);
  const Reference want = reference_evaluation(*model, reference_source, 3);
  EXPECT_EQ(got.loss, want.loss);
  EXPECT_EQ(got.targets, want.targets);
  EXPECT_EQ(got.accuracy, static_cast<double>(want.correct) / static_cast<double>(want.targets));
  EXPECT_GT(got.targets, 3 * 2);  // one target per position
}

TEST(Evaluation, SchedulesThatNeverFlushRefuseAndBadCountsAreNamed) {
  auto model = testing::tiny_mlp(4);
  PipelineOptions o;
  o.base.micro_batches = 2;
  o.schedule = "pipedream";
  o.ranks = 2;
  PipelineTrainer trainer(model, o);
  TeacherSource data(2, 12, 4);
  try {
    trainer.evaluate(data, 2);
    FAIL() << "evaluate of an asynchronous schedule did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("pipedream"), std::string::npos) << e.what();
  }
  PipelineOptions s;
  s.schedule = "1f1b";
  s.ranks = 2;
  PipelineTrainer sync(testing::tiny_mlp(4), s);
  try {
    sync.evaluate(data, 0);
    FAIL() << "evaluate of 0 micro-batches did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("micro_batches"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pf::exec

// Sequence-sliced 1F1B (schedule seq1f1b, PipelineOptions::seq_slices) on the GPT: each micro-batch
// runs as S slices of its token sequence, slice j attending to the earlier slices' keys and values.
//  * S = 1 is 1F1B: bitwise equal to the sequential trainer.
//  * S > 1 equals unsliced training within a tolerance, not bitwise: an earlier slice's key/value
//    gradients are summed slice by slice, the weight gradients accumulate slice by slice and the
//    loss is a sum of S slice means. Tolerance (measured differences are about
//    1e-7 relative): gradients within 1e-5 of the largest gradient entry after one step,
//    parameters within 1e-5 after three SGD steps, losses within 1e-5 relative.
//  * Peak activation bytes fall: rank 0 holds p + S - 1 units of about 1/S micro-batch each
//    instead of p micro-batches (prediction (p + S - 1) / (p S); p = 4, S = 4: 0.44).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "runtime/execution/pipeline_trainer.h"
#include "tests/execution/test_util.h"

namespace pf::exec {
namespace {

using testing::data_for;

std::shared_ptr<Model> gpt(int seq_len = 8) {
  GptConfig c;
  c.vocab = 96;
  c.seq_len = seq_len;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 4;
  return build_gpt(c);
}

PipelineOptions options(int p, int m, int S) {
  PipelineOptions o;
  o.base.micro_batches = m;
  o.base.seed = 5;
  o.base.optimizer.kind = OptimizerConfig::Kind::kSgd;
  o.base.optimizer.lr = 0.1f;
  o.base.optimizer.momentum = 0.9f;
  o.schedule = S > 1 ? "seq1f1b" : "1f1b";
  o.ranks = p;
  o.seq_slices = S;
  return o;
}

constexpr double kTolerance = 1e-5;

struct Diff {
  double grad = 0, param = 0, loss = 0;
};

// Largest differences between unsliced 1f1b and seq1f1b with S slices: gradients after step 0
// (relative to the largest gradient entry), parameters after `steps` steps, losses (relative).
Diff sliced_vs_unsliced(int p, int m, int S, int steps = 3) {
  PipelineTrainer whole(gpt(), options(p, m, 1));
  PipelineTrainer sliced(gpt(), options(p, m, S));
  Diff d;
  for (int step = 0; step < steps; ++step) {
    const Batch batch = data_for(whole.model(), m, step);
    const StepResult a = whole.step(batch);
    const StepResult b = sliced.step(batch);
    d.loss = std::max(d.loss, std::fabs(a.loss - b.loss) / std::fabs(a.loss));
    EXPECT_EQ(a.tokens, b.tokens);
    if (step == 0) {
      double largest = 0, diff = 0;
      const auto& pa = whole.model().parameters();
      const auto& pb = sliced.model().parameters();
      for (size_t i = 0; i < pa.size(); ++i)
        for (int64_t k = 0; k < pa[i]->grad.numel(); ++k) {
          largest = std::max(largest, static_cast<double>(std::fabs(pa[i]->grad.f32()[k])));
          diff = std::max(diff, static_cast<double>(std::fabs(pa[i]->grad.f32()[k] - pb[i]->grad.f32()[k])));
        }
      d.grad = diff / largest;
    }
  }
  const auto& pa = whole.model().parameters();
  const auto& pb = sliced.model().parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    for (int64_t k = 0; k < pa[i]->value.numel(); ++k)
      d.param = std::max(d.param, static_cast<double>(std::fabs(pa[i]->value.f32()[k] - pb[i]->value.f32()[k])));
  return d;
}

TEST(SeqSliced, EqualsUnslicedWithinTolerance) {
  for (int p : {2, 4})
    for (int S : {2, 4}) {
      const Diff d = sliced_vs_unsliced(p, 3, S);
      std::cout << "p " << p << " S " << S << ": gradient " << d.grad << ", parameter " << d.param << ", loss "
                << d.loss << "\n";
      EXPECT_LT(d.grad, kTolerance) << "p " << p << " S " << S;
      EXPECT_LT(d.param, kTolerance) << "p " << p << " S " << S;
      EXPECT_LT(d.loss, kTolerance) << "p " << p << " S " << S;
    }
}

TEST(SeqSliced, OneSliceIsBitwiseSequential) {
  PipelineOptions o = options(2, 3, 1);
  o.schedule = "seq1f1b";
  SequentialTrainer ref(gpt(), o.base);
  PipelineTrainer pipe(gpt(), o);
  for (int step = 0; step < 3; ++step) {
    const Batch batch = data_for(ref.model(), 3, step);
    EXPECT_EQ(ref.step(batch).loss, pipe.step(batch).loss);
  }
  std::string diff;
  EXPECT_TRUE(testing::parameters_bitwise_equal(ref.model(), pipe.model(), &diff)) << diff;
}

TEST(SeqSliced, PeakActivationBytesFall) {
  const int p = 4, m = 8, S = 4, seq_len = 32;
  std::vector<int64_t> peak[2];
  for (int i = 0; i < 2; ++i) {
    PipelineTrainer t(gpt(seq_len), options(p, m, i == 0 ? 1 : S));
    peak[i] = t.step(data_for(t.model(), m, 0)).peak_activation_bytes;
  }
  // Rank s holds p - s + S - 1 units of about 1/S micro-batch (1f1b: p - s micro-batches); the
  // last rank holds one micro-batch either way.
  for (int r = 0; r < p; ++r) {
    const double predicted = static_cast<double>(p - r + S - 1) / (S * (p - r));
    const double measured = static_cast<double>(peak[1][r]) / static_cast<double>(peak[0][r]);
    std::cout << "rank " << r << " peak activation bytes: S = 1 " << peak[0][r] << ", S = " << S << " "
              << peak[1][r] << ": ratio " << measured << " (predicted " << predicted << ")\n";
    EXPECT_NEAR(measured, predicted, 0.1) << "rank " << r;
  }
  EXPECT_LT(peak[1][0], peak[0][0] / 2);
}

TEST(SeqSliced, OptionErrors) {
  const auto message = [](const std::shared_ptr<Model>& model, const PipelineOptions& o) {
    try {
      PipelineTrainer t(model, o);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      return std::string(e.what());
    }
    ADD_FAILURE() << "expected an error";
    return std::string();
  };
  PipelineOptions o = options(2, 2, 0);
  EXPECT_NE(message(gpt(), o).find("seq_slices must be >= 1, got 0"), std::string::npos);
  o = options(2, 2, 3);
  EXPECT_NE(message(gpt(), o).find("seq_slices 3 must divide the model's seq_len 8"), std::string::npos);
  o = options(2, 2, 2);
  o.schedule = "1f1b";
  EXPECT_NE(message(gpt(), o).find("1f1b does not slice sequences: seq_slices must be 1, got 2"), std::string::npos);
  o = options(2, 2, 2);
  EXPECT_NE(message(testing::tiny_mlp(), o).find("seq_slices 2 slices token sequences; this model reads features"),
            std::string::npos);
  o.activation_policy = "recompute";
  EXPECT_NE(message(gpt(), o).find("seq_slices 2 needs activation_policy none"), std::string::npos);
}

// A slice's context must stay whole until its backward: a hand-written sliced schedule that
// recomputes is refused.
TEST(SeqSliced, RecomputeIsRefused) {
  PipelineOptions o = options(2, 1, 2);
  o.schedule_text =
      "microbatches: 2\nseq_slices: 2\nrank 0: 0F0 0F1 0RECOMPUTE1 0BW1 0BW0 0STEP\n"
      "rank 1: 1F0 1F1 1BW1 1BW0 1STEP\n";
  try {
    PipelineTrainer t(gpt(), o);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented) << e.what();
    EXPECT_NE(std::string(e.what()).find("has 0RECOMPUTE1; sequence-sliced schedules run without RECOMPUTE"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pf::exec

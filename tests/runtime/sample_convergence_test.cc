// The sequential trainer drives the default sample's loss (character GPT on the licence texts in
// /usr/share/common-licenses) below a stated threshold within a bounded number of steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "runtime/data/char_text_dataset.h"
#include "runtime/models/builders.h"
#include "runtime/train/sequential_trainer.h"

namespace pf {
namespace {

constexpr int kSteps = 300;
constexpr double kThreshold = 2.3;  // nats per character; uniform over the vocabulary is ~4.5

TEST(SampleConvergence, CharGptOnLicenceTextsFallsBelowThreshold) {
  CharTextOptions data;
  data.rows = 8;
  data.seq_len = 64;
  data.seed = 1;
  CharTextDataset dataset(data);
  GptConfig model;
  model.vocab = dataset.vocab_size();
  model.seq_len = 64;
  model.d_model = 64;
  model.heads = 4;
  model.layers = 2;
  TrainerOptions options;
  options.micro_batches = 2;
  options.seed = 1;
  options.optimizer.lr = 3e-3f;
  options.optimizer.clip_norm = 1.0f;
  SequentialTrainer trainer(build_gpt(model), options);
  double first = 0, tail = 0;
  for (int step = 0; step < kSteps; ++step) {
    const double loss = trainer.step(dataset).loss;
    ASSERT_TRUE(std::isfinite(loss)) << "step " << step;
    if (step == 0) first = loss;
    if (step >= kSteps - 10) tail += loss / 10;
  }
  std::printf("vocab %lld, first loss %.3f, mean of last 10 steps %.3f\n",
              static_cast<long long>(dataset.vocab_size()), first, tail);
  EXPECT_NEAR(first, std::log(static_cast<double>(dataset.vocab_size())), 0.5);
  EXPECT_LT(tail, kThreshold);
}

}  // namespace
}  // namespace pf

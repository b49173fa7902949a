// The planner benchmarks' main job: GPT d_model 128, 6 blocks, sequence 64 on the licence texts,
// with `steps` batches of `micro_batches` x 8 rows drawn up front (and the held-out split).
#pragma once

#include <memory>
#include <vector>

#include "runtime/data/char_text_dataset.h"
#include "runtime/models/builders.h"

namespace pf::bench {

struct BenchGpt {
  std::unique_ptr<CharTextDataset> text;
  GptConfig config;
  std::vector<Batch> batches;
};

inline BenchGpt bench_gpt(int steps, int micro_batches) {
  BenchGpt b;
  CharTextOptions data;
  data.rows = 8 * micro_batches;
  data.seq_len = 64;
  data.held_out_fraction = 0.1;
  b.text = std::make_unique<CharTextDataset>(data);
  b.config.vocab = b.text->vocab_size();
  b.config.seq_len = 64;
  b.config.d_model = 128;
  b.config.heads = 4;
  b.config.layers = 6;
  for (int s = 0; s < steps; ++s) b.batches.push_back(b.text->next());
  return b;
}

}  // namespace pf::bench

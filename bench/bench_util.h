// What the benchmarks share: pinning, timing, medians and random batches.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "runtime/models/builders.h"
#include "runtime/tensor/tensor.h"
#include "runtime/train/batch.h"
#include "runtime/train/trainer.h"

namespace pf::bench {

inline void pin_this_thread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// The wall seconds f() takes.
inline double seconds_of(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// rows x seq random token ids in [0, vocab) as inputs and targets.
inline Batch token_batch(int64_t rows, int64_t seq, int64_t vocab, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> in(static_cast<size_t>(rows * seq)), out(static_cast<size_t>(rows * seq));
  for (auto& x : in) x = id(gen);
  for (auto& x : out) x = id(gen);
  return Batch{Tensor::from_ints({rows, seq}, in), Tensor::from_ints({rows, seq}, out)};
}

// The GPT, trainer options and data that bench/pipeline and bench/processes measure, from
// --steps, --d_model, --blocks, --seq and --rows (rows per micro-batch; m = 8 micro-batches).
struct GptPipelineBench {
  static constexpr int kMicroBatches = 8;
  int steps = 5, d_model = 256, blocks = 4, seq = 64, rows = 8;

  GptConfig gpt() const {
    GptConfig gc;
    gc.vocab = 96;
    gc.seq_len = seq;
    gc.d_model = d_model;
    gc.heads = 4;
    gc.layers = blocks;
    return gc;
  }
  TrainerOptions options() const {  // single-threaded BLAS, AdamW at a small learning rate
    TrainerOptions base;
    base.micro_batches = kMicroBatches;
    base.seed = 1;
    base.blas_threads = 1;
    base.optimizer.lr = 1e-4f;
    return base;
  }
  std::vector<Batch> batches() const {  // steps + 1 (the first is the warm-up's)
    std::vector<Batch> data;
    for (int s = 0; s <= steps; ++s)
      data.push_back(token_batch(int64_t(rows) * kMicroBatches, seq, gpt().vocab, 7 + s));
    return data;
  }

  // Reads the flags above and the `extra` integer flags; false (with a message) for another one.
  bool parse(int argc, char** argv, const std::map<std::string, int*>& extra = {}) {
    std::map<std::string, int*> flags = {{"--steps", &steps}, {"--d_model", &d_model}, {"--blocks", &blocks},
                                         {"--seq", &seq},     {"--rows", &rows}};
    flags.insert(extra.begin(), extra.end());
    for (int i = 1; i + 1 < argc; i += 2) {
      auto it = flags.find(argv[i]);
      if (it == flags.end()) {
        std::cerr << "unknown option " << argv[i] << "\n";
        return false;
      }
      *it->second = std::atoi(argv[i + 1]);
    }
    return true;
  }
};

}  // namespace pf::bench

// What the pipeline benchmarks share: pinning, medians and random batches.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "runtime/tensor/tensor.h"
#include "runtime/train/batch.h"

namespace pf::bench {

inline void pin_this_thread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
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

}  // namespace pf::bench

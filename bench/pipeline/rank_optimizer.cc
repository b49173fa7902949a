// The optimizer on the ranks (docs/EXECUTION.md, "The optimizer on the ranks"): the GPT of
// bench/pipeline (d_model 256, 8 blocks, seq 64, 8 rows x m = 8 micro-batches) under 1F1B on 2
// ranks pinned to cores 0 and 1, AdamW, stepped by the main thread after every rank finished
// (PipelineOptions::rank_optimizer false) and by each rank's worker (true), steps alternating
// between the two trainers. Prints one JSON object per clip norm (0 = off, 1 = on): the median
// step time and the median optimizer time the main thread waits for (PipelineStats::optimizer_us),
// in ms, of each path, each worker's own optimizer time (rank_optimizer_ms: its squared norms,
// scaling and update), and whether both trained to the same parameters bitwise.
// Usage: rank_optimizer [--steps N] [--d_model D] [--blocks L] [--seq S] [--rows R]
#include <iostream>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "bench/training_bench.h"
#include "runtime/execution/pipeline_trainer.h"

int main(int argc, char** argv) {
  using namespace pf;
  bench::GptPipelineBench b;
  b.steps = 10;
  b.blocks = 8;
  if (!b.parse(argc, argv)) return 2;
  const std::vector<Batch> data = b.batches();
  for (float clip : {0.0f, 1.0f}) {
    OptimizerConfig optimizer = b.options().optimizer;
    optimizer.clip_norm = clip;
    auto serial = bench::make_gpt_pipeline(b, "1f1b", 2, nullptr, optimizer, false);
    auto workers = bench::make_gpt_pipeline(b, "1f1b", 2, nullptr, optimizer, true);
    std::vector<double> step_serial, step_workers, opt_serial, opt_workers;
    std::vector<std::vector<double>> opt_ranks(2);  // each worker's own optimizer time
    for (int s = 0; s <= b.steps; ++s) {
      serial->step(data[static_cast<size_t>(s)]);
      workers->step(data[static_cast<size_t>(s)]);
      if (s == 0) continue;  // warm-up
      step_serial.push_back(serial->last_stats().step_us * 1e-3);
      opt_serial.push_back(serial->last_stats().optimizer_us * 1e-3);
      step_workers.push_back(workers->last_stats().step_us * 1e-3);
      opt_workers.push_back(workers->last_stats().optimizer_us * 1e-3);
      for (size_t r = 0; r < opt_ranks.size(); ++r)
        opt_ranks[r].push_back(workers->last_stats().ranks[r].optimizer_us * 1e-3);
    }
    nlohmann::json j = {{"schedule", "1f1b"},
                        {"ranks", 2},
                        {"d_model", b.d_model},
                        {"blocks", b.blocks},
                        {"seq", b.seq},
                        {"clip_norm", clip},
                        {"steps", b.steps},
                        {"main_thread_step_ms", bench::median(step_serial)},
                        {"main_thread_optimizer_ms", bench::median(opt_serial)},
                        {"workers_step_ms", bench::median(step_workers)},
                        {"workers_optimizer_ms", bench::median(opt_workers)},
                        {"rank_optimizer_ms", {bench::median(opt_ranks[0]), bench::median(opt_ranks[1])}},
                        {"on_workers", workers->parts().optimizer.on_workers()},
                        {"bitwise_equal", serial->parameter_checksum() == workers->parameter_checksum()}};
    std::cout << j.dump() << std::endl;
  }
  return 0;
}

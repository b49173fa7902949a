// Local learning (ppll, local-updates; docs/SCHEDULES.md, "Local learning") against end-to-end
// backpropagation (1F1B) and sequential training (bench/local/run.sh). One JSON object on stdout.
//
// Alone (threads of one process):
//  * quality: the same samples for every schedule, at p = 2 and 4 (the number of stages that train
//    on their own heads), AdamW (lr 3e-3): scikit-learn's handwritten digits (--digits FILE, the
//    gunzipped CSV; the MLP, held-out loss and accuracy on 20% of it) and the character GPT (loss on
//    held-out windows). The model's own output is the last head.
//  * throughput: step time of each schedule over 1F1B's at p = 2 and 4 on the pipeline GPT of
//    bench/pipeline (d_model 256, 4 blocks, seq 64, m = 8), measured and predicted by the simulator
//    fed each stage's measured mean F, HEAD, BW and UPDATE (and 1F1B's optimizer step). p = 4 runs
//    4 threads on 2 cores.
// Under `mpirun -np 2`: the throughput at p = 2 with one process per rank (rank 0 prints).
// Usage: local_bench [--digits FILE] [--steps N] [--throughput-steps N]
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "bench/training_bench.h"
#include "runtime/comm/mpi_process.h"
#include "runtime/comm/mpi_world.h"
#include "runtime/core/error.h"
#include "runtime/data/char_text_dataset.h"
#include "runtime/data/csv_classification.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/models/builders.h"
#include "runtime/schedules/local_schedules.h"
#include "runtime/train/sequential_trainer.h"

namespace {

using namespace pf;
using nlohmann::json;

const std::vector<std::string> kLocal = {"ppll", "local-updates"};

// Trains `steps` steps of m micro-batches with `schedule` on `ranks` ranks ("sequential": the
// reference) and evaluates the model (its own output: the last head) on `held_out`.
json train_and_evaluate(const std::string& schedule, int ranks, std::shared_ptr<Model> model, DataSource& source,
                        int m, int steps, const std::vector<Batch>& held_out) {
  TrainerOptions base;
  base.micro_batches = m;
  base.seed = 3;
  base.optimizer.lr = 3e-3f;
  const std::unique_ptr<Trainer> trainer = bench::make_trainer(schedule, ranks, model, base);
  const bench::TrainedRun run = bench::train_steps(*trainer, source, steps);
  const auto [loss, accuracy] = bench::evaluate(*model, held_out);
  json r = {{"schedule", schedule},      {"ranks", schedule == "sequential" ? 1 : ranks}, {"samples", run.samples},
            {"last_train_loss", run.last_loss}, {"held_out_loss", loss}};
  if (accuracy >= 0) r["held_out_accuracy"] = accuracy;
  return r;
}

template <typename Run>
void run_all(Run run) {
  run("sequential", 1);
  for (int p : {2, 4}) {
    run("1f1b", p);
    for (const auto& s : kLocal) run(s, p);
  }
}

json quality_digits(const std::string& path, int steps) {
  const CsvClassificationDataset digits = bench::load_digits(path);
  const std::vector<Batch> held_out = digits.held_out_batches(64);
  MlpConfig mc;  // 9 top-level layers: up to 4 stages with heads after fc/act pairs
  mc.input_dim = digits.features();
  mc.hidden = {64, 64, 64, 64};
  mc.classes = digits.classes();
  const int m = 4;
  json rows = json::array();
  run_all([&](const std::string& schedule, int p) {
    auto data = digits.training_source();
    rows.push_back(train_and_evaluate(schedule, p, build_mlp(mc), *data, m, steps, held_out));
  });
  return {{"data", path},         {"train_samples", digits.train_size()}, {"held_out_samples", digits.held_out_size()},
          {"model", "mlp 64-64-64-64-64-10"}, {"micro_batches", m}, {"rows_per_micro_batch", 8},
          {"steps", steps},       {"runs", rows}};
}

json quality_gpt(int steps) {
  const int m = 4;
  const bench::BenchText text = bench::bench_text(4);
  const GptConfig& gc = text.gpt;
  const std::vector<Batch>& held_out = text.held_out;
  json rows = json::array();
  run_all([&](const std::string& schedule, int p) {
    CharTextDataset data(text.train);
    rows.push_back(train_and_evaluate(schedule, p, build_gpt(gc), data, m, steps, held_out));
  });
  return {{"model", "gpt d_model 64, 4 blocks, seq 32, vocab " + std::to_string(gc.vocab)},
          {"micro_batches", m}, {"rows_per_micro_batch", 4}, {"steps", steps}, {"runs", rows}};
}

// Step time of 1F1B and of each local schedule on the pipeline GPT at p ranks, measured and
// simulated.
json throughput(int p, int steps, std::shared_ptr<comm::World> world) {
  bench::GptPipelineBench b;
  b.steps = steps;
  const int m = bench::GptPipelineBench::kMicroBatches;
  const std::vector<Batch> data = b.batches();
  const bench::StepTiming f = bench::time_1f1b(b, p, world, b.options().optimizer, data);
  const double t_flush = f.seconds, p_flush = f.predicted;
  json out = {{"ranks", p},
              {"processes", world ? world->size() : 1},
              {"1f1b_step_seconds", t_flush},
              {"1f1b_predicted_step_seconds", p_flush}};
  for (const auto& schedule : kLocal) {
    auto t = bench::make_gpt_pipeline(b, schedule, p, world, b.options().optimizer);
    const bench::StepTiming timing =
        bench::time_steps(*t, data, steps, world.get(), [&](const exec::PipelineTrainer&, const sched::CostModel& cm) {
          return sched::simulate_local_steady_state(schedule, p, m, cm).per_micro_batch * m * 1e-6;
        });
    const double ts = timing.seconds, ps = timing.predicted;
    out[schedule] = {{"step_seconds", ts},
                     {"predicted_step_seconds", ps},
                     {"throughput_vs_1f1b", t_flush / ts},
                     {"predicted_throughput_vs_1f1b", p_flush / ps}};
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  return bench::bench_main(
      argc, argv, "local_bench", bench::BenchArgs(),
      [](const bench::BenchArgs& a) {
        json out;
        if (!a.digits.empty()) out["quality_digits"] = quality_digits(a.digits, a.steps);
        out["quality_gpt"] = quality_gpt(a.steps);
        out["threads"] = {throughput(2, a.throughput_steps, nullptr), throughput(4, a.throughput_steps, nullptr)};
        return out;
      },
      [](const bench::BenchArgs& a, std::shared_ptr<comm::World> world) { return throughput(2, a.throughput_steps, world); });
}

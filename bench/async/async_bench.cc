// The asynchronous schedules (docs/SCHEDULES.md, "Asynchronous schedules") against 1F1B with a
// flush and sequential training, on 2 ranks (bench/async/run.sh). One JSON object on stdout.
//
// Alone (threads of one process):
//  * convergence: the same samples for every method, on the character GPT (licence texts; loss on
//    held-out windows) and on scikit-learn's handwritten digits (--digits FILE, the gunzipped CSV;
//    held-out loss and accuracy on 20% of it), each with AdamW (lr 3e-3) and with SGD + momentum
//    (lr 0.05, 0.9); SpecTrain predicts from SGD's momentum, so it runs with SGD only.
//  * throughput: each method's step time over 1F1B's on the pipeline GPT of bench/pipeline
//    (d_model 256, 4 blocks, seq 64, m = 8), measured, and predicted by the simulator fed each
//    stage's measured mean F, BW and UPDATE (and 1F1B's measured optimizer step).
// Under `mpirun -np 2`: the throughput part with one process per rank (rank 0 prints).
// Usage: async_bench [--digits FILE] [--steps N] [--throughput-steps N]
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
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
#include "runtime/schedules/async_schedules.h"
#include "runtime/train/sequential_trainer.h"
#include "runtime/train/stage.h"

namespace {

using namespace pf;
using nlohmann::json;

const std::vector<std::string> kMethods = {"pipedream", "pipedream-2bw", "spectrain", "pipemare"};
constexpr int kRanks = 2;

OptimizerConfig optimizer_for(const std::string& method, bool sgd) {
  OptimizerConfig o;
  if (sgd || method == "spectrain") {
    o.kind = OptimizerConfig::Kind::kSgd;
    o.lr = 0.05f;
    o.momentum = 0.9f;
  } else {
    o.kind = OptimizerConfig::Kind::kAdamW;
    o.lr = 3e-3f;
  }
  return o;
}

// Trains `steps` steps of m micro-batches from `source` with `schedule` ("sequential": the
// reference) and evaluates on `held_out`.
json converge(const std::string& schedule, bool sgd, std::shared_ptr<Model> model, DataSource& source, int m,
              int steps, const std::vector<Batch>& held_out) {
  TrainerOptions base;
  base.micro_batches = m;
  base.seed = 3;
  base.optimizer = optimizer_for(schedule, sgd);
  const std::unique_ptr<Trainer> trainer = bench::make_trainer(schedule, kRanks, model, base);
  const bench::TrainedRun run = bench::train_steps(*trainer, source, steps);
  const auto [loss, accuracy] = bench::evaluate(*model, held_out);
  json r = {{"schedule", schedule},
            {"optimizer", base.optimizer.kind == OptimizerConfig::Kind::kSgd ? "sgd-momentum" : "adamw"},
            {"samples", run.samples},
            {"last_train_loss", run.last_loss},
            {"held_out_loss", loss}};
  if (accuracy >= 0) r["held_out_accuracy"] = accuracy;
  return r;
}

// Every schedule with AdamW and with SGD + momentum (SpecTrain: SGD only).
template <typename Run>
void run_all(Run run) {
  for (bool sgd : {false, true}) {
    run("sequential", sgd);
    run("1f1b", sgd);
    for (const auto& method : kMethods)
      if (sgd || method != "spectrain") run(method, sgd);
  }
}

json convergence_gpt(int steps) {
  const int m = 4;
  const bench::BenchText text = bench::bench_text(2);
  const GptConfig& gc = text.gpt;
  const std::vector<Batch>& held_out = text.held_out;
  json rows = json::array();
  auto run = [&](const std::string& schedule, bool sgd) {
    CharTextDataset data(text.train);
    rows.push_back(converge(schedule, sgd, build_gpt(gc), data, m, steps, held_out));
  };
  run_all(run);
  return {{"model", "gpt d_model 64, 2 blocks, seq 32, vocab " + std::to_string(gc.vocab)},
          {"micro_batches", m}, {"rows_per_micro_batch", 4}, {"steps", steps}, {"runs", rows}};
}

json convergence_digits(const std::string& path, int steps) {
  const CsvClassificationDataset digits = bench::load_digits(path);
  const std::vector<Batch> held_out = digits.held_out_batches(64);
  MlpConfig mc;
  mc.input_dim = digits.features();
  mc.hidden = {64, 64};
  mc.classes = digits.classes();
  const int m = 4;
  json rows = json::array();
  auto run = [&](const std::string& schedule, bool sgd) {
    auto data = digits.training_source();
    rows.push_back(converge(schedule, sgd, build_mlp(mc), *data, m, steps, held_out));
  };
  run_all(run);
  return {{"data", path},
          {"train_samples", digits.train_size()},
          {"held_out_samples", digits.held_out_size()},
          {"model", "mlp 64-64-64-10"},
          {"micro_batches", m},
          {"rows_per_micro_batch", 8},
          {"steps", steps},
          {"runs", rows}};
}

// Step time of 1F1B and of every method on the pipeline GPT, measured and simulated.
json throughput(int steps, std::shared_ptr<comm::World> world) {
  bench::GptPipelineBench b;
  b.steps = steps;
  const int m = bench::GptPipelineBench::kMicroBatches;
  const std::vector<Batch> data = b.batches();
  auto optimizer = [](const std::string& schedule) {
    OptimizerConfig o = optimizer_for(schedule, false);
    o.lr = 1e-4f;
    return o;
  };
  const bench::StepTiming f = bench::time_1f1b(b, kRanks, world, optimizer("1f1b"), data);
  const double t_flush = f.seconds, p_flush = f.predicted;
  json out = {{"model", "gpt d_model 256, 4 blocks, seq 64, 8 rows per micro-batch"},
              {"micro_batches", m},
              {"ranks", kRanks},
              {"processes", world ? world->size() : 1},
              {"1f1b_step_seconds", t_flush},
              {"1f1b_predicted_step_seconds", p_flush}};
  json methods = json::object();
  for (const auto& method : kMethods) {
    auto t = bench::make_gpt_pipeline(b, method, kRanks, world, optimizer(method));
    std::vector<sched::CostModel> costs;
    const bench::StepTiming timing = bench::time_steps(
        *t, data, steps, world.get(),
        [&](const exec::PipelineTrainer&, const sched::CostModel& cm) {
          return sched::simulate_async_steady_state(method, kRanks, m, cm).per_micro_batch * m * 1e-6;
        },
        &costs);
    std::vector<double> updates;
    for (const auto& cm : costs) updates.push_back(cm.t_step * 1e-6);
    const double ts = timing.seconds, ps = timing.predicted;
    methods[method] = {{"step_seconds", ts},
                       {"predicted_step_seconds", ps},
                       {"throughput_vs_1f1b", t_flush / ts},
                       {"predicted_throughput_vs_1f1b", p_flush / ps},
                       {"update_seconds", bench::median(updates)}};  // one UPDATE of the slower stage
  }
  out["methods"] = methods;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bench::BenchArgs defaults;
  defaults.steps = 150;
  return bench::bench_main(
      argc, argv, "async_bench", defaults,
      [](const bench::BenchArgs& a) {
        json out;
        out["convergence_gpt"] = convergence_gpt(a.steps);
        if (!a.digits.empty()) out["convergence_digits"] = convergence_digits(a.digits, a.steps);
        out["threads"] = throughput(a.throughput_steps, nullptr);
        return out;
      },
      [](const bench::BenchArgs& a, std::shared_ptr<comm::World> world) { return throughput(a.throughput_steps, world); });
}

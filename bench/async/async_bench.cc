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
  std::unique_ptr<Trainer> trainer;
  exec::PipelineTrainer* pipe = nullptr;
  if (schedule == "sequential") {
    trainer = std::make_unique<SequentialTrainer>(model, base);
  } else {
    exec::PipelineOptions po;
    po.base = base;
    po.schedule = schedule;
    po.ranks = kRanks;
    po.record_timeline = false;
    auto t = std::make_unique<exec::PipelineTrainer>(model, po);
    pipe = t.get();
    trainer = std::move(t);
  }
  double last = 0;
  int64_t samples = 0;
  for (int s = 0; s < steps; ++s) {
    const StepResult r = trainer->step(source);
    last = r.loss;
    samples += r.samples;
  }
  if (pipe) pipe->drain();
  const auto [loss, accuracy] = bench::evaluate(*model, held_out);
  json r = {{"schedule", schedule},
            {"optimizer", base.optimizer.kind == OptimizerConfig::Kind::kSgd ? "sgd-momentum" : "adamw"},
            {"samples", samples},
            {"last_train_loss", last},
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
  CharTextOptions train, test;
  train.rows = test.rows = 4;
  train.seq_len = test.seq_len = 32;
  train.seed = 1;
  test.seed = 99;
  CharTextDataset probe(train);
  CharTextDataset held(test);
  std::vector<Batch> held_out;
  for (int i = 0; i < 16; ++i) held_out.push_back(held.next());
  GptConfig gc;
  gc.vocab = probe.vocab_size();
  gc.seq_len = 32;
  gc.d_model = 64;
  gc.heads = 4;
  gc.layers = 2;
  json rows = json::array();
  auto run = [&](const std::string& schedule, bool sgd) {
    CharTextDataset data(train);
    rows.push_back(converge(schedule, sgd, build_gpt(gc), data, m, steps, held_out));
  };
  run_all(run);
  return {{"model", "gpt d_model 64, 2 blocks, seq 32, vocab " + std::to_string(gc.vocab)},
          {"micro_batches", m}, {"rows_per_micro_batch", 4}, {"steps", steps}, {"runs", rows}};
}

json convergence_digits(const std::string& path, int steps) {
  CsvClassificationOptions o;
  o.path = path;
  o.rows = 8;
  o.feature_scale = 1.0f / 16.0f;
  o.held_out_fraction = 0.2;
  o.shuffle_seed = 5;
  const CsvClassificationDataset digits = CsvClassificationDataset::load(o);
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
  auto make = [&](const std::string& schedule) {
    exec::PipelineOptions po;
    po.base = b.options();
    po.base.optimizer = optimizer_for(schedule, false);
    po.base.optimizer.lr = 1e-4f;
    po.schedule = schedule;
    po.ranks = kRanks;
    po.world = world;
    if (!world) po.cpu_affinity = {0, 1};
    std::shared_ptr<Model> model;
    {
      std::unique_ptr<DeferParameterAllocation> defer;
      if (world) defer = std::make_unique<DeferParameterAllocation>();
      model = build_gpt(b.gpt());
    }
    return std::make_unique<exec::PipelineTrainer>(model, po);
  };
  // 1F1B with a flush: the simulated makespan plus the measured optimizer step.
  auto flush = make("1f1b");
  flush->step(data[0]);
  std::vector<double> flush_s, flush_pred;
  for (int s = 1; s <= steps; ++s) {
    flush_s.push_back(flush->step(data[s]).seconds);
    const sched::CostModel cm = bench::measured_cost_model(bench::mean_action_costs(*flush, world.get()), flush->schedule().num_stages());
    flush_pred.push_back((sched::simulate(flush->schedule(), cm).makespan + flush->last_stats().optimizer_us) * 1e-6);
  }
  flush.reset();
  const double t_flush = bench::median(flush_s), p_flush = bench::median(flush_pred);
  json out = {{"model", "gpt d_model 256, 4 blocks, seq 64, 8 rows per micro-batch"},
              {"micro_batches", m},
              {"ranks", kRanks},
              {"processes", world ? world->size() : 1},
              {"1f1b_step_seconds", t_flush},
              {"1f1b_predicted_step_seconds", p_flush}};
  json methods = json::object();
  for (const auto& method : kMethods) {
    auto t = make(method);
    t->step(data[0]);  // fills the pipeline
    std::vector<double> secs, preds, updates;
    for (int s = 1; s <= steps; ++s) {
      secs.push_back(t->step(data[s]).seconds);
      const sched::CostModel cm = bench::measured_cost_model(bench::mean_action_costs(*t, world.get()), t->schedule().num_stages());
      preds.push_back(sched::simulate_async_steady_state(method, kRanks, m, cm).per_micro_batch * m * 1e-6);
      updates.push_back(cm.t_step * 1e-6);
    }
    t->drain();
    const double ts = bench::median(secs), ps = bench::median(preds);
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
  std::string digits;
  int steps = 150, throughput_steps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--digits") digits = argv[i + 1];
    else if (flag == "--steps") steps = std::atoi(argv[i + 1]);
    else if (flag == "--throughput-steps") throughput_steps = std::atoi(argv[i + 1]);
    else {
      std::cerr << "async_bench: unknown flag " << flag << "\n";
      return 2;
    }
  }
  try {
    cpu::set_blas_threads_for_this_thread(1);
    if (comm::launched_by_mpi()) {
      auto world = comm::MpiWorld::world();
      PF_CHECK_ARG(world->size() == kRanks, "run under mpirun -np ", kRanks, ", got ", world->size(), " processes");
      bench::pin_this_thread(world->rank());
      const json t = throughput(throughput_steps, world);
      if (world->rank() == 0) std::cout << json({{"processes", t}}).dump() << std::endl;
      return 0;
    }
    json out;
    out["convergence_gpt"] = convergence_gpt(steps);
    if (!digits.empty()) out["convergence_digits"] = convergence_digits(digits, steps);
    out["threads"] = throughput(throughput_steps, nullptr);
    std::cout << out.dump() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "async_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

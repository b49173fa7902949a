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
  std::unique_ptr<Trainer> trainer;
  exec::PipelineTrainer* pipe = nullptr;
  if (schedule == "sequential") {
    trainer = std::make_unique<SequentialTrainer>(model, base);
  } else {
    exec::PipelineOptions po;
    po.base = base;
    po.schedule = schedule;
    po.ranks = ranks;
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
  json r = {{"schedule", schedule}, {"ranks", schedule == "sequential" ? 1 : ranks}, {"samples", samples},
            {"last_train_loss", last},  {"held_out_loss", loss}};
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
  CsvClassificationOptions o;
  o.path = path;
  o.rows = 8;
  o.feature_scale = 1.0f / 16.0f;
  o.held_out_fraction = 0.2;
  o.shuffle_seed = 5;
  const CsvClassificationDataset digits = CsvClassificationDataset::load(o);
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
  gc.layers = 4;
  json rows = json::array();
  run_all([&](const std::string& schedule, int p) {
    CharTextDataset data(train);
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
  auto make = [&](const std::string& schedule) {
    exec::PipelineOptions po;
    po.base = b.options();
    po.schedule = schedule;
    po.ranks = p;
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
  auto flush = make("1f1b");
  flush->step(data[0]);
  std::vector<double> flush_s, flush_pred;
  for (int s = 1; s <= steps; ++s) {
    flush_s.push_back(flush->step(data[s]).seconds);
    const sched::CostModel cm =
        bench::measured_cost_model(bench::mean_action_costs(*flush, world.get()), flush->schedule().num_stages());
    flush_pred.push_back((sched::simulate(flush->schedule(), cm).makespan + flush->last_stats().optimizer_us) * 1e-6);
  }
  flush.reset();
  const double t_flush = bench::median(flush_s), p_flush = bench::median(flush_pred);
  json out = {{"ranks", p},
              {"processes", world ? world->size() : 1},
              {"1f1b_step_seconds", t_flush},
              {"1f1b_predicted_step_seconds", p_flush}};
  for (const auto& schedule : kLocal) {
    auto t = make(schedule);
    t->step(data[0]);  // fills the pipeline
    std::vector<double> secs, preds;
    for (int s = 1; s <= steps; ++s) {
      secs.push_back(t->step(data[s]).seconds);
      const sched::CostModel cm =
          bench::measured_cost_model(bench::mean_action_costs(*t, world.get()), t->schedule().num_stages());
      preds.push_back(sched::simulate_local_steady_state(schedule, p, m, cm).per_micro_batch * m * 1e-6);
    }
    t->drain();
    const double ts = bench::median(secs), ps = bench::median(preds);
    out[schedule] = {{"step_seconds", ts},
                     {"predicted_step_seconds", ps},
                     {"throughput_vs_1f1b", t_flush / ts},
                     {"predicted_throughput_vs_1f1b", p_flush / ps}};
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string digits;
  int steps = 300, throughput_steps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--digits") digits = argv[i + 1];
    else if (flag == "--steps") steps = std::atoi(argv[i + 1]);
    else if (flag == "--throughput-steps") throughput_steps = std::atoi(argv[i + 1]);
    else {
      std::cerr << "local_bench: unknown flag " << flag << "\n";
      return 2;
    }
  }
  try {
    cpu::set_blas_threads_for_this_thread(1);
    if (comm::launched_by_mpi()) {
      auto world = comm::MpiWorld::world();
      PF_CHECK_ARG(world->size() == 2, "run under mpirun -np 2, got ", world->size(), " processes");
      bench::pin_this_thread(world->rank());
      const json t = throughput(2, throughput_steps, world);
      if (world->rank() == 0) std::cout << json({{"processes", t}}).dump() << std::endl;
      return 0;
    }
    json out;
    if (!digits.empty()) out["quality_digits"] = quality_digits(digits, steps);
    out["quality_gpt"] = quality_gpt(steps);
    out["threads"] = {throughput(2, throughput_steps, nullptr), throughput(4, throughput_steps, nullptr)};
    std::cout << out.dump() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "local_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

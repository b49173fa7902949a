// Local learning with neuron groups (docs/SCHEDULES.md, "Neuron groups") against ppll (depth
// stages only), end-to-end 1F1B and sequential training on scikit-learn's handwritten digits
// (bench/local/neuron_groups.sh). One JSON object on stdout.
//
//  * quality: every run sees the same samples (--steps steps of m = 4 micro-batches of 8 rows,
//    AdamW lr 3e-3, seed 3) of an MLP 64-256-256-256-256-10; held-out loss and accuracy on 20% of
//    the data, with the whole model (the groups' weights written back into it).
//  * throughput: the median step time over --throughput-steps steps after a warm-up step, each run
//    as threads of this process, on the same batches; and the most multiply-adds one rank does per
//    sample (its layers and its head), the paper's measure of what a node's time is bound by.
// Ranks: 1f1b and ppll at p = 2, 3 and 5; neuron groups at 2 stages with G = 2 (3 ranks) and G = 4
// (5 ranks), with and without the diversity term (weight 0.5, temperature 3: the paper's). This machine has 2 cores: runs with more ranks
// than cores measure overheads as much as parallelism.
// Usage: neuron_groups_bench --digits FILE [--steps N] [--throughput-steps N]
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "bench/training_bench.h"
#include "runtime/core/error.h"
#include "runtime/data/csv_classification.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/models/builders.h"
#include "runtime/neuron_groups/neuron_group_trainer.h"
#include "runtime/run/make_trainer.h"
#include "runtime/train/local_heads.h"

namespace {

using namespace pf;
using nlohmann::json;

struct Run {
  std::string schedule;  // "sequential", "1f1b", "ppll"
  int stages = 1;
  int groups = 1;
  float diversity = 0.0f;
  std::vector<int> layers_per_stage;  // empty: the default split
  std::string name() const {
    std::string n = schedule;
    if (schedule != "sequential") n += " p=" + std::to_string(stages);
    if (groups > 1) n += " G=" + std::to_string(groups);
    if (diversity > 0) n += " diversity";
    if (!layers_per_stage.empty()) n += " head alone";
    return n;
  }
};

// The MLP has 9 top-level layers (fc0 act0 ... fc3 act3 head). "head alone": every hidden layer in
// the grouped stage, the output layer alone on the last rank.
const std::vector<Run> kRuns = {
    {"sequential"},
    {"1f1b", 2},
    {"1f1b", 3},
    {"1f1b", 5},
    {"ppll", 2},
    {"ppll", 3},
    {"ppll", 5},
    {"ppll", 2, 2},
    {"ppll", 2, 2, 0.5f},
    {"ppll", 2, 4},
    {"ppll", 2, 4, 0.5f},
    {"ppll", 2, 4, 0.0f, {8, 1}},
};

MlpConfig digits_mlp(const CsvClassificationDataset& digits) {
  MlpConfig mc;
  mc.input_dim = digits.features();
  mc.hidden = {256, 256, 256, 256};
  mc.classes = digits.classes();
  return mc;
}

std::unique_ptr<Trainer> make(const Run& r, std::shared_ptr<Model> model, int m) {
  TrainingConfig c;
  c.base.micro_batches = m;
  c.base.seed = 3;
  c.base.optimizer.lr = 3e-3f;
  c.record_timeline = false;
  if (r.schedule != "sequential") {
    c.schedule = r.schedule;
    c.ranks = r.stages;
    c.neuron_groups = r.groups;
    c.group_diversity = r.diversity;
    c.layers_per_stage = r.layers_per_stage;
  }
  return make_trainer(std::move(model), c);
}

// Multiply-adds per sample of the busiest rank: its linears and its head's.
int64_t max_rank_macs(Trainer& trainer, const Model& model) {
  auto macs_of = [](const std::vector<Parameter*>& params) {
    int64_t n = 0;
    for (const Parameter* p : params)
      if (p->value.rank() == 2) n += p->value.numel();
    return n;
  };
  if (auto* g = neuron_groups_of(trainer)) {
    int64_t most = 0;
    for (int r = 0; r < g->network().ranks(); ++r) most = std::max(most, macs_of(g->network().part(r).parameters));
    return most;
  }
  if (auto* p = dynamic_cast<exec::PipelineTrainer*>(&trainer)) {
    int64_t most = 0;
    const auto& ranges = p->parts().stages.ranges();
    for (size_t s = 0; s < ranges.size(); ++s) {
      std::vector<Parameter*> params;
      for (int i = ranges[s].begin; i < ranges[s].end; ++i)
        for (Parameter* q : model.layers()[static_cast<size_t>(i)]->parameters()) params.push_back(q);
      if (const Model* head = p->parts().async.local_head(static_cast<int>(s)))
        for (Parameter* q : head->parameters()) params.push_back(q);
      most = std::max(most, macs_of(params));
    }
    return most;
  }
  return macs_of(model.parameters());
}

json quality(const CsvClassificationDataset& digits, int steps) {
  const std::vector<Batch> held_out = digits.held_out_batches(64);
  const int m = 4;
  json rows = json::array();
  for (const Run& r : kRuns) {
    std::shared_ptr<Model> model = build_mlp(digits_mlp(digits));
    auto trainer = make(r, model, m);
    auto data = digits.training_source();
    const bench::TrainedRun run = bench::train_steps(*trainer, *data, steps);
    const auto [loss, accuracy] = bench::evaluate(trainer->model(), held_out);
    rows.push_back({{"run", r.name()}, {"samples", run.samples}, {"held_out_loss", loss}, {"held_out_accuracy", accuracy}});
  }
  return {{"model", "mlp 64-256-256-256-256-10"}, {"micro_batches", m}, {"rows_per_micro_batch", 8},
          {"steps", steps}, {"train_samples", digits.train_size()}, {"held_out_samples", digits.held_out_size()},
          {"runs", rows}};
}

json throughput(const CsvClassificationDataset& digits, int steps) {
  const int m = 4;
  json rows = json::array();
  double ppll2 = 0, f1b2 = 0;
  for (const Run& r : kRuns) {
    std::shared_ptr<Model> model = build_mlp(digits_mlp(digits));
    auto trainer = make(r, model, m);
    auto data = digits.training_source();  // the same batches for every run
    trainer->step(*data);                  // fills a pipeline that does not drain between steps
    std::vector<double> seconds;
    for (int s = 1; s <= steps; ++s) seconds.push_back(trainer->step(*data).seconds);
    trainer->drain();
    const double t = bench::median(seconds);
    if (r.name() == "ppll p=2") ppll2 = t;
    if (r.name() == "1f1b p=2") f1b2 = t;
    rows.push_back({{"run", r.name()},
                    {"ranks", r.schedule == "sequential" ? 1 : (r.stages - 1) * r.groups + 1},
                    {"step_seconds", t},
                    {"samples_per_second", m * 8 / t},
                    {"max_rank_macs_per_sample", max_rank_macs(*trainer, *model)}});
  }
  for (json& row : rows) {
    row["throughput_vs_ppll_p2"] = ppll2 / row["step_seconds"].get<double>();
    row["throughput_vs_1f1b_p2"] = f1b2 / row["step_seconds"].get<double>();
  }
  return {{"steps", steps}, {"micro_batches", m}, {"rows_per_micro_batch", 8}, {"runs", rows}};
}

}  // namespace

int main(int argc, char** argv) {
  bench::BenchArgs args;
  args.steps = 300;
  args.throughput_steps = 40;
  if (!bench::parse_bench_args(argc, argv, "neuron_groups_bench", &args)) return 2;
  try {
    PF_CHECK_ARG(!args.digits.empty(), "--digits FILE is required (bench/local/neuron_groups.sh fetches it)");
    cpu::set_blas_threads_for_this_thread(1);
    const CsvClassificationDataset digits = bench::load_digits(args.digits);
    json out;
    out["quality_digits"] = quality(digits, args.steps);
    out["throughput_digits"] = throughput(digits, args.throughput_steps);
    std::cout << out.dump() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "neuron_groups_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

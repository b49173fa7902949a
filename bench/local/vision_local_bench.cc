// The seeds' vision experiments in small (issue 39 item 8): local learning (ppll, local-updates;
// docs/SCHEDULES.md, "Local learning") against end-to-end backpropagation (1F1B) and sequential
// training, on a ResNet and a ViT at 4 ranks on scikit-learn's handwritten digits (8x8 images, one
// channel; --digits FILE, the gunzipped CSV; 20% held out). bench/local/vision.sh. One JSON object.
//  * quality: every schedule trains the same samples (AdamW, lr 3e-3, m = 4 micro-batches of 8
//    images, --steps steps); held-out loss and accuracy of the model's own output (the last head).
//  * throughput: the median step time of 1F1B and of each local schedule at 4 ranks over
//    --throughput-steps steps (after one warm-up), and 1F1B's over each, measured (4 threads on this
//    machine's cores) and predicted by the simulator fed each run's measured mean action costs.
// Usage: vision_local_bench --digits FILE [--steps N] [--throughput-steps N]
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "bench/training_bench.h"
#include "runtime/core/error.h"
#include "runtime/data/csv_classification.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/models/builders.h"
#include "runtime/schedules/local_schedules.h"
#include "runtime/schedules/simulator.h"

namespace {

using namespace pf;
using nlohmann::json;

constexpr int kRanks = 4, kMicroBatches = 4;
const std::vector<std::string> kLocal = {"ppll", "local-updates"};

struct VisionModel {
  std::string name, description;
  std::function<std::shared_ptr<Model>()> build;
};

std::vector<VisionModel> models(const CsvClassificationDataset& digits) {
  ResNetConfig r;
  r.channels = 1;
  r.image_size = 8;
  r.width = 16;
  r.blocks = {1, 1};
  r.groups = 4;
  r.classes = digits.classes();
  VitConfig v;
  v.channels = 1;
  v.image_size = 8;
  v.patch = 2;
  v.d_model = 32;
  v.heads = 4;
  v.layers = 4;
  v.mlp_hidden = 64;
  v.classes = digits.classes();
  return {{"resnet", "resnet: 3x3 stem of 16 channels, blocks [1, 1] (16, 32 channels), GroupNorm 4 groups",
           [r] { return build_resnet(r); }},
          {"vit", "vit: 2x2 patches (16 + class token), d_model 32, 4 heads, 4 blocks, mlp 64",
           [v] { return build_vit(v); }}};
}

TrainerOptions base_options() {
  TrainerOptions base;
  base.micro_batches = kMicroBatches;
  base.seed = 3;
  base.optimizer.lr = 3e-3f;
  return base;
}

json quality(const VisionModel& vm, const CsvClassificationDataset& digits, int steps) {
  const std::vector<Batch> held_out = digits.held_out_batches(64);
  json rows = json::array();
  std::vector<std::pair<std::string, int>> runs = {{"sequential", 1}, {"1f1b", kRanks}};
  for (const auto& s : kLocal) runs.emplace_back(s, kRanks);
  for (const auto& [schedule, ranks] : runs) {
    auto data = digits.training_source();
    std::shared_ptr<Model> model = vm.build();
    const std::unique_ptr<Trainer> trainer = bench::make_trainer(schedule, ranks, model, base_options());
    const bench::TrainedRun run = bench::train_steps(*trainer, *data, steps);
    const auto [loss, accuracy] = bench::evaluate(*model, held_out);
    rows.push_back({{"schedule", schedule},
                    {"ranks", ranks},
                    {"samples", run.samples},
                    {"last_train_loss", run.last_loss},
                    {"held_out_loss", loss},
                    {"held_out_accuracy", accuracy}});
  }
  return rows;
}

std::unique_ptr<exec::PipelineTrainer> pipeline(const VisionModel& vm, const std::string& schedule) {
  exec::PipelineOptions po;
  po.base = base_options();
  po.schedule = schedule;
  po.ranks = kRanks;
  po.record_timeline = true;  // the measured action costs
  return std::make_unique<exec::PipelineTrainer>(vm.build(), po);
}

json throughput(const VisionModel& vm, const CsvClassificationDataset& digits, int steps) {
  const std::vector<Batch> data = digits.held_out_batches(8 * kMicroBatches);  // any images: only the time counts
  PF_CHECK_ARG(static_cast<int>(data.size()) > steps, "--throughput-steps ", steps, ": the digits give ",
               data.size(), " batches of ", 8 * kMicroBatches, " images, need steps + 1");
  auto flush = pipeline(vm, "1f1b");
  const bench::StepTiming f =
      bench::time_steps(*flush, data, steps, nullptr, [](const exec::PipelineTrainer& t, const sched::CostModel& cm) {
        return (sched::simulate(t.schedule(), cm).makespan + t.last_stats().optimizer_us) * 1e-6;
      });
  json out = {{"ranks", kRanks}, {"1f1b_step_seconds", f.seconds}, {"1f1b_predicted_step_seconds", f.predicted}};
  for (const auto& schedule : kLocal) {
    auto t = pipeline(vm, schedule);
    const bench::StepTiming timing =
        bench::time_steps(*t, data, steps, nullptr, [&](const exec::PipelineTrainer&, const sched::CostModel& cm) {
          return sched::simulate_local_steady_state(schedule, kRanks, kMicroBatches, cm).per_micro_batch *
                 kMicroBatches * 1e-6;
        });
    out[schedule] = {{"step_seconds", timing.seconds},
                     {"predicted_step_seconds", timing.predicted},
                     {"throughput_vs_1f1b", f.seconds / timing.seconds},
                     {"predicted_throughput_vs_1f1b", f.predicted / timing.predicted}};
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bench::BenchArgs defaults;
  defaults.steps = 200;
  defaults.throughput_steps = 9;
  return bench::bench_main(
      argc, argv, "vision_local_bench", defaults,
      [](const bench::BenchArgs& a) {
        PF_CHECK_ARG(!a.digits.empty(), "--digits FILE is required (bench/local/vision.sh fetches it)");
        const CsvClassificationDataset digits = bench::load_digits(a.digits);
        json out = {{"data", a.digits},
                    {"train_samples", digits.train_size()},
                    {"held_out_samples", digits.held_out_size()},
                    {"micro_batches", kMicroBatches},
                    {"rows_per_micro_batch", 8},
                    {"steps", a.steps},
                    {"throughput_steps", a.throughput_steps}};
        for (const VisionModel& vm : models(digits)) {
          out[vm.name] = {{"model", vm.description},
                          {"quality", quality(vm, digits, a.steps)},
                          {"throughput", throughput(vm, digits, a.throughput_steps)}};
        }
        return out;
      },
      [](const bench::BenchArgs&, std::shared_ptr<comm::World>) -> json {
        fail(ErrorCode::kInvalidArgument, "vision_local_bench runs in one process (4 threads), not under mpirun");
      });
}

#include "bench/training_bench.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include <nlohmann/json.hpp>

#include "runtime/comm/mpi_process.h"
#include "runtime/comm/mpi_world.h"
#include "runtime/core/error.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/train/sequential_trainer.h"
#include "runtime/train/stage.h"

namespace pf::bench {

using sched::ActionKind;

bool parse_bench_args(int argc, char** argv, const char* program, BenchArgs* args) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--digits") args->digits = argv[i + 1];
    else if (flag == "--steps") args->steps = std::atoi(argv[i + 1]);
    else if (flag == "--throughput-steps") args->throughput_steps = std::atoi(argv[i + 1]);
    else {
      std::cerr << program << ": unknown flag " << flag << "\n";
      return false;
    }
  }
  return true;
}

int bench_main(int argc, char** argv, const char* program, BenchArgs defaults,
               const std::function<nlohmann::json(const BenchArgs&)>& alone,
               const std::function<nlohmann::json(const BenchArgs&, std::shared_ptr<comm::World>)>& under_mpirun) {
  BenchArgs args = defaults;
  if (!parse_bench_args(argc, argv, program, &args)) return 2;
  try {
    cpu::set_blas_threads_for_this_thread(1);
    if (comm::launched_by_mpi()) {
      auto world = comm::MpiWorld::world();
      PF_CHECK_ARG(world->size() == 2, "run under mpirun -np 2, got ", world->size(), " processes");
      pin_this_thread(world->rank());
      const nlohmann::json t = under_mpirun(args, world);
      if (world->rank() == 0) std::cout << nlohmann::json({{"processes", t}}).dump() << std::endl;
      return 0;
    }
    std::cout << alone(args).dump() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}

CsvClassificationDataset load_digits(const std::string& path) {
  CsvClassificationOptions o;
  o.path = path;
  o.rows = 8;
  o.feature_scale = 1.0f / 16.0f;
  o.held_out_fraction = 0.2;
  o.shuffle_seed = 5;
  return CsvClassificationDataset::load(o);
}

BenchText bench_text(int blocks) {
  BenchText t;
  t.train.rows = 4;
  t.train.seq_len = 32;
  t.train.seed = 1;
  CharTextOptions test = t.train;
  test.seed = 99;
  CharTextDataset held(test);  // the same files, so the training text's vocabulary
  for (int i = 0; i < 16; ++i) t.held_out.push_back(held.next());
  t.gpt.vocab = held.vocab_size();
  t.gpt.seq_len = t.train.seq_len;
  t.gpt.d_model = 64;
  t.gpt.heads = 4;
  t.gpt.layers = blocks;
  return t;
}

std::pair<double, double> evaluate(const Model& model, const std::vector<Batch>& batches) {
  const std::vector<Stage> whole = make_stages(model, {{0, static_cast<int>(model.layers().size())}});
  double loss = 0, correct = 0, rows = 0;
  for (const Batch& b : batches) {
    std::vector<SavedContext> ctx;
    const Tensor out = whole[0].forward(b.inputs, ctx);
    SavedContext lc;
    loss += whole[0].loss_forward(out, b.targets, 1.0f, lc);
    if (model.input_spec().kind == InputSpec::Kind::kFeatures) {
      const int64_t n = out.shape()[0], c = out.shape()[1];
      for (int64_t i = 0; i < n; ++i) {
        const float* row = out.f32() + i * c;
        correct += (std::max_element(row, row + c) - row) == b.targets.i32()[i] ? 1 : 0;
      }
      rows += static_cast<double>(n);
    }
  }
  return {loss / static_cast<double>(batches.size()), rows > 0 ? correct / rows : -1.0};
}

namespace {
const std::vector<ActionKind> kTimedKinds = {ActionKind::kForward,       ActionKind::kBackward,
                                             ActionKind::kBackwardInput, ActionKind::kBackwardWeight,
                                             ActionKind::kHead,          ActionKind::kUpdate};
}  // namespace

std::map<std::pair<int, int>, double> mean_action_costs(const exec::PipelineTrainer& t, comm::World* world) {
  const size_t S = static_cast<size_t>(t.schedule().num_stages());
  std::vector<double> sum(kTimedKinds.size() * S, 0.0), n(sum.size(), 0.0);
  for (const auto& rank : t.last_timeline().ranks)
    for (const auto& ta : rank)
      for (size_t k = 0; k < kTimedKinds.size(); ++k)
        if (ta.action.kind == kTimedKinds[k]) {
          sum[k * S + static_cast<size_t>(ta.action.stage)] += ta.duration();
          n[k * S + static_cast<size_t>(ta.action.stage)] += 1;
        }
  if (world) {
    const std::vector<double> all_sum = comm::all_gather_doubles(*world, sum, 600);
    const std::vector<double> all_n = comm::all_gather_doubles(*world, n, 600);
    for (size_t i = 0; i < sum.size(); ++i) {
      sum[i] = n[i] = 0;
      for (int r = 0; r < world->size(); ++r) {
        sum[i] += all_sum[static_cast<size_t>(r) * sum.size() + i];
        n[i] += all_n[static_cast<size_t>(r) * sum.size() + i];
      }
    }
  }
  std::map<std::pair<int, int>, double> out;
  for (size_t k = 0; k < kTimedKinds.size(); ++k)
    for (size_t s = 0; s < S; ++s)
      out[{static_cast<int>(kTimedKinds[k]), static_cast<int>(s)}] = n[k * S + s] > 0 ? sum[k * S + s] / n[k * S + s] : 0.0;
  return out;
}

sched::CostModel measured_cost_model(const std::map<std::pair<int, int>, double>& c, int num_stages) {
  sched::CostModel cm = sched::CostModel::uniform(num_stages);
  cm.t_head.assign(static_cast<size_t>(num_stages), 0.0);
  double update = 0;
  for (int s = 0; s < num_stages; ++s) {
    cm.t_f[s] = c.at({static_cast<int>(ActionKind::kForward), s});
    // A fused BW is B and W together; schedules that split them (zero bubble) have both.
    const double fused = c.at({static_cast<int>(ActionKind::kBackward), s});
    cm.t_b[s] = fused > 0 ? fused : c.at({static_cast<int>(ActionKind::kBackwardInput), s});
    cm.t_w[s] = fused > 0 ? 0.0 : c.at({static_cast<int>(ActionKind::kBackwardWeight), s});
    cm.t_head[s] = c.at({static_cast<int>(ActionKind::kHead), s});
    update = std::max(update, c.at({static_cast<int>(ActionKind::kUpdate), s}));
  }
  cm.t_step = update;  // the simulator has one UPDATE cost: the slower stage's
  return cm;
}

std::unique_ptr<Trainer> make_trainer(const std::string& schedule, int ranks, std::shared_ptr<Model> model,
                                      const TrainerOptions& base) {
  if (schedule == "sequential") return std::make_unique<SequentialTrainer>(model, base);
  exec::PipelineOptions po;
  po.base = base;
  po.schedule = schedule;
  po.ranks = ranks;
  po.record_timeline = false;
  return std::make_unique<exec::PipelineTrainer>(model, po);
}

TrainedRun train_steps(Trainer& trainer, DataSource& source, int steps) {
  TrainedRun run;
  for (int s = 0; s < steps; ++s) {
    const StepResult r = trainer.step(source);
    run.last_loss = r.loss;
    run.samples += r.samples;
  }
  trainer.drain();  // schedules that keep micro-batches in flight finish them
  return run;
}

StepTiming time_steps(exec::PipelineTrainer& trainer, const std::vector<Batch>& data, int steps, comm::World* world,
                      const std::function<double(const exec::PipelineTrainer&, const sched::CostModel&)>& predict,
                      std::vector<sched::CostModel>* measured) {
  trainer.step(data[0]);
  std::vector<double> seconds, predicted;
  for (int s = 1; s <= steps; ++s) {
    seconds.push_back(trainer.step(data[static_cast<size_t>(s)]).seconds);
    const sched::CostModel cm =
        measured_cost_model(mean_action_costs(trainer, world), trainer.schedule().num_stages());
    predicted.push_back(predict(trainer, cm));
    if (measured) measured->push_back(cm);
  }
  trainer.drain();
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  return {median(seconds), median(predicted)};
}

std::unique_ptr<exec::PipelineTrainer> make_gpt_pipeline(const GptPipelineBench& b, const std::string& schedule,
                                                         int ranks, std::shared_ptr<comm::World> world,
                                                         const OptimizerConfig& optimizer, bool rank_optimizer) {
  exec::PipelineOptions po;
  po.base = b.options();
  po.base.optimizer = optimizer;
  po.schedule = schedule;
  po.ranks = ranks;
  po.world = world;
  po.rank_optimizer = rank_optimizer;
  if (!world) po.cpu_affinity = {0, 1};
  std::shared_ptr<Model> model;
  {
    std::unique_ptr<DeferParameterAllocation> defer;
    if (world) defer = std::make_unique<DeferParameterAllocation>();
    model = build_gpt(b.gpt());
  }
  return std::make_unique<exec::PipelineTrainer>(model, po);
}

StepTiming time_1f1b(const GptPipelineBench& b, int ranks, std::shared_ptr<comm::World> world,
                     const OptimizerConfig& optimizer, const std::vector<Batch>& data) {
  auto flush = make_gpt_pipeline(b, "1f1b", ranks, world, optimizer);
  return time_steps(*flush, data, b.steps, world.get(), [](const exec::PipelineTrainer& t, const sched::CostModel& cm) {
    return (sched::simulate(t.schedule(), cm).makespan + t.last_stats().optimizer_us) * 1e-6;
  });
}

}  // namespace pf::bench

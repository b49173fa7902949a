// What the training-method benchmarks (bench/async, bench/local) share: evaluating a model on
// held-out batches, and the measured mean action costs of a pipeline's last step as a cost model.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>
#include <map>
#include <utility>
#include <vector>

#include "bench/bench_util.h"
#include "runtime/comm/world.h"
#include "runtime/data/char_text_dataset.h"
#include "runtime/data/csv_classification.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/models/model.h"
#include "runtime/schedules/simulator.h"
#include "runtime/train/batch.h"

namespace pf::bench {

// Mean loss, and accuracy for feature classifiers (-1 for token models), of `model` over
// `batches`, forward only.
std::pair<double, double> evaluate(const Model& model, const std::vector<Batch>& batches);

// Mean duration (us) per (kind, stage) of F, BW, B, W, HEAD and UPDATE in the last step's timeline,
// over every process of `world` when it is set (a collective then).
std::map<std::pair<int, int>, double> mean_action_costs(const exec::PipelineTrainer& t, comm::World* world);

// The cost model of those means: t_f, t_b = BW and t_w = 0 (or t_b = B and t_w = W where B and W
// are split), t_head per stage, t_step = the slower stage's UPDATE.
sched::CostModel measured_cost_model(const std::map<std::pair<int, int>, double>& costs, int num_stages);

// The benchmarks' flags: --digits FILE, --steps N, --throughput-steps N. False (with a message
// naming `program`) for another flag.
struct BenchArgs {
  std::string digits;
  int steps = 300;
  int throughput_steps = 5;
};
bool parse_bench_args(int argc, char** argv, const char* program, BenchArgs* args);

// A benchmark's main: parses the flags (`defaults` for those not given), sets single-threaded
// BLAS, and prints one JSON object: under mpirun (2 processes, one pinned per core) rank 0 prints
// {"processes": under_mpirun(args, world)}, alone it prints alone(args). Errors go to stderr
// (exit code 1; 2 for a bad flag).
int bench_main(int argc, char** argv, const char* program, BenchArgs defaults,
               const std::function<nlohmann::json(const BenchArgs&)>& alone,
               const std::function<nlohmann::json(const BenchArgs&, std::shared_ptr<comm::World>)>& under_mpirun);

// scikit-learn's digits from `path`: 8 rows per micro-batch, features scaled to [0, 1], 20% held
// out (shuffled with a fixed seed).
CsvClassificationDataset load_digits(const std::string& path);

// The character GPT of the quality runs on the licence texts: 4 rows of 32 tokens per
// micro-batch, training windows from seed 1, 16 held-out windows from another seed, and a GPT
// (d_model 64, 4 heads) of `blocks` blocks over the text's vocabulary.
struct BenchText {
  CharTextOptions train;
  std::vector<Batch> held_out;
  GptConfig gpt;
};
BenchText bench_text(int blocks);

// "sequential": the reference trainer; otherwise `schedule` on `ranks` threads (no timeline).
std::unique_ptr<Trainer> make_trainer(const std::string& schedule, int ranks, std::shared_ptr<Model> model,
                                      const TrainerOptions& base);

// Trains `steps` steps from `source` (a pipeline is drained at the end): the last step's loss and
// the samples seen.
struct TrainedRun {
  double last_loss = 0;
  int64_t samples = 0;
};
TrainedRun train_steps(Trainer& trainer, DataSource& source, int steps);

// One warm-up step on data[0] (it fills a pipeline that never flushes), then `steps` steps on
// data[1..steps]: the median step time and the median of `predict(trainer)` (seconds) after each
// step; a pipeline is drained at the end. `measured` (optional) gets the measured cost model of
// every step.
struct StepTiming {
  double seconds = 0;
  double predicted = 0;
};
StepTiming time_steps(exec::PipelineTrainer& trainer, const std::vector<Batch>& data, int steps, comm::World* world,
                      const std::function<double(const exec::PipelineTrainer&, const sched::CostModel&)>& predict,
                      std::vector<sched::CostModel>* measured = nullptr);

// The pipeline GPT of bench/pipeline under `schedule` on `ranks` ranks: threads pinned to cores 0
// and 1, or (with `world`) this process's rank, only its stages allocated. `rank_optimizer`:
// PipelineOptions::rank_optimizer (false: the main thread steps every parameter).
std::unique_ptr<exec::PipelineTrainer> make_gpt_pipeline(const GptPipelineBench& b, const std::string& schedule,
                                                         int ranks, std::shared_ptr<comm::World> world,
                                                         const OptimizerConfig& optimizer, bool rank_optimizer = true);

// 1F1B with a flush on that GPT: its step time, measured and predicted (the simulated makespan
// plus the measured optimizer step).
StepTiming time_1f1b(const GptPipelineBench& b, int ranks, std::shared_ptr<comm::World> world,
                     const OptimizerConfig& optimizer, const std::vector<Batch>& data);

}  // namespace pf::bench

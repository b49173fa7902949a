// `pipeforge train`: trains the MLP (synthetic classification), the small GPT (character text) or
// a model from a JSON file, sequentially or pipelined (--schedule), with the training loop of
// runtime/run (evaluation, learning-rate schedule, periodic checkpoints, metrics log); shows
// progress on stderr and prints the result (or, with --json, one JSON object on stdout). Options
// come from the command line and a config file (--config; tools/cli/train_config.h).
#pragma once

#include <utility>

#include "tools/cli/cli_fwd.h"
#include <cstdint>
#include <string>
#include <vector>

namespace pf::cli {

struct TrainArgs {
  std::string config;          // a config file (train_config.h); the command line wins over it
  std::string plan;            // a plan of `pipeforge plan` (plan_command.h); the command line wins over it
  std::vector<std::string> model_options_given;  // the model's options the user set (adopt_checkpoint_model)
  double plan_step_seconds = 0;  // the step time the plan predicted for its choice (0: no plan)
  bool print_config = false;   // print the effective config as JSON and exit
  bool capabilities = false;   // print what may combine with what (the capability table) and exit
  bool markdown = false;       // --capabilities as Markdown (docs/CAPABILITIES.md)
  bool describe = false;       // print the model's top-level layers (the partition units) and exit
  std::string model = "gpt";
  std::string model_file;      // a model JSON file (the C API's format) instead of --model's builders
  std::string model_json;      // the same inline (config files only)
  std::string init_from;       // a Transformers folder (config.json, model.safetensors): its model and weights
  int64_t steps = 100;
  int micro_batches = 0;  // 0: not given; resolve_train_defaults() picks them
  int64_t batch_size = 8;  // rows per step, split into micro_batches equal micro-batches
  uint64_t seed = 0;
  double lr = 0.0;  // 0: the optimizer's default below
  std::string optimizer = "adamw";
  double momentum = 0.0;
  double weight_decay = 0.0;
  double clip_norm = 0.0;
  // Model size. -1: the model's default.
  int64_t layers = -1;  // GPT and Llama: transformer blocks; MLP: hidden layers
  int64_t d_model = 64;
  int64_t heads = 4;
  int64_t kv_heads = -1;          // Llama: key/value heads (grouped-query attention); -1: --heads
  bool tie_embeddings = false;    // GPT, Llama: the head tied to the token embedding, no bias
  int64_t seq_len = 64;
  int64_t vocab = -1;             // GPT: the text's distinct bytes, or the token file's vocabulary (needed)
  int64_t hidden = -1;            // GPT: MLP width of a block (default 4 * d_model); MLP: hidden width (64)
  int64_t features = 32;          // MLP input features
  int64_t classes = 10;           // MLP classes
  std::vector<std::string> data;  // GPT text files, or {"tokens:FILE"}; empty: the licence texts. Feature
                                  // models: {CSV file} or {"cifar10:PATH"}; empty: the synthetic task
  double held_out = -1;           // share of the text (GPT) held out for evaluation; -1: 0.1 with --eval-every, else 0
  // Learning-rate schedule (runtime/train/lr_schedule.h).
  std::string lr_schedule = "constant";
  int64_t warmup_steps = 0;
  int64_t decay_steps = -1;       // -1: --steps minus --warmup-steps
  double min_lr = 0.0;
  // Evaluation on the held-out split.
  int64_t eval_every = 0;
  int eval_batches = 0;           // micro-batches per evaluation; 0: --microbatches
  // Periodic checkpoints and the metrics log.
  int64_t checkpoint_every = 0;
  std::string checkpoint_dir;
  int keep_checkpoints = 3;
  std::string metrics_log;
  int blas_threads = 1;
  std::string checkpoint;
  std::string resume;
  // Pipelined training: a schedule name or file makes it run one worker thread per rank.
  std::string schedule;       // "" = the sequential reference trainer
  std::string schedule_file;  // a schedule in the text form
  int stages = 1;             // pipeline ranks P
  int data_parallel = 1;      // replicas D (under mpirun: D x P processes; alone: sequential emulation)
  std::string gradient_reduction = "allreduce";  // data parallel: allreduce or deterministic
  int tensor_parallel = 1;    // T (under mpirun: T processes, each holding 1/T of the split layers)
  std::string tensor_reduction = "allreduce";  // tensor parallel: allreduce or deterministic
  bool sequence_parallel = false;              // tensor parallel: activations split by sequence steps
  bool tensor_parallel_overlap = true;         // tensor parallel: B's collective runs while W computes
  int chunks = 0;             // model chunks per rank V; 0 = the schedule's default
  int seq_slices = 1;         // sequence slices per micro-batch S (seq1f1b)
  std::vector<int> layers_per_stage;  // empty = split as `partition` says
  std::string partition = "params";   // "params" (balanced parameter counts), "even" (layer counts) or
                                      // "balanced" (measured per-layer time)
  std::string activation_policy = "none";  // pipelined: none, recompute, offload-host, offload-file, selective
  double activation_budget = 0;            // selective: per-rank activation bytes
  std::string offload_dir;                 // file tier folder
  std::string devices;                     // "" = cpu; "cuda:N"; pipelined: one per rank, comma-separated
  bool overlap_steps = false;              // synchronous schedules: a rank begins the next step early
  // Asynchronous schedules (pipedream, pipedream-2bw, spectrain, pipemare).
  bool vertical_sync = false;         // pipedream
  int spectrain_version = 1;          // spectrain: 1 (the paper) or 2
  int64_t pipemare_anneal = 100;      // pipemare: updates over which the learning rate anneals
  double pipemare_decay = 0.9;        // pipemare: decay of the discrepancy average
  std::string local_head = "auto";    // local learning (ppll, local-updates): the auxiliary heads
  int neuron_groups = 1;              // local learning: width groups of every stage but the last
  double group_diversity = 0.0;       // neuron groups: the diversity term's weight
  double group_diversity_temperature = 3.0;
  // Fail-slow adaptation (docs/PLANNING.md, "Adapting to a slow rank"): a synchronous schedule's
  // trainer re-partitions itself when a rank stays `adapt_threshold` times slower than predicted
  // (against the fastest) for `adapt_patience` steps in a row.
  bool adapt = false;
  double adapt_threshold = 1.5;
  int adapt_patience = 3;
  std::string profile;        // the per-layer profile (`plan --save-profile`); "": measured at startup
  // Test and benchmark knobs: rank slow_rank's compute runs slow_factor times as long (-1: none).
  int slow_rank = -1;
  double slow_factor = 1.0;
  // A job for a synchronous pipeline's bubbles (ranks as threads): "sweep:FILE" (docs/SWEEP.md).
  std::string fill;
  std::string trace_file;     // Chrome trace of the last step (pipelined)
  std::string svg_file;       // SVG timeline of the last step (pipelined)
  double svg_width = 1200;    // its width in pixels
  bool json = false;
  bool quiet = false;
};

constexpr double kDefaultAdamWLr = 3e-3;
constexpr double kDefaultSgdLr = 0.05;

// The model's options (--model, --model-file, --layers, --d-model, ... --data) and the
// optimizer's (--optimizer, --lr, --momentum, --weight-decay, --clip-norm), which `plan` shares.
void add_model_options(CLI::App* cmd, TrainArgs& args);
void add_optimizer_options(CLI::App* cmd, TrainArgs& args);
// Registers the train subcommand and its options (train_options.cc).
CLI::App* add_train_command(CLI::App& app, TrainArgs& args);
// The topics `train --help` lists its options under, in order: every option but --help is in one.
const std::vector<std::pair<std::string, std::vector<std::string>>>& train_option_groups();
// Puts each of cmd's options under its topic (throws CLI's error for a name that is not an option).
void group_train_options(CLI::App* cmd);
// Runs the command; returns the process exit code. Throws only for unexpected failures.
int run_train(const TrainArgs& args);

}  // namespace pf::cli

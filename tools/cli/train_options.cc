// The options of `pipeforge train`.
#include <CLI/CLI.hpp>

#include "runtime/schedules/activation_policy.h"
#include "runtime/models/local_head_kind.h"
#include "runtime/train/lr_schedule.h"
#include "tools/cli/train_command.h"
#include "tools/cli/validators.h"

namespace pf::cli {

void add_model_options(CLI::App* cmd, TrainArgs& a) {
  auto* model = cmd->add_option("--model", a.model,
                                "mlp (synthetic classification, a CSV file or CIFAR-10 images), gpt or llama "
                                "(character text or a token file)")
                    ->check(CLI::IsMember({"mlp", "gpt", "llama"}))
                    ->capture_default_str();
  cmd->add_option("--model-file", a.model_file,
                  "train the model of this JSON file (the C API's format; token input: character text or a token "
                  "file, feature input: synthetic classification, a CSV file or CIFAR-10 images)")
      ->check(CLI::ExistingFile)
      ->excludes(model);
  cmd->add_option("--init-from", a.init_from,
                  "a Hugging Face Transformers folder (config.json and model.safetensors, as save_pretrained or "
                  "`pipeforge export` write it; Llama): its model and its weights")
      ->check(CLI::ExistingDirectory)
      ->excludes(model)
      ->excludes("--model-file");
  cmd->add_option("--layers", a.layers, "GPT, Llama: transformer blocks; MLP: hidden layers (default 2, or enough for one top-level layer per stage of the schedule)")
      ->check(CLI::Range(int64_t{0}, int64_t{1024}));
  cmd->add_option("--d-model", a.d_model, "GPT, Llama: model width")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16))
      ->capture_default_str();
  cmd->add_option("--heads", a.heads, "GPT, Llama: attention heads")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}))
      ->capture_default_str();
  cmd->add_option("--kv-heads", a.kv_heads,
                  "Llama: key/value heads, dividing --heads (grouped-query attention; default: --heads)")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  cmd->add_flag("--tie-embeddings", a.tie_embeddings,
                "GPT, Llama: the head is the token embedding (one matrix, no head bias; GPT-2's form)");
  cmd->add_option("--seq-len", a.seq_len, "GPT, Llama: tokens per row")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--vocab", a.vocab,
                  "GPT, Llama: vocabulary size (default: the text's distinct bytes; needed with --data tokens:FILE, "
                  "e.g. 50257 for GPT-2's tokens; plan on a GPU cluster: 51200)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  cmd->add_option("--hidden", a.hidden, "GPT: MLP width of a block (4 * d-model); Llama: SwiGLU width (8/3 * d-model, rounded up to a multiple of 8); MLP: hidden width (64)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--features", a.features, "MLP: input features")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--classes", a.classes, "MLP: classes")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--data", a.data,
                  "GPT, Llama: text files (default: /usr/share/common-licenses/*), or tokens:FILE, a token file of "
                  "nanoGPT (uint16) or llm.c (with its header); MLP and feature-input models (default: a synthetic "
                  "task): a CSV file (the features, then an integer label, per line), or cifar10:PATH, CIFAR-10's "
                  "binary files (a .bin file or the cifar-10-batches-bin folder; input width 3072, pixels / 255)")
      ->check(data_file());
}

void add_optimizer_options(CLI::App* cmd, TrainArgs& a) {
  cmd->add_option("--optimizer", a.optimizer, "sgd or adamw")
      ->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  cmd->add_option("--lr", a.lr, "learning rate (default 3e-3 for adamw, 0.05 for sgd)")
      ->check(positive_number());
  cmd->add_option("--momentum", a.momentum, "SGD momentum")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--weight-decay", a.weight_decay, "SGD: L2 added to the gradient; AdamW: decoupled")
      ->check(non_negative_number())
      ->capture_default_str();
  cmd->add_option("--clip-norm", a.clip_norm, "clip gradients to this global L2 norm (0: off)")
      ->check(non_negative_number())
      ->capture_default_str();
}

CLI::App* add_train_command(CLI::App& app, TrainArgs& a) {
  CLI::App* cmd = app.add_subcommand("train", "Train the MLP, the small GPT or a model file, sequentially or pipelined");
  cmd->add_option("--config", a.config,
                  "read options from this JSON file (docs/TRAINING.md, \"Config files\"); options given here win")
      ->check(CLI::ExistingFile);
  cmd->add_option("--plan", a.plan,
                  "train as this plan of `pipeforge plan` says (its schedule, ranks, chunks, micro-batches, "
                  "partition, activation policy, data-parallel degree, model and batch); options given here win")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--print-config", a.print_config, "print the effective config as JSON (a --config file) and exit");
  cmd->add_flag("--capabilities", a.capabilities,
                "print what PipeForge refuses to combine (schedules, placements, memory policies, data "
                "parallelism, adaptation, checkpoints), one rule a line, and exit");
  cmd->add_flag("--markdown", a.markdown, "--capabilities: as the Markdown table of docs/CAPABILITIES.md");
  cmd->add_flag("--describe", a.describe,
                "print the model's top-level layers (what --layers-per-stage counts) and their parameters, and exit");
  add_model_options(cmd, a);
  cmd->add_option("--steps", a.steps, "optimizer steps to run (after --resume: further steps)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--microbatches,--micro-batches", a.micro_batches,
                  "micro-batches per step, per replica with --data-parallel (default: 1 without a schedule; with one, "
                  "the largest divisor of --batch-size up to 2 x --stages, so that the ranks overlap; a schedule "
                  "file's own count)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--batch-size", a.batch_size, "rows per step, per replica (a multiple of --microbatches)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  cmd->add_option("--seed", a.seed, "seed of the initial parameters and of the data")->capture_default_str();
  add_optimizer_options(cmd, a);
  cmd->add_option("--held-out", a.held_out,
                  "GPT, a CSV file, one CIFAR-10 file: share of the text or samples held out for evaluation (default "
                  "0.1 with --eval-every, else 0); a CIFAR-10 folder holds out its test_batch.bin; the synthetic "
                  "task: the held-out samples are drawn apart from the training ones")
      ->check(CLI::Range(0.0, 0.9));
  cmd->add_option("--lr-schedule", a.lr_schedule, "constant, cosine or linear (decay after the warm-up)")
      ->check(CLI::IsMember(lr_schedule_names()))
      ->capture_default_str();
  cmd->add_option("--warmup-steps", a.warmup_steps, "steps of linear learning-rate warm-up")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--decay-steps", a.decay_steps,
                  "cosine, linear: steps of decay after the warm-up (default: --steps minus --warmup-steps)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--min-lr", a.min_lr, "cosine, linear: the learning rate at the end of the decay")
      ->check(non_negative_number())
      ->capture_default_str();
  cmd->add_option("--eval-every", a.eval_every,
                  "evaluate on the held-out split after every N steps and after the last (0: never)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--eval-batches", a.eval_batches, "micro-batches per evaluation (default: --microbatches)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--checkpoint-every", a.checkpoint_every,
                  "save a checkpoint into --checkpoint-dir after every N steps and after the last (0: never)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--checkpoint-dir", a.checkpoint_dir,
                  "folder of the periodic checkpoints (step-N.pfckpt; --resume DIR takes the newest)");
  cmd->add_option("--keep-checkpoints", a.keep_checkpoints, "periodic checkpoints to keep, newest first (0: all)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--metrics-log", a.metrics_log,
                  "write one JSON line per step (loss, lr, tokens/s, bubble rate, peak memory per rank, "
                  "evaluation) to this file; a resumed run keeps the lines up to the step it resumes from, "
                  "a new run starts the file afresh");
  cmd->add_option("--blas-threads", a.blas_threads, "BLAS threads")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--checkpoint", a.checkpoint, "save a checkpoint here at the end (under mpirun: a folder of per-rank shards and a manifest)");
  cmd->add_option("--resume", a.resume, "load this checkpoint first: a file, a sharded folder, or a --checkpoint-dir folder (its "
                  "newest), saved under any --stages or --data-parallel; the model, data and trainer options of the "
                  "saved run are restored where none are given")
      ->check(CLI::ExistingPath);
  auto* schedule = cmd->add_option("--schedule", a.schedule,
                                   "train pipelined with this schedule: gpipe, 1f1b, interleaved-1f1b, bfs, "
                                   "zb-h1, zb-h2, zb-v, zb-auto, interleaved-zb, dualpipe-v, v-half, v-min, bitpipe, "
                                   "asynchronous (no flush): pipedream, "
                                   "pipedream-2bw, spectrain, pipemare, or local learning (no gradient crosses "
                                   "ranks): ppll, local-updates (default: the sequential reference)");
  auto* schedule_file = cmd->add_option("--schedule-file", a.schedule_file, "train with a schedule in the text form")
                            ->check(CLI::ExistingFile);
  schedule->excludes(schedule_file);
  cmd->add_option("--stages,--ranks", a.stages, "pipeline ranks P (one worker thread each)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--chunks", a.chunks,
        "model chunks per rank V (default 0: the schedule's own, 2 for interleaved-1f1b, interleaved-zb, "
        "bfs and the V schedules, 1 for the others)")
      ->check(CLI::Range(0, 64));
  cmd->add_option("--seq-slices", a.seq_slices,
                  "sequence slices per micro-batch S (schedule seq1f1b, GPT models; S must divide the sequence "
                  "length)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  auto* counts = cmd->add_option("--layers-per-stage", a.layers_per_stage, "top-level layers per stage");
  cmd->add_option("--partition", a.partition,
                  "params (split minimising the largest stage's parameter count), even (by layer count) or "
                  "balanced (profile each layer on one micro-batch, then split minimising the slowest stage)")
      ->check(CLI::IsMember({"params", "even", "balanced"}))
      ->excludes(counts)
      ->capture_default_str();
  cmd->add_option("--activation-policy", a.activation_policy,
                  "pipelined: none, recompute, offload-host, offload-file, selective or balance (docs/MEMORY.md)")
      ->check(CLI::IsMember(pf::sched::activation_policy_names()))
      ->capture_default_str();
  cmd->add_option("--activation-budget", a.activation_budget, "selective: activation bytes per rank")
      ->check(non_negative_number());
  cmd->add_option("--offload-dir", a.offload_dir, "folder for offload-file (and selective with files)");
  cmd->add_option("--devices", a.devices,
                  "where to train: cpu (default), cuda:N, or pipelined one device per rank (cuda:0,cuda:1); "
                  "under mpirun, cuda gives each process the GPU of its node-local rank");
  cmd->add_flag("--overlap-steps", a.overlap_steps,
                "synchronous schedules: a rank begins the next step as soon as its own part of this one and its "
                "update are done, while later ranks finish (results unchanged; docs/EXECUTION.md, \"Overlapping steps\")");
  cmd->add_flag("--vertical-sync", a.vertical_sync,
                "pipedream: every stage uses, for a micro-batch, the weight version stage 0 used");
  cmd->add_option("--spectrain-version", a.spectrain_version,
                  "spectrain: 1 (the paper's prediction distances, default) or 2 (backward reuses the forward's)")
      ->check(CLI::Range(1, 2))
      ->capture_default_str();
  cmd->add_option("--pipemare-anneal", a.pipemare_anneal,
                  "pipemare: updates over which each stage's learning rate anneals from lr/delay to lr (0: none)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--pipemare-decay", a.pipemare_decay, "pipemare: decay of the weight-discrepancy average, in [0, 1)")
      ->check(CLI::Range(0.0, 0.999999))
      ->capture_default_str();
  cmd->add_option("--local-head", a.local_head,
                  "ppll, local-updates: each stage's auxiliary head: auto (GPT: layernorm-linear, MLP: linear), "
                  "linear, layernorm-linear or mlp")
      ->check(CLI::IsMember(local_head_kinds()))
      ->capture_default_str();
  cmd->add_option("--neuron-groups", a.neuron_groups,
                  "ppll, local-updates: split every stage but the last by width into this many groups, one rank "
                  "each, each with its own head ((stages - 1) x groups + 1 ranks; docs/SCHEDULES.md, \"Neuron groups\")")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--group-diversity", a.group_diversity,
                  "--neuron-groups: weight of the term that makes a stage's group heads disagree on wrong classes "
                  "(0: off; the paper uses 0.5)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  cmd->add_option("--group-diversity-temperature", a.group_diversity_temperature,
                  "--neuron-groups: the diversity term's softmax temperature")
      ->check(CLI::Range(1e-6, 1e6))
      ->capture_default_str();
  cmd->add_flag("--adapt", a.adapt,
                "synchronous schedules: re-partition live when a rank turns fail-slow (docs/PLANNING.md, "
                "\"Adapting to a slow rank\"); training stays bitwise equal to the run without it");
  cmd->add_option("--adapt-threshold", a.adapt_threshold,
                  "--adapt: a rank this many times slower than predicted, against the fastest rank, is slow")
      ->check(CLI::Range(1.000001, 1e6))
      ->capture_default_str();
  cmd->add_option("--adapt-patience", a.adapt_patience, "--adapt: steps in a row a rank must be slow to re-partition")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--profile", a.profile,
                  "--adapt: the per-layer profile of `pipeforge plan --save-profile` (default: profile the model "
                  "at startup at the run's micro-batch rows)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--slow-rank", a.slow_rank,
                  "test and benchmark knob: emulate a fail-slow device on this pipeline rank (see --slow-factor)")
      ->check(CLI::Range(0, 1023));
  cmd->add_option("--slow-factor", a.slow_factor,
                  "test and benchmark knob: --slow-rank's compute takes this many times as long (>= 1)")
      ->check(CLI::Range(1.0, 1e6))
      ->capture_default_str();
  cmd->add_option("--fill", a.fill,
                  "synchronous schedules, ranks as threads: run a job in the pipeline's bubbles; sweep:FILE trains "
                  "the packed MLP sweep of FILE (docs/SWEEP.md) and prints its ranking at the end");
  cmd->add_option("--trace", a.trace_file, "pipelined: write the last step's Chrome trace here");
  cmd->add_option("--svg", a.svg_file, "pipelined: write the last step's SVG timeline here");
  cmd->add_option("--svg-width", a.svg_width, "width of the --svg drawing in pixels")
      ->check(CLI::Range(200.0, 100000.0))
      ->capture_default_str();
  cmd->add_flag("--json", a.json, "print one JSON object with the results on stdout");
  cmd->add_flag("--quiet", a.quiet, "no progress on stderr");
  cmd->add_option("--data-parallel", a.data_parallel,
                  "D pipeline replicas on disjoint micro-batches (mpirun -np D*P; --batch-size and --microbatches "
                  "are per replica). Without --schedule: the sequential trainer reproduces D replicas' arithmetic")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--gradient-reduction", a.gradient_reduction,
                  "data parallel: allreduce (MPI_Allreduce) or deterministic (bitwise equal to the sequential "
                  "trainer with the same --data-parallel)")
      ->check(CLI::IsMember({"allreduce", "deterministic"}))
      ->capture_default_str();
  cmd->add_option("--tensor-parallel", a.tensor_parallel,
                  "T processes (mpirun -np T) each holding 1/T of every column- and row-parallel linear "
                  "(\"parallel\" in a model file; by default an MLP's linears in column/row pairs), all on the "
                  "same data; the sequential trainer on the CPU so far")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--tensor-reduction", a.tensor_reduction,
                  "tensor parallel: allreduce (MPI_Allreduce) or deterministic (partial results added in rank "
                  "order: bitwise reproducible at any process placement)")
      ->check(CLI::IsMember({"allreduce", "deterministic"}))
      ->capture_default_str();
  cmd->add_flag("--sequence-parallel", a.sequence_parallel,
                "tensor parallel: Megatron's sequence parallelism: between the split layers each process holds 1/T "
                "of the sequence steps (norms, residuals and pipeline messages carry 1/T); all-gather / "
                "reduce-scatter around the split linears");
  cmd->add_flag("--tensor-parallel-overlap", a.tensor_parallel_overlap,
                "tensor parallel: B's all-reduce (or reduce-scatter) of a column split's input gradient runs while "
                "W computes, in a fused backward (--tensor-parallel-overlap=false: it blocks; the same bits)")
      ->capture_default_str();
  group_train_options(cmd);
  return cmd;
}

const std::vector<std::pair<std::string, std::vector<std::string>>>& train_option_groups() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> groups = {
      {"Model and data", {"--model", "--model-file", "--init-from", "--layers", "--d-model", "--heads", "--kv-heads", "--tie-embeddings", "--seq-len", "--vocab", "--hidden",
                          "--features", "--classes", "--data", "--held-out"}},
      {"Training", {"--steps", "--batch-size", "--microbatches", "--seed", "--optimizer", "--lr", "--momentum",
                    "--weight-decay", "--clip-norm", "--lr-schedule", "--warmup-steps", "--decay-steps", "--min-lr",
                    "--blas-threads"}},
      {"Pipeline", {"--schedule", "--schedule-file", "--stages", "--chunks", "--seq-slices", "--layers-per-stage",
                    "--partition", "--devices", "--fill", "--overlap-steps"}},
      {"Processes (under mpirun)",
       {"--data-parallel", "--gradient-reduction", "--tensor-parallel", "--tensor-reduction", "--sequence-parallel",
        "--tensor-parallel-overlap"}},
      {"Activation memory", {"--activation-policy", "--activation-budget", "--offload-dir"}},
      {"Asynchronous and local-learning schedules",
       {"--vertical-sync", "--spectrain-version", "--pipemare-anneal", "--pipemare-decay", "--local-head",
        "--neuron-groups", "--group-diversity", "--group-diversity-temperature"}},
      {"Adapting to a slow rank", {"--adapt", "--adapt-threshold", "--adapt-patience", "--profile", "--slow-rank",
                                   "--slow-factor"}},
      {"Evaluation", {"--eval-every", "--eval-batches"}},
      {"Checkpoints and logs", {"--checkpoint", "--resume", "--checkpoint-every", "--checkpoint-dir",
                                "--keep-checkpoints", "--metrics-log"}},
      {"Output", {"--json", "--quiet", "--trace", "--svg", "--svg-width"}},
      {"Config, plan and information", {"--config", "--plan", "--print-config", "--capabilities", "--markdown",
                                        "--describe"}},
  };
  return groups;
}

void group_train_options(CLI::App* cmd) {
  for (const auto& [group, names] : train_option_groups()) {
    for (const std::string& name : names) cmd->get_option(name)->group(group);
  }
}

}  // namespace pf::cli

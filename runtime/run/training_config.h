// The one value that says how to train: every trainer option, grouped, with no logic. The command
// line (flags and config file), the C API's pf_trainer_options (and through it every binding) and
// `train --plan` all fill one of these; resolve() (resolve.h) checks it against the capability
// table (capabilities.h) and turns it into a plan, and make_trainer() (make_trainer.h) builds the
// trainer. docs/ARCHITECTURE.md draws the flow.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/run/fill_job.h"
#include "runtime/tensor/device.h"
#include "runtime/train/trainer.h"

namespace pf {
namespace comm {
class World;
}  // namespace comm

// How the model's top-level layers are split into stages when layers_per_stage is empty.
enum class PartitionKind {
  kParameters,  // balanced parameter counts (the default everywhere since 0.11; DeepSpeed's too)
  kEven,        // balanced layer counts (the first num_layers % stages stages get one more)
  kMeasured,    // balanced measured per-layer time (make_trainer times one micro-batch)
};

// The asynchronous methods' options; each applies to one method only (the capability table refuses
// it for any other schedule, naming both).
struct AsyncOptions {
  bool vertical_sync = false;             // pipedream only
  int spectrain_version = 1;              // spectrain only: 1 (the paper, default) or 2
  int64_t pipemare_anneal_updates = 100;  // pipemare only: K, updates over which lr anneals (0: none)
  float pipemare_decay = 0.9f;            // pipemare only: g of the discrepancy average, in [0, 1)
  bool is_default() const {
    const AsyncOptions d;
    return vertical_sync == d.vertical_sync && spectrain_version == d.spectrain_version &&
           pipemare_anneal_updates == d.pipemare_anneal_updates && pipemare_decay == d.pipemare_decay;
  }
};

// Fail-slow adaptation (docs/PLANNING.md, "Adapting to a slow rank"): a synchronous pipeline
// re-partitions itself when a rank stays `threshold` times slower than predicted (against the
// fastest) for `patience` steps in a row.
struct AdaptationConfig {
  bool enabled = false;
  double threshold = 1.5;
  int patience = 3;
};

struct TrainingConfig {
  // ---- Optimizer, learning-rate schedule, data split and initialisation: micro_batches (m, per
  // replica), replicas (D), seed, blas_threads (per worker thread).
  TrainerOptions base;

  // ---- Schedule. `schedule` empty and no schedule_text: the sequential trainer (no pipeline).
  std::string schedule;               // a registered generator name (pf::sched::generator_names())
  std::string schedule_text;          // non-empty: a schedule in text form, used instead of `schedule`
  int ranks = 1;                      // p (generator schedules)
  int chunks = 0;                     // v; 0 = the schedule's default (2 for looped and V schedules, else 1)
  // S, sequence slices per micro-batch (docs/SCHEDULES.md, "Sequence-sliced 1F1B"): a schedule that
  // slices sequences (seq1f1b) runs each micro-batch as S slices of its token sequence, the loss of
  // each scaled by 1 / (m S). Needs a token model whose seq_len S divides.
  int seq_slices = 1;

  // ---- Model split: top-level layers per stage; empty = split as `partition` says.
  std::vector<int> layers_per_stage;
  PartitionKind partition = PartitionKind::kParameters;

  // ---- Placement. devices empty (or all CPU): the CPU; one entry: every rank there; else one per
  // rank. world null: every rank a thread of this process; else this process is rank
  // world->rank() of the schedule's ranks (docs/EXECUTION.md, "Several processes").
  std::vector<Device> devices;
  std::shared_ptr<comm::World> world;
  // Non-empty: worker r is pinned to CPU cpu_affinity[r % size] (Linux pthread_setaffinity_np).
  std::vector<int> cpu_affinity;

  // ---- Activation memory (docs/MEMORY.md): "none", "recompute", "offload-host", "offload-file",
  // "selective" (needs activation_budget_bytes, per rank) or "balance".
  std::string activation_policy = "none";
  double activation_budget_bytes = 0;
  std::string offload_dir;            // file tier directory (created if missing); empty = $TMPDIR or /tmp

  // ---- Data parallel (base.replicas = D > 1; docs/EXECUTION.md, "Data parallel"): this process's
  // group across the replicas, and how gradients are reduced: "allreduce" (within float rounding of
  // the deterministic sum) or "deterministic" (bitwise equal to SequentialTrainer).
  std::shared_ptr<comm::World> data_parallel_world;
  std::string gradient_reduction = "allreduce";

  // ---- Tensor parallel (docs/EXECUTION.md, "Tensor parallelism"; runtime/tensor_parallel): T > 1
  // splits the model's column- and row-parallel linears across the T members of
  // tensor_parallel_world (this process's group: one process per member under mpirun, or a
  // ThreadWorld's member in a thread that runs its own trainer). Every member trains on the same
  // data. tensor_reduction: "allreduce" (the world's all-reduce; within float rounding of the
  // unsplit model) or "deterministic" (partial results added in rank order: bitwise equal to one
  // process adding the same partial products in that order).
  int tensor_parallel = 1;
  std::shared_ptr<comm::World> tensor_parallel_world;
  std::string tensor_reduction = "allreduce";
  // Sequence parallelism (docs/EXECUTION.md, "Sequence parallelism"; T > 1, token models with a
  // vocabulary-parallel embedding and head): between the split layers each member holds 1/T of the
  // sequence steps ([B, S/T, d]): the norms, residuals and pipeline messages carry 1/T.
  bool sequence_parallel = false;
  // B's collective of a column split's input gradient (an all-reduce; under sequence parallelism a
  // reduce-scatter) runs while W computes, in a fused backward (docs/EXECUTION.md, "B's all-reduce
  // overlapping W"). false: it blocks, as with B and W split (the same bits either way).
  bool tensor_parallel_overlap = true;

  // ---- Asynchronous and local-learning schedules (docs/SCHEDULES.md).
  AsyncOptions async;
  // The auxiliary heads of local learning: "auto", "linear", "layernorm-linear" or "mlp".
  std::string local_head = "auto";
  // Neuron groups (docs/SCHEDULES.md, "Neuron groups"; runtime/neuron_groups): G > 1 splits every
  // stage of a local-learning schedule but the last by width into G groups, each on its own rank
  // ((ranks - 1) G + 1 ranks in all), each with its own head; the diversity term's weight (0: off)
  // and softmax temperature.
  int neuron_groups = 1;
  float group_diversity = 0.0f;
  float group_diversity_temperature = 3.0f;

  // ---- Adaptation, and its test knob: rank slow_rank's compute runs slow_factor (>= 1) times as
  // long (-1: none).
  AdaptationConfig adaptation;
  int slow_rank = -1;
  double slow_factor = 1.0;

  // ---- The runtime's own knobs.
  double recv_timeout_seconds = 60.0;  // a RECV (or a SEND into a full mailbox) waiting longer fails
  int mailbox_capacity = 64;           // messages queued per (source, destination) rank pair
  double spin_seconds = 20e-6;         // a waiting rank polls this long before it sleeps
  bool record_timeline = true;         // timestamp every action into last_timeline()
  // Synchronous schedules, CPU threads: each rank's worker clips and steps its own stages'
  // parameters (docs/EXECUTION.md, "The optimizer on the ranks"); false: the main thread steps
  // them all (the baseline bench/pipeline:rank_optimizer measures).
  bool rank_optimizer = true;
  // Overlapping steps (docs/EXECUTION.md, "Overlapping steps"): a synchronous schedule on CPU ranks
  // starts the next step's work on a rank as soon as the rank's own part of this step and its
  // update are done, while later ranks finish their tails, when the caller said more steps follow
  // (Trainer::expect_steps; the training loop says so). Results stay bitwise those without it.
  // Refused where a step must end on every rank together (the capability table).
  bool overlap_steps = false;
  // Bubble filling (PipeFill, docs/PLANNING.md "Filling the bubbles"): synchronous schedules, ranks
  // as CPU threads. From the second step on each rank calls bubble_fill(rank, seconds) where the
  // last step's timeline had it waiting, with bubble_fill_safety times that wait. `fill` names a
  // job of the library's instead ("sweep:FILE": a packed MLP sweep, docs/SWEEP.md); make_trainer
  // builds it into fill_job and bubble_fill.
  std::function<double(int rank, double budget_seconds)> bubble_fill;
  double bubble_fill_safety = 0.65;
  std::string fill;
  std::shared_ptr<FillJob> fill_job;

  // True when a schedule is set (the sequential trainer otherwise).
  bool pipelined() const { return !schedule.empty() || !schedule_text.empty(); }
};

// The micro-batches per step a front-end uses when none are given, before any batch is seen (the
// C API and the bindings, when the trainer is made): 1 without a pipeline (pipeline_ranks 1), 2P
// for P pipeline ranks. One micro-batch would run the ranks one after another (pipelining without
// overlap); 2P keeps every rank busy in the steady state.
inline int default_micro_batches(int pipeline_ranks) { return pipeline_ranks <= 1 ? 1 : 2 * pipeline_ranks; }

// The same when the front-end knows the rows of the batch it splits (the command line): the
// largest divisor of batch_rows not above default_micro_batches(pipeline_ranks).
inline int default_micro_batches(int pipeline_ranks, int64_t batch_rows) {
  if (pipeline_ranks <= 1 || batch_rows <= 1) return 1;
  for (int64_t m = std::min<int64_t>(batch_rows, default_micro_batches(pipeline_ranks)); m > 1; --m)
    if (batch_rows % m == 0) return static_cast<int>(m);
  return 1;
}

}  // namespace pf

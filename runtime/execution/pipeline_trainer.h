// Pipelined training on the CPU: one worker thread per rank runs that rank's action list of a
// schedule (docs/SCHEDULES.md) over the model's stages, passing activations and gradients through a
// Transport. For every synchronous schedule whose stages accumulate weight gradients in micro-batch
// order (all built-ins), the parameters after each step are bitwise equal to SequentialTrainer's with
// the same seed, data and options. See docs/EXECUTION.md.
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime/execution/gradient_reducer.h"
#include "runtime/execution/partition.h"
#include "runtime/execution/rank_executor.h"
#include "runtime/execution/weight_versions.h"
#include "runtime/comm/in_process_transport.h"
#include "runtime/comm/thread_world.h"
#include "runtime/comm/world.h"
#include "runtime/memory/activation_store.h"
#include "runtime/models/model.h"
#include "runtime/optim/optimizer.h"
#include "runtime/schedules/activation_policy.h"
#include "runtime/schedules/comm_semantics.h"
#include "runtime/schedules/ir.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/timeline.h"
#include "runtime/train/batch.h"
#include "runtime/train/sequential_trainer.h"
#include "runtime/train/stage.h"
#include "runtime/train/trainer.h"

namespace pf {
class DeviceStream;
}  // namespace pf
namespace pf::comm {
class GpuTransportGroup;
}  // namespace pf::comm
namespace pf::exec {
using comm::GpuTransportGroup;
using comm::InProcessTransport;
using comm::MessageKey;
using comm::MessageKind;
using comm::Transport;

struct PipelineOptions {
  TrainerOptions base;                 // micro_batches = m, seed, blas_threads (per worker), optimizer
  std::string schedule = "1f1b";       // a registered generator name (pf::sched::generator_names())
  std::string schedule_text;           // non-empty: a schedule in text form, used instead of `schedule`
  int ranks = 1;                       // p (generator schedules)
  int chunks = 1;                      // v (interleaved-1f1b, interleaved-zb, bfs; the V schedules use 2)
  // S, sequence slices per micro-batch (docs/SCHEDULES.md, "Sequence-sliced 1F1B"): schedule
  // seq1f1b (or a schedule_text with seq_slices S) runs each micro-batch as S slices of its
  // token sequence, the loss of each scaled by 1 / (m S) so that the step's loss is the unsliced
  // mean. Needs a token model whose seq_len S divides, on the CPU in one process, one replica and
  // activation_policy none.
  int seq_slices = 1;
  std::vector<int> layers_per_stage;   // top-level layers per stage; empty = even split
  double recv_timeout_seconds = 60.0;  // a RECV (or a SEND into a full mailbox) waiting longer fails
  int mailbox_capacity = 64;           // messages queued per (source, destination) rank pair
  double spin_seconds = 20e-6;         // a waiting rank polls this long before it sleeps
  // Non-empty: worker r is pinned to CPU cpu_affinity[r % size] (Linux pthread_setaffinity_np).
  std::vector<int> cpu_affinity;
  bool record_timeline = true;         // timestamp every action into last_timeline()
  // Activation memory (docs/MEMORY.md): "none", "recompute", "offload-host", "offload-file" or
  // "selective" or "balance" (sched::activation_policy_names()), applied to the lowered schedule as a pass
  // (sched::apply_activation_policy). selective needs activation_budget_bytes > 0 (per rank, device-
  // resident activation bytes as in RankStats::peak_activation_bytes); it is planned from the
  // per-stage context bytes measured on micro-batch 0 before the first step runs (or at
  // plan_activation_memory), and a budget it cannot meet is refused with kInvalidArgument naming the
  // smallest budget that works. selective uses host memory, or files when offload_dir is set.
  // balance (BPipe) is planned from the same measurement: heavy ranks send contexts to a partner
  // rank (HOLD/RETURN actions) and their peaks even out.
  std::string activation_policy = "none";
  double activation_budget_bytes = 0;
  std::string offload_dir;             // file tier directory (created if missing); empty = $TMPDIR or /tmp
  // Where each rank runs (docs/EXECUTION.md, "Running on GPUs"). Empty (or all Device::cpu()): the
  // CPU, as before. One entry: every rank on that device. Otherwise one entry per rank of the
  // schedule, all Device::cuda(ordinal) of
  // visible devices (ranks may share a device). Each worker then runs under a DeviceScope with its
  // own compute stream as the current stream; the stages' parameters are moved to their rank's
  // device, micro-batch inputs/targets are copied to the ranks that consume them, ranks on one
  // device hand tensors over in process (stream-ordered by events), ranks on distinct devices use
  // NCCL. Checked at construction: kInvalidArgument naming the rank (wrong count, mixed CPU/CUDA,
  // unknown ordinal, no CUDA device at all).
  std::vector<Device> devices;
  // One process per rank (docs/EXECUTION.md, "Several processes"): null runs every rank as a
  // thread of this process. Otherwise this process is rank world->rank() of the schedule's
  // world->size() ranks: it allocates, initialises and steps only its stages' parameters (those of
  // other stages are released), exchanges activations and gradients through world->endpoint(), and
  // reduces the loss, the gradient norm and the rank statistics over the world so that every
  // process returns the same StepResult, bitwise equal to the threaded run's. Every process must
  // construct its trainer with the same options and step it on the same data.
  std::shared_ptr<comm::World> world;
  // Data parallel (base.replicas = D > 1; docs/EXECUTION.md, "Data parallel"): D copies of the
  // pipeline, each a `world` of its own, train on disjoint micro-batches (replica d takes
  // micro-batches [d*m, (d+1)*m) of the step's D*m). data_parallel_world is this process's group
  // across the replicas (size D, rank = this replica): the processes that run the same pipeline
  // rank. An ALLREDUCE after each stage's last W (added to the schedule) reduces that stage's
  // gradients over it while the rank goes on. gradient_reduction: "allreduce" (MPI_Allreduce,
  // within float rounding of the deterministic sum) or "deterministic" (gathered and added in
  // replica order: bitwise equal to SequentialTrainer with the same base options).
  std::shared_ptr<comm::World> data_parallel_world;
  std::string gradient_reduction = "allreduce";
  // Asynchronous schedules (schedule pipedream, pipedream-2bw, spectrain or pipemare;
  // docs/SCHEDULES.md, "Asynchronous schedules"): no flush. A step is a window of m micro-batches
  // of the steady state: the micro-batches still in flight at its end go on in the next step, and
  // drain() finishes them (at the end of training). Every stage updates itself (UPDATE actions,
  // its own optimizer) with the weights runtime/execution/weight_versions.h describes; the step's
  // loss is the mean over its micro-batches. Needs micro_batches >= ranks - 1, activation_policy
  // none, one replica, the CPU and no clip_norm. The method's options: an option another schedule
  // does not have is refused naming both.
  AsyncOptions async;
  // Local learning (schedule ppll or local-updates; docs/SCHEDULES.md, "Local learning"): every
  // stage but the last trains on an auxiliary head on its output and the model's loss, and updates
  // itself (ppll: after every micro-batch; local-updates: once per step). A step is a window as for
  // the asynchronous schedules (drain() at the end); rank s works on the micro-batches rank s-1
  // forwarded, one step behind at most. local_head: "auto" (token models: LayerNorm + linear to the
  // classes; feature models: linear), "linear", "layernorm-linear" or "mlp" (linear, GELU, linear).
  std::string local_head = "auto";
  // A fail-slow device, for tests and benchmarks of adaptation (docs/PLANNING.md): rank
  // slow_rank's compute actions take slow_factor (>= 1) times as long (it waits out the extra).
  // -1: none.
  int slow_rank = -1;
  double slow_factor = 1.0;
  // Bubble filling (PipeFill, docs/PLANNING.md "Filling the bubbles"): synchronous schedules,
  // ranks as threads of this process. From the second step on, each rank calls
  // bubble_fill(rank, seconds) where the last step's measured timeline had it waiting (before an
  // action, or during a SEND/RECV) and after its last action until the last makespan, with
  // bubble_fill_safety times that wait; the function runs other work for at most `seconds` and
  // returns the seconds it took (RankStats::fill_us). The pipeline's results do not change.
  std::function<double(int rank, double budget_seconds)> bubble_fill;
  double bubble_fill_safety = 0.65;
  // Synchronous schedules with every rank a CPU thread of this process (no world, no devices):
  // true lets each rank's worker clip and step its own stages' parameters (docs/EXECUTION.md,
  // "The optimizer on the ranks"), bitwise what the main thread would do; false steps them all on
  // the main thread after the workers finished (the baseline bench/pipeline:rank_optimizer
  // measures). Ignored elsewhere: processes step their own parameters anyway, CUDA ranks and
  // asynchronous schedules keep their own paths.
  bool rank_optimizer = true;
  void validate() const;               // kInvalidArgument naming the field
};

struct PipelineStats {
  double makespan_us = 0;     // latest action end
  double step_us = 0;         // the whole step (data split, workers, clipping, optimizer)
  // Clipping + optimizer step as the main thread waits for them: with optimizer_on_workers, the
  // workers' parallel scale-and-step phase (their squared norms overlap the pipeline's tail and
  // count in RankStats::optimizer_us only).
  double optimizer_us = 0;
  bool optimizer_on_workers = false;  // PipelineTrainer::optimizer_on_workers() for this step
  double bubble_rate = 0;     // (makespan - max busy) / makespan
  size_t offloaded_bytes = 0; // sum over ranks of RankStats::offloaded_bytes
  std::vector<RankStats> ranks;
};

class PipelineTrainer : public Trainer {
 public:
  // Builds the schedule (generator or text), lowers and validates it, partitions the model into the
  // schedule's stages and initialises the parameters from options.base.seed as SequentialTrainer does.
  PipelineTrainer(std::shared_ptr<Model> model, const PipelineOptions& options);
  ~PipelineTrainer() override;
  PipelineTrainer(const PipelineTrainer&) = delete;
  PipelineTrainer& operator=(const PipelineTrainer&) = delete;

  // One step on a whole batch split into options.base.micro_batches equal micro-batches.
  StepResult step(const Batch& batch) override;
  // One step on micro-batches pulled from `source` (rewound to where the step began on failure).
  StepResult step(DataSource& source) override;
  // Forward-only through the same ranks and transport (sched::forward_only_schedule of the
  // schedule's placement); synchronous schedules only (kFailedPrecondition otherwise). With a
  // world every process must call it with the same data; each gets the same result.
  EvalResult evaluate(DataSource& source, int micro_batches) override;

  Model& model() const override { return *model_; }
  std::shared_ptr<Model> shared_model() const { return model_; }
  Optimizer& optimizer() const override { return *optimizer_; }
  // True when each rank's worker clips and steps its own stages' parameters (options().
  // rank_optimizer with CPU threads and a synchronous schedule whose ranks share no parameter);
  // false when the main thread steps them all after the workers finished.
  bool optimizer_on_workers() const { return rank_optimizer_; }
  const PipelineOptions& options() const { return options_; }
  const TrainerMetrics& metrics() const override { return metrics_; }
  void restore_progress(int64_t step, int64_t data_position) override;
  // Asynchronous schedules (options().async). True for pipedream, pipedream-2bw, spectrain and
  // pipemare.
  bool asynchronous() const { return windowed_ && !local_; }
  // Local learning (schedule ppll or local-updates): every stage but the last trains on its own
  // auxiliary head (options().local_head); no gradient crosses ranks.
  bool local_learning() const { return local_; }
  // The auxiliary head of a stage of this process (local learning; nullptr otherwise and for the
  // last stage): a one-stage model of the head's layers with the model's loss.
  const Model* local_head(int stage) const;
  // Runs the backwards and updates still in flight (every rank), so that every stage has applied
  // every micro-batch it was given; the next step refills the pipeline. A no-op for synchronous
  // schedules and an empty pipeline. last_timeline() and last_stats() then describe the drain.
  void drain();
  bool pipeline_empty() const;
  // Checkpoints of an asynchronous schedule: "" when one can be saved or loaded now, else why not
  // (micro-batches in flight: drain() first; pipemare: its correction buffer is not saved yet).
  std::string async_checkpoint_refusal() const;
  // "" when a checkpoint can be loaded into this trainer, else why not (two pipelines with one
  // process per rank: the second copy's stages would need the first's values from other processes).
  std::string checkpoint_load_refusal() const;
  // The weight versions of a stage of this process (asynchronous schedules; nullptr otherwise).
  const StageWeights* stage_weights(int stage) const;

  // Changes options().recv_timeout_seconds for later steps (> 0).
  void set_recv_timeout_seconds(double seconds);

  // The executed (lowered) schedule and the partition.
  const sched::Schedule& schedule() const { return schedule_; }
  const std::vector<StageRange>& stages() const { return stages_; }
  // Measured start/end of every action of the last step (time_unit "us", 0 = step start).
  const sched::Timeline& last_timeline() const { return timeline_; }
  const PipelineStats& last_stats() const { return stats_; }

  // Activation memory. The policy in effect (options().activation_policy).
  sched::ActivationPolicy activation_policy() const { return policy_; }
  // Measures each stage's context bytes on `micro_batch` (one forward and input-gradient backward of
  // it through every stage; parameters, gradients and optimizer untouched) into activation_costs()
  // (m_b, m_w, m_in per stage; t_f = t_b = t_w = 1) and, for selective, applies the policy to the
  // schedule. Throws kInvalidArgument for a budget that cannot be met. Runs by itself before the
  // first step when the policy is not "none"; call it earlier to refuse a budget before training.
  void plan_activation_memory(const Batch& micro_batch);
  bool activation_memory_planned() const { return planned_; }
  const sched::CostModel& activation_costs() const { return mem_costs_; }
  // Predicted per-rank peak of device-resident activation bytes (sched::activation_peak_bytes of
  // schedule() under activation_costs()); empty until planned.
  const std::vector<double>& predicted_peak_activation_bytes() const { return predicted_peak_; }

  // Processes. True for a rank this process runs (every rank without options().world).
  bool is_local_rank(int rank) const { return !options_.world || rank == options_.world->rank(); }
  // The rank whose process holds `parameter` (a parameter of the model; 0 for one no stage uses).
  int owner_rank(const Parameter* parameter) const;
  // The parameters this process allocates, initialises and steps, in model order.
  std::vector<Parameter*> local_parameters() const override { return local_params_; }
  // With options().world: the pipeline and data-parallel groups (checkpoints are written by every
  // process); without, one process.
  ProcessGroups process_groups() const override;
  // async_checkpoint_refusal(), and checkpoint_load_refusal() when loading, with their codes.
  CheckpointRefusal checkpoint_refusal(bool loading) const override;
  // Two pipelines (Schedule::pipelines = 2, bitpipe): the second copy of the model, which the
  // second pipeline's stages run (nullptr with one pipeline). model() is the first copy; both hold
  // the same values after every step (every stage adds its sibling's gradients before the
  // optimizer), and checkpoints and parameter_checksum() read the first.
  const Model* model_copy() const { return copy_.get(); }
  // SHA-256 of every parameter's bytes in model order (parameter_checksum of the whole model); with
  // a world, a collective call: every process must make it, each parameter comes from its owner.
  std::string parameter_checksum() const;

  // GPUs. True when the ranks run on CUDA devices (options().devices).
  bool on_gpu() const { return gpu_; }
  // The device rank `rank` runs on (Device::cpu() without devices).
  Device rank_device(int rank) const;
  // The GPU transport (nullptr on the CPU): which pairs use NCCL, pending messages (for tests).
  const GpuTransportGroup* gpu_transport() const { return gpu_transport_.get(); }

 private:
  struct StepState;
  // `micro_batches`: the step's D * m (every replica's); this process runs its replica's m.
  StepResult run_step(const std::vector<Batch>& micro_batches);
  // GPUs: the micro-batches' inputs on stage 0's device, targets on the last stage's.
  std::vector<Batch> device_micro_batches(const std::vector<Batch>& micro_batches) const;
  // Starts every local rank's worker on state_ and waits for them all.
  void run_workers();
  // run_workers, then (GPUs) the host waits for every rank's stream; a failure becomes state_->error.
  void run_workers_and_wait_for_devices();
  void make_step_windows();  // windows_, after refusing what such a schedule cannot do
  std::string schedule_family() const;  // "asynchronous schedule 'pipedream'", "local-learning schedule 'ppll'"
  void check_not_failed() const;        // kFailedPrecondition after a failed windowed step
  int64_t steps_since_fill() const;     // of this process's executors
  void make_async_weights();
  void make_local_heads();
  // Asynchronous schedules, pipeline empty: optimizer() shows the stages' optimizer state (shared
  // tensors) and update count, which checkpoints save; after a checkpoint was loaded into
  // optimizer(), the stages take it back before the next step.
  void mirror_stage_optimizers();
  void take_loaded_optimizer_state();
  // The step's `units` losses from the ranks of the pipelines' last stages (state_->outputs).
  std::vector<float> last_stage_losses(int units) const;
  // Process mode: the last stage's losses to every process (and every replica's, data parallel).
  void broadcast_losses(std::vector<float>* losses);
  // Per-rank stats and the timeline of the step that just ran, from state_->outputs.
  void collect_stats(const std::vector<mem::StoreStats>& store_stats);
  int replica() const { return options_.data_parallel_world ? options_.data_parallel_world->rank() : 0; }
  void worker_main(int rank);
  void run_rank(int rank);
  // optimizer_on_workers(): rank_params_, rank_copy_params_ and rank_norm_index_ (owner_rank's).
  void make_rank_parameter_lists();
  // Worker, after its action list (clipping on): its first-copy parameters' squared gradient norms
  // into state_->squared_norms.
  void rank_squared_norms(int rank);
  // Worker, second phase: scales its parameters' gradients by state_->clip_scale and applies the
  // optimizers' update to them (both copies with two pipelines).
  void step_rank_parameters(int rank);
  // Main thread: begin_step on the optimizers, then the workers' second phase; rethrows a failure.
  void step_on_workers(float scale);
  void make_stores();
  void place_on_processes();     // local_params_ and owner_; allocates / releases with a world
  void make_model_stages();      // stages_ and model_stages_ (two pipelines: copy_ too)
  void plan_bubble_fill();       // bubble_fill: the next step's budgets from this step's timeline
  void check_two_pipelines() const;  // what a schedule with two copies of the model cannot do yet
  void sync_model_copy();        // copy_ and its optimizer state <- the first copy's (threads)
  // Losses, gradient norm (clipping) and rank stats reduced over the world (process mode).
  double reduce_and_clip(std::vector<float>* losses);
  // GPUs (no-ops on the CPU).
  void check_devices();          // options_.devices against the schedule; sets gpu_, rank_device_
  void place_parameters();       // stage parameters -> their rank's device
  void sync_devices(const std::string& what);  // host wait for the main thread's device work
  void sync_rank_streams();      // host wait for every rank's compute stream
  Transport& endpoint(int rank);
  void cancel_transport(int rank, const std::string& what);  // rank `rank` failed: `what`
  bool transport_cancelled() const;
  std::string cancel_cause() const;  // "" while not cancelled
  void reset_transport();

  std::shared_ptr<Model> model_;
  PipelineOptions options_;
  std::unique_ptr<Optimizer> optimizer_;
  TrainerMetrics metrics_;
  sched::Schedule schedule_;
  std::vector<StageRange> stages_;
  std::vector<Stage> model_stages_;                        // one per stage of the schedule
  std::vector<std::unique_ptr<RankExecutor>> executors_;  // per rank; null for ranks of other processes
  std::vector<Parameter*> local_params_;
  // Two pipelines: the second copy of the model, its parameters on this process and their optimizer.
  std::unique_ptr<Model> copy_;
  std::vector<Parameter*> copy_params_;
  std::unique_ptr<Optimizer> copy_optimizer_;
  bool copy_stale_ = false;  // a checkpoint was loaded into the first copy since the last step
  std::unique_ptr<GradientReducer> reducer_;             // data parallel
  // optimizer_on_workers(): [rank] its parameters in model order, the second copy's, and the
  // index in model_->parameters() of each of the first.
  bool rank_optimizer_ = false;
  bool parameters_shared_across_ranks_ = false;  // a parameter used by stages on two ranks
  std::vector<std::vector<Parameter*>> rank_params_, rank_copy_params_;
  std::vector<std::vector<size_t>> rank_norm_index_;
  std::unordered_map<const Parameter*, int> owner_;       // parameter -> rank of its stage
  std::unique_ptr<comm::ThreadWorld> thread_world_;  // CPU ranks as threads of this process
  // CUDA ranks.
  bool gpu_ = false;
  std::vector<int> rank_device_;                   // CUDA ordinal per rank
  std::vector<int> used_devices_;                  // distinct ordinals
  std::vector<std::unique_ptr<DeviceStream>> streams_;  // per rank: its compute stream
  std::unique_ptr<GpuTransportGroup> gpu_transport_;
  sched::Timeline timeline_;
  PipelineStats stats_;

  // Persistent workers and the step barrier.
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable start_cv_, done_cv_;
  uint64_t generation_ = 0;
  int running_ = 0;
  bool shutdown_ = false;
  std::unique_ptr<StepState> state_;

  // Activation memory.
  sched::ActivationPolicy policy_ = sched::ActivationPolicy::kNone;
  sched::Schedule base_schedule_;      // lowered, before the policy
  bool planned_ = false;
  sched::CostModel mem_costs_;
  std::vector<double> predicted_peak_;
  std::vector<std::vector<int>> holder_;       // [stage][mb]: rank with its HOLD (balance), else -1
  std::vector<std::unique_ptr<mem::ActivationStore>> stores_;  // per rank; empty without OFFLOADs

  // Asynchronous schedules.
  // kPosted for a lowered schedule that only posted (irecv-style) receives run, e.g. PyTorch's
  // deferred receives: the executors then post their RECVs (communication_semantics).
  sched::CommSemantics comm_ = sched::CommSemantics::kRendezvous;
  bool windowed_ = false;       // asynchronous or local learning: steps are windows, stages update themselves
  bool local_ = false;          // local learning: auxiliary heads
  float loss_scale_ = 1.0f;     // of each micro-batch's loss
  std::vector<std::unique_ptr<Model>> local_heads_;  // [stage]: the auxiliary heads of this process's stages
  std::vector<Stage> head_stages_;                   // one per head
  bool async_failed_ = false;  // a step failed with micro-batches in flight
  bool async_state_loaded_ = false;  // restore_progress ran: optimizer() holds a checkpoint's state
  sched::StepWindows windows_;
  std::vector<std::unique_ptr<StageWeights>> stage_weights_;  // [stage]; null for other processes' stages
};

}  // namespace pf::exec

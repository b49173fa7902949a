// One rank's part of a pipeline step: runs that rank's action list of a schedule over its local
// stages, with its own slots (what each (stage, micro-batch) holds between actions), its transport
// endpoint and, when the schedule offloads, its activation store. One handler per action kind.
// The same executor runs ranks as threads of one process (PipelineTrainer without a World) and as
// one process per rank (PipelineTrainer with an MPI World). See docs/EXECUTION.md.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/comm/transport.h"
#include "runtime/execution/rank_instruments.h"
#include "runtime/execution/sibling_gradients.h"
#include "runtime/execution/weight_versions.h"
#include "runtime/layers/saved_context.h"
#include "runtime/memory/activation_store.h"
#include "runtime/schedules/async_schedules.h"
#include "runtime/schedules/ir.h"
#include "runtime/schedules/timeline.h"
#include "runtime/tensor_parallel/group.h"
#include "runtime/train/batch.h"
#include "runtime/train/stage.h"

namespace pf::exec {

// Measured per rank over the last step (times in microseconds from the step start).
struct RankStats {
  double busy_us = 0;        // sum of compute action (F/B/W/BW/RECOMPUTE, and UPDATE) durations
  double comm_us = 0;        // sum of SEND/RECV durations (time spent handing over or waiting)
  double idle_us = 0;        // makespan - busy
  double bubble_rate = 0;    // idle / makespan
  double finish_us = 0;      // end of the rank's last action
  int actions = 0;           // actions executed
  // Sequence-sliced schedules count units (one slice of a micro-batch) here; their bytes include
  // the key/value gradients a slice's context holds for the earlier slices' backwards.
  int peak_live_micro_batches = 0;    // max (mb, stage) contexts with F done and B/BW not yet
  size_t peak_activation_bytes = 0;   // max sum of SavedContext bytes of live contexts
  // Activation memory policies: live/peak above count device-resident contexts only (OFFLOAD -1,
  // RELOAD +1, a recomputed context holds its stage input until RECOMPUTE).
  size_t offloaded_bytes = 0;         // bytes copied off the device by OFFLOADs (same amount reloaded)
  size_t host_peak_bytes = 0;         // peak bytes held in host copies (host tier)
  size_t file_peak_bytes = 0;         // peak bytes held in files (file tier)
  int recomputes = 0;                 // RECOMPUTE actions run
  // Asynchronous schedules: the most weight versions alive at once on this rank (summed over its
  // stages, counting the current weights) and their bytes; 0 for synchronous schedules.
  int peak_weight_versions = 0;
  size_t peak_weight_version_bytes = 0;
  // PipelineTrainer::optimizer_on_workers(): this rank's worker computing its squared gradient
  // norms (clipping on), scaling its gradients and stepping its parameters; 0 when the main
  // thread steps.
  double optimizer_us = 0;
  double fill_us = 0;  // bubble filling: time spent on the fill job in this step's bubbles
  // Bytes of the activations and input gradients this rank sent to other stages (SEND_F, SEND_B;
  // at T > 1 its slice messages).
  int64_t sent_bytes = 0;
};

// The activation store's key of (stage, micro-batch).
uint64_t context_key(int stage, int micro_batch);

class RankExecutor {
 public:
  struct Options {
    double timeout_seconds = 60.0;  // every SEND/RECV/HOLD/RETURN
    // The scale of each micro-batch's loss; 0 means 1 / the schedule's micro-batches (data
    // parallel: 1 / (replicas * micro-batches)).
    float loss_scale = 0.0f;
    // ALLREDUCE(stage): starts the data-parallel reduction of the stage's gradients (asynchronous;
    // the trainer waits for it after the step). Unset: ALLREDUCE is a no-op (one replica).
    std::function<void(int stage)> on_allreduce;
    // RECV_F / RECV_B are posted (irecv, retired by the consumer) instead of receiving at once;
    // the trainer sets it for schedules that are deadlock-free only under posted semantics.
    bool posted_receives = false;
    // Tensor parallelism (T > 1): this process's stage group. SEND_F / SEND_B send this member's
    // 1/T of the message and the receiver all-gathers the group's slices (stage_message_slices.h).
    // Null under sequence parallelism: each member's stage output is its own steps, sent as it is.
    std::shared_ptr<TensorParallelGroup> tensor_parallel;
  };
  // What one step of this rank produced.
  struct StepOutput {
    std::vector<float> losses;  // [micro-batch]: scaled loss where this rank ran the last stage's F, else 0
    std::vector<int64_t> correct;  // evaluation, [micro-batch]: targets the last stage's F got right
    std::vector<sched::TimedAction> timed;
    RankStats stats;
  };

  // `stages`: [stage] the stages this rank runs (null for the others'); they must outlive the
  // executor. `instruments`: what watches its actions (timeline, peaks, fill, a slowed device).
  RankExecutor(int rank, std::vector<const Stage*> stages, Options options, RankInstruments::Options instruments);

  int rank() const { return rank_; }
  // The schedule to run from now on (the executor keeps a reference: it must stay alive and
  // unchanged while a step runs).
  void set_schedule(const sched::Schedule* schedule);
  void set_timeout_seconds(double seconds) { options_.timeout_seconds = seconds; }
  // What watches its actions; bubble filling's budgets for the next step are set there.
  RankInstruments& instruments() { return instruments_; }
  // Asynchronous schedules: run_step runs the windows' lists (the first after an empty pipeline,
  // then the steady ones) instead of the schedule's, and keeps the micro-batches in flight between
  // steps; `weights[stage]` (this rank's stages; others null) picks the weights of every F and BW
  // and applies UPDATE. Both must outlive the executor.
  void set_async(const sched::StepWindows* windows, std::vector<StageWeights*> weights);
  // Local learning: `heads[stage]` (this rank's stages but the last; others null) is the stage's
  // auxiliary head (a one-stage model with its loss), run by HEAD. They must outlive the executor.
  void set_local_heads(std::vector<const Stage*> heads) { heads_ = std::move(heads); }
  bool asynchronous() const { return async_ != nullptr; }
  // Asynchronous schedules, between steps: the steps run since the pipeline was last empty (none
  // in flight when 0).
  int64_t steps_since_fill() const { return window_; }

  // Runs this rank's actions for one step on `micro_batches` (inputs read where stage 0 runs,
  // targets where the last stage runs), one per unit of the schedule: with seq_slices S > 1, slice
  // j of micro-batch mb is entry mb * S + j. `store` may be null when the rank has no OFFLOAD.
  // `cancelled` is polled before every action: when it returns a cause (another rank failed) the
  // rank stops with kCancelled naming it. An action's error is rethrown with its code and message and where the
  // rank was: "... [rank 2 at action 17 of 40 (2RECV_F5)]".
  void run_step(const std::vector<Batch>& micro_batches, std::chrono::steady_clock::time_point t0,
                comm::Transport& transport, mem::ActivationStore* store,
                const std::function<std::string()>& cancelled,
                StepOutput* out);
  // Evaluation (synchronous schedules only): runs this rank's list of `forward_only`
  // (sched::forward_only_schedule of the schedule's placement) on `micro_batches`: forwards only,
  // nothing kept for a backward; the last stage's F records its unscaled loss and correct count.
  void run_evaluation(const sched::Schedule& forward_only, const std::vector<Batch>& micro_batches,
                      std::chrono::steady_clock::time_point t0, comm::Transport& transport,
                      const std::function<std::string()>& cancelled, StepOutput* out);
  // Asynchronous schedules: runs the drain of the last window (the backwards and updates still in
  // flight); afterwards the pipeline is empty and the next run_step fills it again. A no-op when
  // it is empty.
  void run_drain(std::chrono::steady_clock::time_point t0, comm::Transport& transport,
                 const std::function<std::string()>& cancelled, StepOutput* out);

 private:
  // What one (stage, micro-batch) holds during a step.
  struct Slot {
    std::vector<SavedContext> ctx;  // one per layer of the stage
    SavedContext loss_ctx;
    Tensor input;        // stage input (received, or handed over by the previous stage on this rank)
    Tensor output;       // stage output waiting for SEND_F
    Tensor grad_output;  // gradient of the stage output (received, handed over, or from the loss)
    Tensor grad_input;   // gradient of the stage input waiting for SEND_B
    Tensor kept_input;   // recomputed contexts: the stage input kept from F until RECOMPUTE
    Tensor held;         // balance: the packed activations this rank holds for the owner (HOLD..RETURN)
    Tensor head_input;   // local learning: the stage output, for its HEAD
    size_t bytes = 0;    // activation bytes the contexts hold (while offloaded: what comes back)
    // Options::posted_receives: a RECV_F / RECV_B marks the slot and its consumer (F, or B/BW)
    // takes the message when it needs it, as MPI's irecv + wait and PyTorch's runtime do, so a
    // RECV placed ahead of other work (PyTorch's deferred receives) holds nothing up.
    bool input_posted = false;
    bool grad_output_posted = false;
  };
  using Handler = void (RankExecutor::*)(const sched::Action&);

  // The step's slots: kept across the steps of a windowed schedule, sized for this rank's stages.
  void prepare_slots(const std::vector<sched::Action>& actions, int micro_batches);
  // Action i of `actions`: the cancellation check, its handler, the instruments around it.
  void run_action(const std::vector<sched::Action>& actions, size_t i, const std::function<std::string()>& cancelled);
  void run_actions(const std::vector<sched::Action>& actions, const std::vector<Batch>& micro_batches,
                   std::chrono::steady_clock::time_point t0, comm::Transport& transport, mem::ActivationStore* store,
                   const std::function<std::string()>& cancelled, StepOutput* out);
  // Windows: whether a slot is this step's micro-batch (else the previous step's), and its
  // micro-batch number since the pipeline was filled.
  bool in_this_step(int slot) const;
  int64_t fill_index(int slot) const;
  // Runs `body`, around it the stage's weight hooks (before/after) for the micro-batch of `slot`
  // when the stage has StageWeights.
  template <typename Body>
  void with_weights(int stage, void (StageWeights::*before)(int64_t), void (StageWeights::*after)(int64_t), int slot,
                    Body body);
  // The micro-batch of a slot: this step's, or (windows) the previous step's.
  const Batch& batch_of(int slot) const;
  StageWeights* weights(int stage) const;

  Slot& slot(const sched::Action& a);
  // The message a RECV_F / RECV_B of (a.stage, a.micro_batch) receives, waiting for it.
  Tensor receive_input(const sched::Action& a);
  Tensor receive_grad_output(const sched::Action& a);
  // A message to another stage as it travels (this member's slice at T > 1; its bytes counted),
  // and a received one made whole again (the group's slices gathered).
  Tensor outgoing(Tensor message);
  Tensor incoming(Tensor message, const sched::Action& a);
  // The stage input / output gradient of (a.stage, a.micro_batch), taking a posted RECV's message.
  Tensor take_input(const sched::Action& a, Slot& sl);
  Tensor take_grad_output(const sched::Action& a, Slot& sl);
  int rank_of(int stage) const { return schedule_->placement.rank_of(stage); }
  void on_forward(const sched::Action& a);
  void on_evaluation_forward(const sched::Action& a);
  void on_backward(const sched::Action& a);  // B and BW
  void on_backward_weight(const sched::Action& a);
  void on_send_f(const sched::Action& a);
  void on_recv_f(const sched::Action& a);
  void on_send_b(const sched::Action& a);
  void on_recv_b(const sched::Action& a);
  void on_recompute(const sched::Action& a);
  void on_offload(const sched::Action& a);
  void on_reload(const sched::Action& a);
  void on_hold(const sched::Action& a);
  void on_return(const sched::Action& a);
  void on_step(const sched::Action& a);
  void on_allreduce(const sched::Action& a);
  void on_update(const sched::Action& a);
  void on_head(const sched::Action& a);
  static const Handler* handlers();

  // The stage `index` of this rank (internal error for another rank's).
  const Stage& stage(int index) const;

  int rank_;
  std::vector<const Stage*> stages_;  // [stage]: this rank's, null for the others'
  Options options_;
  RankInstruments instruments_;
  const sched::Schedule* schedule_ = nullptr;
  std::vector<std::vector<char>> recomputed_;  // [stage][mb]: this rank has a RECOMPUTE of it
  // The step in progress.
  std::vector<std::vector<Slot>> slots_;  // [stage][micro-batch], sized for this rank's stages only
  const std::vector<Batch>* micro_ = nullptr;
  comm::Transport* transport_ = nullptr;
  SiblingGradients siblings_;  // two pipelines: the gradients ALLREDUCE sends and STEP adds
  mem::ActivationStore* store_ = nullptr;
  StepOutput* out_ = nullptr;
  bool fills_ = false;  // run_step's synchronous list is running (bubble filling applies to it only)
  float loss_scale_ = 1.0f;
  bool evaluating_ = false;  // run_evaluation in progress
  size_t live_bytes_ = 0;
  int live_ = 0;
  // Asynchronous schedules.
  const sched::StepWindows* async_ = nullptr;
  std::vector<StageWeights*> weights_;  // [stage]
  std::vector<Batch> previous_micro_;    // the last step's micro-batches (their slots may still run)
  std::vector<const Stage*> heads_;     // [stage]: local learning's auxiliary heads
  int64_t window_ = 0;                  // windows run since the pipeline was last empty
};

}  // namespace pf::exec

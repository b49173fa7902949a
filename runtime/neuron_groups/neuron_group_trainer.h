// Trains a GroupNetwork (group_network.h) with one rank per group: ranks as threads of this process
// (comm::ThreadWorld), or one process per rank (a comm::World of (K - 1) G + 1 processes, e.g.
// MpiWorld; every process holds the whole MLP, trains its own rank's part, and gets the others'
// parameters at drain() and evaluate(), which are then collective). Per micro-batch, group g of stage k: receives the stage input from every
// group of stage k - 1 (stage 0 reads the batch), runs its layers, hands its output to the other
// groups of its stage and to the next stage, assembles the stage output, runs its head and loss
// (and the diversity term, after trading logits with its siblings), backpropagates into its own
// units only, and updates its layers and head: after every micro-batch (`ppll`) or after every
// m-th (`local-updates`), exactly as local_schedules.h describes for depth stages. The last stage
// trains on the model's loss. A micro-batch's loss is scaled by 1 / (micro-batches per update).
//
// As in ppll the pipeline never drains between steps: in step t the ranks of stage k train the
// micro-batches t m - k ... (t + 1) m - k - 1 (needs m >= K - 1), and the step's loss is the mean
// of the last stage's losses of the micro-batches it trained in the step. drain() trains what is
// left. Every rank's results depend only on the micro-batch order, not on timing: the run is
// bitwise equal to training the micro-batches one after another, stage after stage, group after
// group (tests/neuron_groups holds that reference).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/comm/thread_world.h"
#include "runtime/neuron_groups/group_network.h"
#include "runtime/optim/optimizer.h"
#include "runtime/train/trainer.h"

namespace pf::groups {

// Bytes that crossed ranks in the last step (not counting a drain), by what they were.
struct GroupTraffic {
  int64_t stage_outputs = 0;  // to the next stage
  int64_t group_outputs = 0;  // to the other groups of the same stage
  int64_t logits = 0;         // the diversity term's head logits
  int64_t messages = 0;
};

class NeuronGroupTrainer : public Trainer {
 public:
  // `update_every`: 1 (ppll) or options.micro_batches (local-updates). The learning rate must be
  // constant and clipping off (each rank updates on its own); one replica.
  // `processes`: this process's rank in one process per rank; null: every rank a thread here.
  NeuronGroupTrainer(std::shared_ptr<Model> model, const TrainerOptions& options, const NeuronGroupOptions& groups,
                     int update_every, std::shared_ptr<comm::World> processes = nullptr);
  ~NeuronGroupTrainer() override;

  StepResult step(const Batch& batch) override;
  StepResult step(DataSource& source) override;
  // Forward-only with the current weights of every group (written back into model()).
  EvalResult evaluate(DataSource& source, int micro_batches) override;
  // The whole MLP holding every group's current weights (those between groups are zero).
  Model& model() const override;
  // The last stage's optimizer (each rank has its own).
  Optimizer& optimizer() const override { return *optimizers_.back(); }
  const TrainerMetrics& metrics() const override { return metrics_; }
  void restore_progress(int64_t step, int64_t data_position) override;
  CheckpointRefusal checkpoint_refusal(bool loading) const override;

  // Trains the micro-batches the later stages have not reached yet (a no-op when none); in
  // processes, then gathers every rank's parameters into every process (collective).
  void drain() override;
  const GroupNetwork& network() const { return *network_; }
  Optimizer& rank_optimizer(int rank) const { return *optimizers_[static_cast<size_t>(rank)]; }
  // Of every rank (in processes: summed over them).
  const GroupTraffic& last_traffic() const { return traffic_; }
  // The processes the ranks run in, or null for threads.
  const comm::World* processes() const { return processes_.get(); }

 private:
  struct RankRun;
  // Every rank trains its share of the global micro-batches [begin - lag, end - lag), lag = its
  // stage; returns the last stage's (scaled) losses.
  std::vector<float> run(int64_t begin, int64_t end);
  // Rank `rank`'s share of run(); a failure is kept in `out` and told to the others (world.abort).
  void run_rank(int rank, int64_t begin, int64_t end, comm::World& world, RankRun& out);
  void add_traffic(const GroupTraffic& t);
  // Processes: every rank's parameters broadcast from the process that holds them (collective).
  void gather_parameters();
  // One step on `micro` (the trainer's state restored when a rank fails).
  StepResult run_step(const std::vector<Batch>& micro);
  void train_micro_batch(int rank, int64_t e, comm::Transport& transport, RankRun& out);
  const Batch& batch_of(int64_t e) const;
  StepResult finish_step(const std::vector<Batch>& micro, const std::vector<float>& losses, double seconds);

  TrainerOptions options_;
  int update_every_;
  float scale_;
  std::unique_ptr<GroupNetwork> network_;
  std::vector<std::unique_ptr<Optimizer>> optimizers_;  // per rank
  std::shared_ptr<comm::World> processes_;     // one process per rank, or null
  std::unique_ptr<comm::ThreadWorld> threads_;  // ranks as threads (processes_ null)
  bool gathered_ = true;                        // every rank's parameters are current here
  int64_t trained_ = 0;                     // micro-batches stage 0 has trained
  std::vector<Batch> previous_, current_;   // the micro-batches of the last two steps
  TrainerMetrics metrics_;
  GroupTraffic traffic_;
  mutable bool written_back_ = true;
};

}  // namespace pf::groups

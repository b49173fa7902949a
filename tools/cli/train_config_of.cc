#include "tools/cli/train_config_of.h"

#include <map>

#include "runtime/schedules/text_format.h"
#include "tools/cli/schedule_command.h"
#include "tools/cli/train_setup.h"

namespace pf::cli {

TrainingConfig training_config_of(const TrainArgs& a) {
  TrainingConfig c;
  c.base.micro_batches = a.micro_batches;
  c.base.replicas = a.data_parallel;
  c.base.seed = a.seed;
  c.base.blas_threads = a.blas_threads;
  c.base.optimizer = optimizer_config(a);
  c.base.lr_schedule = lr_schedule(a);
  c.schedule = a.schedule;
  if (!a.schedule_file.empty()) c.schedule_text = sched::schedule_to_text(sched::read_schedule_file(a.schedule_file));
  c.ranks = a.stages;
  c.chunks = a.chunks;
  c.seq_slices = a.seq_slices;
  c.layers_per_stage = a.layers_per_stage;
  c.partition = a.partition == "even" ? PartitionKind::kEven
                : a.partition == "balanced" ? PartitionKind::kMeasured
                                            : PartitionKind::kParameters;
  c.devices = parse_device_list(a.devices);
  c.activation_policy = a.activation_policy;
  c.activation_budget_bytes = a.activation_budget;
  c.offload_dir = a.offload_dir;
  c.gradient_reduction = a.gradient_reduction;
  c.tensor_parallel = a.tensor_parallel;
  c.tensor_reduction = a.tensor_reduction;
  c.sequence_parallel = a.sequence_parallel;
  c.tensor_parallel_overlap = a.tensor_parallel_overlap;
  c.async.vertical_sync = a.vertical_sync;
  c.async.spectrain_version = a.spectrain_version;
  c.async.pipemare_anneal_updates = a.pipemare_anneal;
  c.async.pipemare_decay = static_cast<float>(a.pipemare_decay);
  c.local_head = a.local_head;
  c.neuron_groups = a.neuron_groups;
  c.group_diversity = static_cast<float>(a.group_diversity);
  c.group_diversity_temperature = static_cast<float>(a.group_diversity_temperature);
  c.adaptation.enabled = a.adapt;
  c.adaptation.threshold = a.adapt_threshold;
  c.adaptation.patience = a.adapt_patience;
  c.slow_rank = a.slow_rank;
  c.slow_factor = a.slow_factor;
  c.fill = a.fill;
  c.overlap_steps = a.overlap_steps;
  return c;
}

std::string cli_option_name(const std::string& key) {
  static const std::map<std::string, std::string> flags = {
      {"schedule", "--schedule"},
      {"schedule_text", "--schedule-file"},
      {"ranks", "--stages"},
      {"chunks", "--chunks"},
      {"seq_slices", "--seq-slices"},
      {"activation_policy", "--activation-policy"},
      {"activation_budget_bytes", "--activation-budget"},
      {"offload_dir", "--offload-dir"},
      {"devices", "--devices"},
      {"replicas", "--data-parallel"},
      {"gradient_reduction", "--gradient-reduction"},
      {"tensor_parallel", "--tensor-parallel"},
      {"tensor_parallel_world", "mpirun"},
      {"tensor_reduction", "--tensor-reduction"},
      {"sequence_parallel", "--sequence-parallel"},
      {"tensor_parallel_overlap", "--tensor-parallel-overlap"},
      {"clip_norm", "--clip-norm"},
      {"lr_schedule", "--lr-schedule"},
      {"local_head", "--local-head"},
      {"neuron_groups", "--neuron-groups"},
      {"group_diversity", "--group-diversity"},
      {"group_diversity_temperature", "--group-diversity-temperature"},
      {"vertical_sync", "--vertical-sync"},
      {"spectrain_version", "--spectrain-version"},
      {"pipemare_anneal_updates", "--pipemare-anneal"},
      {"pipemare_decay", "--pipemare-decay"},
      {"adapt", "--adapt"},
      {"slow_rank", "--slow-rank"},
      {"slow_factor", "--slow-factor"},
      {"world", "mpirun"},
      {"fill", "--fill"},
      {"overlap_steps", "--overlap-steps"},
  };
  const auto it = flags.find(key);
  return it == flags.end() ? key : it->second;
}

}  // namespace pf::cli

#include "runtime/run/resolve.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>

#include "runtime/backend/cuda_backend.h"
#include "runtime/comm/gpu_process_setup.h"
#include "runtime/comm/world.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/execution/partition.h"
#include "runtime/models/local_head_kind.h"
#include "runtime/schedules/async_schedules.h"
#include "runtime/schedules/generators.h"
#include "runtime/schedules/local_schedules.h"
#include "runtime/schedules/lowering.h"
#include "runtime/schedules/stage_actions.h"
#include "runtime/schedules/text_format.h"
#include "runtime/schedules/validator.h"
#include "runtime/schedules/windowed_schedules.h"
#include "runtime/tensor_parallel/group.h"

namespace pf {
namespace {

bool has_windowed_actions(const sched::Schedule& s) { return sched::is_asynchronous(s) || sched::has_local_heads(s); }

// One process per rank on CUDA devices: this process's ordinal at its rank, -1 for the others (their
// ordinals are on their own nodes). One entry (`cuda`): the GPU of the node-local rank.
void place_process_rank(const TrainingConfig& c, int ranks, const OptionNamer& names, std::vector<int>* rank_device) {
  const int me = c.world->rank();
  const std::string who = names("devices") + " (rank " + std::to_string(me) + ", " + c.world->describe() + ")";
  const CudaAvailability avail = probe_cuda();
  // The option's own refusals first (they do not depend on the machine), then the device's (with
  // none visible, the one the local rank asks for is named).
  const int visible = avail.device_count > 0 ? avail.device_count : std::numeric_limits<int>::max();
  const int device =
      comm::process_device(c.devices, me, ranks, comm::launcher_local_rank(), visible, names("devices"));
  require_cuda_device(device, who, avail);
  rank_device->assign(static_cast<size_t>(ranks), -1);
  (*rank_device)[static_cast<size_t>(me)] = device;
}

}  // namespace

Device sequential_device(const TrainingConfig& config, const OptionNamer& names) {
  PF_CHECK_ARG(!config.devices.empty(), "sequential_device: no device in the config");
  const Device first = config.devices.front();
  const auto& world = config.tensor_parallel_world;
  if (first.kind != DeviceKind::kCuda || config.tensor_parallel <= 1 || world == nullptr) return first;
  const int member = world->rank(), members = world->size();
  const comm::LocalRank local = comm::launcher_local_rank();
  if (config.devices.size() == 1 && local.rank < 0) return first;  // threads of one process
  const std::string who = names("devices") + " (tensor-parallel member " + std::to_string(member) + ", " +
                          world->describe() + ")";
  const CudaAvailability avail = probe_cuda();
  const int visible = avail.device_count > 0 ? avail.device_count : std::numeric_limits<int>::max();
  const int device = comm::process_device(config.devices, member, members, local, visible, names("devices"));
  require_cuda_device(device, who, avail);
  return Device::cuda(device);
}

namespace {

// CPU threads, processes or CUDA devices; the CUDA ordinal of each rank (kGpu; processes: this one's).
RankPlacement place_ranks(TrainingConfig& c, int ranks, const OptionNamer& names, std::vector<int>* rank_device) {
  // With one process per rank a single entry stays one: each process chooses by its local rank.
  if (c.devices.size() == 1 && !c.world) c.devices.assign(static_cast<size_t>(ranks), c.devices.front());
  const auto& d = c.devices;
  const RankPlacement threads_or_processes = c.world ? RankPlacement::kProcesses : RankPlacement::kThreads;
  if (d.empty()) return threads_or_processes;
  PF_CHECK_ARG(static_cast<int>(d.size()) == ranks || (c.world && d.size() == 1), "devices: ", d.size(),
               " entries for the schedule's ", ranks,
               " ranks (devices[r] is rank r's device; give one per rank, or none to run on the CPU); ",
               static_cast<int>(d.size()) < ranks ? "rank " + std::to_string(d.size()) + " has no device"
                                                  : "there is no rank " + std::to_string(ranks));
  int cuda_ranks = 0;
  for (const Device& dev : d) cuda_ranks += dev.kind == DeviceKind::kCuda ? 1 : 0;
  if (cuda_ranks == 0) return threads_or_processes;  // explicitly all CPU
  for (int r = 0; r < static_cast<int>(d.size()); ++r)
    PF_CHECK_ARG(d[r].kind == DeviceKind::kCuda, "devices[", r, "] (rank ", r, ") is ", d[r].to_string(),
                 " while other ranks are on CUDA devices: all ranks must be on the CPU or all on CUDA devices");
  if (c.world) {
    place_process_rank(c, ranks, names, rank_device);
    return RankPlacement::kProcesses;
  }
  const CudaAvailability avail = probe_cuda();
  for (int r = 0; r < ranks; ++r) {
    require_cuda_device(d[r].ordinal, "devices[" + std::to_string(r) + "] (rank " + std::to_string(r) + ")", avail);
    rank_device->push_back(d[r].ordinal);
  }
  return RankPlacement::kGpu;
}

std::vector<int> resolve_partition(const Model& model, const TrainingConfig& c, int stages,
                                   const std::vector<double>& layer_costs) {
  const int layers = static_cast<int>(model.layers().size());
  if (!c.layers_per_stage.empty()) return exec::layer_counts(exec::partition_layers(layers, stages, c.layers_per_stage));
  switch (c.partition) {
    case PartitionKind::kEven: return exec::layer_counts(exec::partition_layers(layers, stages));
    case PartitionKind::kParameters: return exec::layer_counts(exec::partition_by_parameters(model, stages));
    case PartitionKind::kMeasured: break;
  }
  PF_CHECK_ARG(static_cast<int>(layer_costs.size()) == layers, "partition measured: ", layer_costs.size(),
               " measured layer costs for the model's ", layers, " top-level layers");
  return exec::layer_counts(exec::partition_balanced(layer_costs, stages));
}

void warn_out_of_order_gradients(const sched::Schedule& s) {
  for (int st = 0; st < s.num_stages(); ++st) {
    if (sched::weight_gradient_order(s, st) != sched::reference_weight_gradient_order(s, st)) {
      log(LogLevel::kWarning, "pipeline trainer: stage " + std::to_string(st) +
                                  " accumulates weight gradients out of micro-batch order; results will "
                                  "differ from the sequential reference in the last bits");
    }
  }
}

// Each unit's loss is the mean over its tokens: 1 / (D m S) makes the step's sum the mean.
// Windowed schedules update with one micro-batch's gradient (an update per step: one batch's).
// A parameter that stages on two ranks use (then no rank may step it alone).
bool parameters_shared_across_ranks(const Model& model, const sched::Schedule& s, const std::vector<int>& counts) {
  std::unordered_map<const Parameter*, int> owner;
  int begin = 0;
  for (int st = 0; st < static_cast<int>(counts.size()); ++st) {
    const int rank = s.placement.rank_of(st);
    for (int i = begin; i < begin + counts[static_cast<size_t>(st)]; ++i)
      for (Parameter* p : model.layers()[static_cast<size_t>(i)]->parameters()) {
        auto [it, inserted] = owner.emplace(p, rank);
        if (!inserted && it->second != rank) return true;
      }
    begin += counts[static_cast<size_t>(st)];
  }
  return false;
}

OptimizerMode optimizer_mode_of(const Model& model, const PipelinePlan& plan) {
  if (plan.schedule.traits.windowed()) return OptimizerMode::kStages;
  if (plan.placement == RankPlacement::kProcesses) return OptimizerMode::kPerProcess;
  const bool workers = plan.config.rank_optimizer && plan.placement == RankPlacement::kThreads &&
                       !parameters_shared_across_ranks(model, plan.schedule, plan.layers_per_stage);
  return workers ? OptimizerMode::kOnWorkers : OptimizerMode::kMainThread;
}

float loss_scale_of(const TrainingConfig& c, const sched::ScheduleTraits& traits) {
  if (traits.windowed())
    return traits.update_interval == sched::UpdateInterval::kStep ? 1.0f / static_cast<float>(c.base.micro_batches)
                                                                   : 1.0f;
  return 1.0f / static_cast<float>(c.base.step_micro_batches() * c.seq_slices);
}

}  // namespace

sched::Schedule make_config_schedule(const TrainingConfig& c) {
  if (!c.schedule_text.empty()) {
    sched::Schedule s = sched::parse_schedule(c.schedule_text);
    if (s.seq_slices == c.seq_slices)
      PF_CHECK_ARG(s.num_micro_batches == c.base.micro_batches * s.seq_slices, "schedule_text has ",
                   s.num_micro_batches, s.seq_slices > 1 ? " units" : " micro-batches",
                   ", options.base.micro_batches is ", c.base.micro_batches,
                   s.seq_slices > 1 ? " (x seq_slices " + std::to_string(s.seq_slices) + ")" : std::string());
    return s;
  }
  sched::GeneratorOptions g;
  g.ranks = c.ranks;
  g.micro_batches = c.base.micro_batches;
  g.chunks = c.chunks;
  g.seq_slices = c.seq_slices;
  return sched::generate_schedule(c.schedule, g);
}

ProcessGroups process_groups_of(const PipelinePlan& plan) {
  const TrainingConfig& c = plan.config;
  ProcessGroups g;
  if (!c.world) return g;
  g.pipeline = c.world.get();
  g.data_parallel = c.data_parallel_world.get();
  if (c.tensor_parallel > 1) g.tensor_parallel = c.tensor_parallel_world.get();
  g.timeout_seconds = c.recv_timeout_seconds;
  g.replicas = c.base.replicas;
  return g;
}

int replica_index(const PipelinePlan& plan) {
  return plan.config.data_parallel_world ? plan.config.data_parallel_world->rank() : 0;
}

void check_config_fields(const TrainingConfig& c) {
  c.base.validate();
  PF_CHECK_ARG(std::isfinite(c.slow_factor) && c.slow_factor >= 1.0, "slow_factor must be >= 1, got ", c.slow_factor);
  PF_CHECK_ARG(std::isfinite(c.bubble_fill_safety) && c.bubble_fill_safety > 0 && c.bubble_fill_safety <= 1,
               "bubble_fill_safety must be in (0, 1], got ", c.bubble_fill_safety);
  PF_CHECK_ARG(c.ranks >= 1, "ranks must be >= 1, got ", c.ranks);
  PF_CHECK_ARG(c.chunks >= 0, "chunks must be >= 1 (or 0 for the schedule's default), got ", c.chunks);
  PF_CHECK_ARG(c.recv_timeout_seconds > 0, "recv_timeout_seconds must be > 0, got ", c.recv_timeout_seconds);
  PF_CHECK_ARG(c.mailbox_capacity >= 1, "mailbox_capacity must be >= 1, got ", c.mailbox_capacity);
  PF_CHECK_ARG(c.spin_seconds >= 0, "spin_seconds must be >= 0, got ", c.spin_seconds);
  for (size_t i = 0; i < c.cpu_affinity.size(); ++i)
    PF_CHECK_ARG(c.cpu_affinity[i] >= 0, "cpu_affinity[", i, "] must be >= 0, got ", c.cpu_affinity[i]);
  PF_CHECK_ARG(c.gradient_reduction == "allreduce" || c.gradient_reduction == "deterministic",
               "gradient_reduction must be \"allreduce\" or \"deterministic\", got '", c.gradient_reduction, "'");
  PF_CHECK_ARG(c.seq_slices >= 1, "seq_slices must be >= 1, got ", c.seq_slices);
  PF_CHECK_ARG(c.tensor_parallel >= 1, "tensor_parallel must be >= 1, got ", c.tensor_parallel);
  parse_tensor_reduction(c.tensor_reduction);
  if (c.tensor_parallel > 1 && c.tensor_parallel_world)
    PF_CHECK_ARG(c.tensor_parallel_world->size() == c.tensor_parallel, "tensor_parallel_world has ",
                 c.tensor_parallel_world->size(), " members for tensor_parallel ", c.tensor_parallel);
  sched::parse_activation_policy(c.activation_policy);  // an unknown name lists the known ones
  PF_CHECK_ARG(c.activation_budget_bytes >= 0, "activation_budget_bytes must be >= 0, got ",
               c.activation_budget_bytes);
  check_local_head_kind(c.local_head);
  PF_CHECK_ARG(c.neuron_groups >= 1, "neuron_groups must be >= 1, got ", c.neuron_groups);
  PF_CHECK_ARG(std::isfinite(c.group_diversity) && c.group_diversity >= 0,
               "group_diversity must be a finite number >= 0, got ", c.group_diversity);
  PF_CHECK_ARG(std::isfinite(c.group_diversity_temperature) && c.group_diversity_temperature > 0,
               "group_diversity_temperature must be a finite number > 0, got ", c.group_diversity_temperature);
  const AsyncOptions& a = c.async;
  PF_CHECK_ARG(a.spectrain_version == 1 || a.spectrain_version == 2,
               "spectrain_version must be 1 (the paper) or 2, got ", a.spectrain_version);
  PF_CHECK_ARG(a.pipemare_anneal_updates >= 0, "pipemare_anneal_updates must be >= 0, got ",
               a.pipemare_anneal_updates);
  PF_CHECK_ARG(std::isfinite(a.pipemare_decay) && a.pipemare_decay >= 0.0f && a.pipemare_decay < 1.0f,
               "pipemare_decay must be in [0, 1), got ", a.pipemare_decay);
  PF_CHECK_ARG(c.adaptation.threshold > 1, "adaptation threshold must be > 1, got ", c.adaptation.threshold);
  PF_CHECK_ARG(c.adaptation.patience >= 1, "adaptation patience must be >= 1, got ", c.adaptation.patience);
  if (c.base.replicas > 1 && c.data_parallel_world)
    PF_CHECK_ARG(c.data_parallel_world->size() == c.base.replicas, "data_parallel_world has ",
                 c.data_parallel_world->size(), " members for ", c.base.replicas, " replicas");
  for (size_t i = 0; i < c.devices.size(); ++i)
    PF_CHECK_ARG(c.devices[i].ordinal >= 0, "devices[", i, "] (rank ", i, "): device ordinal must be >= 0, got ",
                 c.devices[i].ordinal);
}

CapabilityFacts capability_facts(const Model& model, const TrainingConfig& c, const sched::Schedule* s) {
  CapabilityFacts f;
  f.pipelined = c.pipelined();
  if (s) {
    f.schedule = c.schedule_text.empty() ? s->name : "custom";
    f.traits = s->traits;
    f.text_has_windowed_actions = !c.schedule_text.empty() && has_windowed_actions(*s);
    f.schedule_seq_slices = s->seq_slices;
    f.pipelines = s->pipelines;
  }
  f.ranks = s ? s->num_ranks() : c.ranks;
  f.chunks = c.chunks;
  f.placement = c.world ? RankPlacement::kProcesses : RankPlacement::kThreads;
  f.devices = static_cast<int>(c.devices.size());
  for (const Device& d : c.devices) {
    if (d.kind != DeviceKind::kCuda) continue;
    if (f.cuda_devices++ == 0) f.first_cuda_device = d.to_string();
    if (!c.world) f.placement = RankPlacement::kGpu;
  }
  f.policy = sched::parse_activation_policy(c.activation_policy);
  f.offload_dir = !c.offload_dir.empty();
  f.activation_budget_bytes = c.activation_budget_bytes;
  f.replicas = c.base.replicas;
  f.data_parallel_world = c.data_parallel_world != nullptr;
  f.seq_slices = c.seq_slices;
  f.token_model = model.input_spec().kind == InputSpec::Kind::kTokens;
  f.seq_len = model.input_spec().seq_len;
  f.clip_norm = c.base.optimizer.clip_norm;
  f.constant_lr = c.base.lr_schedule.is_constant();
  f.lr_schedule = lr_schedule_kind_name(c.base.lr_schedule.kind);
  f.warmup_steps = static_cast<int>(c.base.lr_schedule.warmup_steps);
  f.local_head = c.local_head;
  f.neuron_groups = c.neuron_groups;
  f.group_diversity = c.group_diversity != TrainingConfig().group_diversity ||
                      c.group_diversity_temperature != TrainingConfig().group_diversity_temperature;
  f.async = c.async;
  f.adapt = c.adaptation.enabled;
  f.slow_factor = c.slow_factor;
  f.fill = c.bubble_fill || !c.fill.empty();
  f.overlap_steps = c.overlap_steps;
  f.tied_parameters = !model.tied_pairs().empty();
  const auto& group = model.tensor_parallel_group();
  f.tensor_parallel = std::max(c.tensor_parallel, group ? group->size() : 1);
  f.tensor_parallel_world = c.tensor_parallel_world != nullptr || group != nullptr;
  f.sequence_parallel = c.sequence_parallel || (group != nullptr && group->sequence_parallel());
  return f;
}

PipelinePlan resolve(const Model& model, const TrainingConfig& config, const OptionNamer& names,
                     const std::vector<double>& layer_costs) {
  check_config_fields(config);
  PF_CHECK_ARG(config.pipelined(), "resolve: no schedule is set (the sequential trainer needs no plan)");
  PipelinePlan plan;
  plan.config = config;
  TrainingConfig& c = plan.config;
  sched::Schedule s = make_config_schedule(c);
  check_capabilities(capability_facts(model, c, &s), Operation::kTrain, names);

  plan.schedule = sched::is_lowered(s) ? std::move(s) : sched::lower_communication(s);
  plan.comm = communication_semantics(plan.schedule);
  plan.policy = sched::parse_activation_policy(c.activation_policy);
  const sched::ScheduleTraits& traits = plan.schedule.traits;
  if (traits.windowed())
    plan.windows = sched::windowed_step_windows(plan.schedule, plan.policy == sched::ActivationPolicy::kRecompute);
  plan.base_schedule = plan.schedule;
  if (plan.policy == sched::ActivationPolicy::kSelective) {
    PF_CHECK_ARG(c.activation_budget_bytes > 0,
                 "activation policy selective needs activation_budget_bytes > 0 (bytes per rank)");
  } else if (plan.policy != sched::ActivationPolicy::kNone && plan.policy != sched::ActivationPolicy::kBalance) {
    plan.schedule = sched::apply_activation_policy(plan.base_schedule, plan.policy, sched::CostModel());
    sched::validate_or_throw(plan.schedule, {plan.comm});
  }
  if (c.base.replicas > 1) {
    plan.schedule = sched::add_gradient_allreduce(plan.schedule);
    sched::validate_or_throw(plan.schedule, {plan.comm});
  }
  warn_out_of_order_gradients(plan.schedule);

  const int p = plan.schedule.num_ranks();
  plan.placement = place_ranks(c, p, names, &plan.rank_device);
  if (c.world) {
    PF_CHECK_ARG(c.world->size() == p, "pipeline trainer: ", c.world->describe(), " is one of ", c.world->size(),
                 " processes but the schedule '", plan.schedule.name, "' has ", p,
                 " ranks (one process per rank: launch ", p, " processes, e.g. mpirun -np ", p, ")");
  }
  PF_CHECK_ARG(c.slow_rank < p, names("slow_rank"), " ", c.slow_rank, " is not a rank of the schedule's ", p);
  plan.layers_per_stage = resolve_partition(model, c, plan.schedule.stages_per_pipeline(), layer_costs);
  c.layers_per_stage = plan.layers_per_stage;
  plan.loss_scale = loss_scale_of(c, traits);
  plan.optimizer_mode = optimizer_mode_of(model, plan);
  plan.fills_bubbles = (c.bubble_fill || !c.fill.empty()) && !traits.windowed() &&
                       plan.placement == RankPlacement::kThreads;
  return plan;
}

}  // namespace pf

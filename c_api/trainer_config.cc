#include "c_api/trainer_config.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <string>

#include "c_api/struct_io.h"
#include "runtime/core/error.h"
#include "runtime/optim/optimizer.h"
#include "runtime/run/config_keys.h"
#include "runtime/schedules/text_format.h"
#include "runtime/tensor/device.h"

namespace pf::capi {
namespace {

// Version-1 size: an older caller's struct must hold at least these fields (0.2 appended the
// activation-memory and device fields to pf_trainer_options, 0.3 the process fields, 0.4 the
// asynchronous-schedule fields, then local_head; 0.5 the learning-rate schedule, 0.7 seq_slices,
// 0.9 adaptation; an older caller gets their defaults).
constexpr size_t kTrainerOptionsV1Size = offsetof(pf_trainer_options, activation_policy);
constexpr size_t kTrainerOptionsV2Size = offsetof(pf_trainer_options, processes);
constexpr size_t kTrainerOptionsV3Size = offsetof(pf_trainer_options, pipemare_anneal_updates);
static_assert(kTrainerOptionsV1Size == 104, "the 0.1 pf_trainer_options layout changed");
static_assert(kTrainerOptionsV2Size == 136, "the 0.2 pf_trainer_options layout changed");
// The 0.4 fields start at the 0.3 sizeof, not in its trailing padding (c_api/struct_io.h).
static_assert(kTrainerOptionsV3Size == 160 && offsetof(pf_trainer_options, ranks) + sizeof(int32_t) <= 160,
              "the 0.3 pf_trainer_options layout changed");
// local_head was appended after vertical_sync within 0.4: at the sizeof of the struct that ends
// there (184, after 4 bytes of padding), so that struct size is a field boundary too.
static_assert(offsetof(pf_trainer_options, vertical_sync) == 176 && offsetof(pf_trainer_options, local_head) == 184 &&
                  offsetof(pf_trainer_options, local_head) + sizeof(const char*) == 192,
              "the 0.4 pf_trainer_options layout changed");
// 0.5 appended the learning-rate schedule at the 0.4 sizeof (192).
static_assert(offsetof(pf_trainer_options, lr_schedule) == 192 && offsetof(pf_trainer_options, min_lr) == 216,
              "the 0.5 pf_trainer_options layout changed");
// 0.7 appended seq_slices at the 0.5 (and 0.6) sizeof, 224: an older caller's struct ends before it
// and means 1.
static_assert(offsetof(pf_trainer_options, seq_slices) == 224 && offsetof(pf_trainer_options, adapt_threshold) == 232,
              "the 0.7 pf_trainer_options layout changed");
// 0.9 appended fail-slow adaptation and its test knobs at the 0.7 sizeof, 232 (after its padding).
static_assert(offsetof(pf_trainer_options, adapt) == 240 && offsetof(pf_trainer_options, slow_factor) == 248 &&
                  offsetof(pf_trainer_options, slow_rank) == 256,
              "the 0.9 pf_trainer_options layout changed");
// 0.11 appended the key/value entries at the 0.9 sizeof, 264 (after slow_rank's padding).
static_assert(offsetof(pf_trainer_options, config_entries) == 264 && sizeof(pf_trainer_options) == 280,
              "the 0.11 pf_trainer_options layout changed");

// The asynchronous-schedule options (0.4): 0 in a field is its default; -1 turns pipemare's
// annealing and discrepancy average off (the runtime's 0).
AsyncOptions convert_async(const pf_trainer_options& o) {
  AsyncOptions a;
  PF_CHECK_ARG(o.vertical_sync == 0 || o.vertical_sync == 1, "options->vertical_sync is ", o.vertical_sync,
               ": expected 0 (off, the default) or 1");
  a.vertical_sync = o.vertical_sync == 1;
  PF_CHECK_ARG(o.spectrain_version >= 0, "options->spectrain_version is ", o.spectrain_version,
               ": expected 1 (the paper, the default), 2, or 0 for the default");
  if (o.spectrain_version != 0) a.spectrain_version = o.spectrain_version;
  PF_CHECK_ARG(o.pipemare_anneal_updates >= -1, "options->pipemare_anneal_updates is ", o.pipemare_anneal_updates,
               ": expected K > 0 updates, 0 for the default (", a.pipemare_anneal_updates, ") or -1 for none");
  if (o.pipemare_anneal_updates == -1) {
    a.pipemare_anneal_updates = 0;
  } else if (o.pipemare_anneal_updates != 0) {
    a.pipemare_anneal_updates = o.pipemare_anneal_updates;
  }
  PF_CHECK_ARG(o.pipemare_decay == -1.0f || o.pipemare_decay == 0.0f ||
                   (o.pipemare_decay > 0.0f && o.pipemare_decay < 1.0f),
               "options->pipemare_decay is ", o.pipemare_decay, ": expected g in (0, 1), 0 for the default (",
               a.pipemare_decay, ") or -1 for no average (g = 0)");
  if (o.pipemare_decay == -1.0f) {
    a.pipemare_decay = 0.0f;
  } else if (o.pipemare_decay != 0.0f) {
    a.pipemare_decay = o.pipemare_decay;
  }
  return a;
}

// Pipeline ranks P for a schedule name: options->ranks, or options->stages (its older name).
int pipeline_ranks_option(const pf_trainer_options& o) {
  PF_CHECK_ARG(o.ranks >= 0, "options->ranks is ", o.ranks, ": the pipeline ranks must be >= 1 (0 = use options->stages)");
  if (o.ranks == 0) return o.stages;
  PF_CHECK_ARG(o.stages == 1 || o.stages == o.ranks, "options->ranks is ", o.ranks, " but options->stages is ",
               o.stages, ": both are the pipeline ranks P (stages is the older name); set one");
  return o.ranks;
}

TrainerOptions convert_base(const pf_trainer_options& o) {
  TrainerOptions t;
  PF_CHECK_ARG(o.micro_batches >= 0, "options->micro_batches is ", o.micro_batches,
               ": expected m >= 1 micro-batches per step (0 = the default: 1 without a schedule, 2 x the pipeline "
               "ranks with one, a schedule_text's own count)");
  t.micro_batches = o.micro_batches;
  PF_CHECK_ARG(o.data_parallel >= 1, "options->data_parallel is ", o.data_parallel,
               ": the data-parallel replicas must be >= 1 (1 = none)");
  t.replicas = o.data_parallel;
  t.seed = o.seed;
  t.blas_threads = o.blas_threads;
  switch (o.optimizer) {
    case PF_OPTIMIZER_SGD: t.optimizer.kind = OptimizerConfig::Kind::kSgd; break;
    case PF_OPTIMIZER_ADAMW: t.optimizer.kind = OptimizerConfig::Kind::kAdamW; break;
    default:
      fail(ErrorCode::kInvalidArgument, "options->optimizer is ", o.optimizer,
           ", not a pf_optimizer_kind (PF_OPTIMIZER_SGD or PF_OPTIMIZER_ADAMW)");
  }
  t.optimizer.lr = o.lr;
  t.optimizer.momentum = o.momentum;
  t.optimizer.weight_decay = o.weight_decay;
  t.optimizer.beta1 = o.beta1;
  t.optimizer.beta2 = o.beta2;
  t.optimizer.eps = o.eps;
  t.optimizer.clip_norm = o.clip_norm;
  if (o.lr_schedule != nullptr) t.lr_schedule.kind = parse_lr_schedule_kind(o.lr_schedule);
  PF_CHECK_ARG(o.warmup_steps >= 0, "options->warmup_steps is ", o.warmup_steps, ": expected >= 0");
  PF_CHECK_ARG(o.decay_steps >= 0, "options->decay_steps is ", o.decay_steps, ": expected >= 0");
  t.lr_schedule.warmup_steps = o.warmup_steps;
  t.lr_schedule.decay_steps = o.decay_steps;
  t.lr_schedule.min_lr = o.min_lr;
  return t;
}

// Fail-slow adaptation (0.9) and its test knob: 0 in a field is its default.
void convert_adaptation(const pf_trainer_options& o, TrainingConfig* c) {
  PF_CHECK_ARG(o.adapt == 0 || o.adapt == 1, "options->adapt is ", o.adapt, ": expected 0 (off, the default) or 1");
  PF_CHECK_ARG(o.adapt_threshold == 0 || o.adapt_threshold > 1, "options->adapt_threshold is ", o.adapt_threshold,
               ": expected > 1, or 0 for the default (", c->adaptation.threshold, ")");
  PF_CHECK_ARG(o.adapt_patience >= 0, "options->adapt_patience is ", o.adapt_patience,
               ": expected >= 1 steps, or 0 for the default (", c->adaptation.patience, ")");
  c->adaptation.enabled = o.adapt == 1;
  if (o.adapt_threshold != 0) c->adaptation.threshold = o.adapt_threshold;
  if (o.adapt_patience != 0) c->adaptation.patience = o.adapt_patience;
  PF_CHECK_ARG(o.slow_factor == 0 || o.slow_factor >= 1, "options->slow_factor is ", o.slow_factor,
               ": expected >= 1, or 0 for the default (1)");
  const double factor = o.slow_factor == 0 ? 1.0 : o.slow_factor;
  if (factor == 1) return;  // no rank is slowed, whatever slow_rank says (a zeroed tail)
  c->slow_factor = factor;
  if (!c->pipelined()) return;  // the capability table refuses a slowed rank without a pipeline
  const int ranks = schedule_ranks(o);
  PF_CHECK_ARG(o.slow_rank >= 0 && o.slow_rank < ranks, "options->slow_rank is ", o.slow_rank,
               " with slow_factor ", factor, ": expected a pipeline rank in [0, ", ranks, ")");
  c->slow_rank = o.slow_rank;
}

// The key/value entries (0.11), after the fields: each key and value checked by the runtime's table.
void apply_config_entries(const pf_trainer_options& o, TrainingConfig* c) {
  PF_CHECK_ARG(o.config_entries != nullptr || o.num_config_entries == 0, "options->num_config_entries is ",
               o.num_config_entries, " but options->config_entries is NULL");
  PF_CHECK_ARG(o.num_config_entries <= 4096, "options->num_config_entries is ", o.num_config_entries,
               ": at most 4096 entries");
  for (size_t i = 0; i < o.num_config_entries; ++i) {
    const pf_config_entry& e = o.config_entries[i];
    const std::string where = "options->config_entries[" + std::to_string(i) + "]";
    PF_CHECK_ARG(e.key != nullptr && e.value != nullptr, where, ": key and value must not be NULL");
    try {
      set_config_entry(*c, e.key, e.value);
    } catch (const Error& error) {
      throw Error(error.code(), where + ": " + error.what());
    }
  }
}

}  // namespace

pf_trainer_options default_trainer_options() {
  const TrainingConfig d;
  pf_trainer_options o{};
  o.struct_size = sizeof(pf_trainer_options);
  o.micro_batches = 0;  // the default, chosen by read_training_config once the schedule is known
  o.seed = d.base.seed;
  o.blas_threads = d.base.blas_threads;
  o.optimizer = d.base.optimizer.kind == OptimizerConfig::Kind::kSgd ? PF_OPTIMIZER_SGD : PF_OPTIMIZER_ADAMW;
  o.lr = d.base.optimizer.lr;
  o.momentum = d.base.optimizer.momentum;
  o.weight_decay = d.base.optimizer.weight_decay;
  o.beta1 = d.base.optimizer.beta1;
  o.beta2 = d.base.optimizer.beta2;
  o.eps = d.base.optimizer.eps;
  o.clip_norm = d.base.optimizer.clip_norm;
  o.stages = 1;
  o.chunks = 0;
  o.recv_timeout_seconds = d.recv_timeout_seconds;
  o.processes = PF_PROCESSES_AUTO;
  o.data_parallel = d.base.replicas;
  o.ranks = 0;  // = stages
  o.pipemare_anneal_updates = d.async.pipemare_anneal_updates;
  o.pipemare_decay = d.async.pipemare_decay;
  o.spectrain_version = d.async.spectrain_version;
  o.vertical_sync = d.async.vertical_sync ? 1 : 0;
  o.local_head = nullptr;   // = "auto"
  o.lr_schedule = nullptr;  // = "constant"
  o.seq_slices = d.seq_slices;
  o.adapt = 0;
  o.adapt_threshold = d.adaptation.threshold;
  o.adapt_patience = d.adaptation.patience;
  o.slow_rank = d.slow_rank;
  o.slow_factor = d.slow_factor;
  o.config_entries = nullptr;
  o.num_config_entries = 0;
  return o;
}

pf_trainer_options read_options_struct(const pf_trainer_options* options) {
  if (options == nullptr) return default_trainer_options();
  return read_struct(*options, kTrainerOptionsV1Size, "options", "pf_trainer_options", default_trainer_options());
}

int schedule_ranks(const pf_trainer_options& o) {
  return o.schedule_text != nullptr ? sched::parse_schedule(o.schedule_text).num_ranks() : pipeline_ranks_option(o);
}

TrainingConfig read_training_config(const pf_trainer_options* options) {
  const pf_trainer_options o = read_options_struct(options);
  TrainingConfig c;
  c.base = convert_base(o);
  if (o.gradient_reduction != nullptr) {
    const std::string r = o.gradient_reduction;
    PF_CHECK_ARG(r == "allreduce" || r == "deterministic", "options->gradient_reduction is '", r,
                 "': expected \"allreduce\" or \"deterministic\" (or NULL)");
    c.gradient_reduction = r;
  }
  if (o.schedule_text != nullptr) {
    PF_CHECK_ARG(o.schedule == nullptr, "options->schedule and options->schedule_text are both set; set one");
    c.schedule_text = o.schedule_text;
  } else if (o.schedule != nullptr) {
    c.schedule = o.schedule;
  }
  c.ranks = pipeline_ranks_option(o);
  c.chunks = o.chunks;
  PF_CHECK_ARG(o.seq_slices >= 0, "options->seq_slices is ", o.seq_slices,
               ": expected S >= 1 sequence slices per micro-batch (0 = the default, 1)");
  c.seq_slices = o.seq_slices == 0 ? 1 : o.seq_slices;
  if (o.layers_per_stage != nullptr) {
    c.layers_per_stage.assign(o.layers_per_stage, o.layers_per_stage + o.num_layers_per_stage);
  } else {
    PF_CHECK_ARG(o.num_layers_per_stage == 0, "options->num_layers_per_stage is ", o.num_layers_per_stage,
                 " but options->layers_per_stage is NULL");
  }
  c.recv_timeout_seconds = o.recv_timeout_seconds;
  if (o.activation_policy != nullptr) c.activation_policy = o.activation_policy;
  c.activation_budget_bytes = o.activation_budget_bytes;
  if (o.offload_dir != nullptr) c.offload_dir = o.offload_dir;
  if (o.devices != nullptr) c.devices = parse_device_list(o.devices);  // one entry: every rank
  c.async = convert_async(o);
  if (o.local_head != nullptr) c.local_head = o.local_head;
  convert_adaptation(o, &c);
  apply_config_entries(o, &c);
  if (c.base.micro_batches == 0) {  // the default: a schedule text's own count, else 1 or 2P
    if (!c.schedule_text.empty()) {
      const sched::Schedule s = sched::parse_schedule(c.schedule_text);
      c.base.micro_batches = s.num_micro_batches / std::max(1, s.seq_slices);
    } else {
      c.base.micro_batches = default_micro_batches(c.pipelined() ? c.ranks : 1);
    }
  }
  return c;
}

std::string c_option_name(const std::string& key) {
  static const std::map<std::string, std::string> names = {
      {"replicas", "options->data_parallel"},
      {"world", "options->processes"},
      {"tensor_parallel_world", "options->processes"},
      // Options without a struct field: config entries only (pf_trainer_options.config_entries).
      {"tensor_parallel", "config entry tensor_parallel"},
      {"tensor_reduction", "config entry tensor_reduction"},
      {"sequence_parallel", "config entry sequence_parallel"},
      {"tensor_parallel_overlap", "config entry tensor_parallel_overlap"},
  };
  const auto it = names.find(key);
  return it == names.end() ? "options->" + key : it->second;
}

}  // namespace pf::capi

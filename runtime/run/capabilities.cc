#include "runtime/run/capabilities.h"

#include <algorithm>
#include <sstream>

#include "runtime/run/config_keys.h"
#include "runtime/schedules/generators.h"

namespace pf {
namespace {

using sched::ActivationPolicy;
using Facts = CapabilityFacts;
using Names = OptionNamer;

std::string num(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

std::string policy_name(const Facts& f) { return sched::activation_policy_name(f.policy); }
std::string family(const Facts& f) { return f.traits.describe(f.schedule); }
bool measured_policy(const Facts& f) {
  return f.policy == ActivationPolicy::kSelective || f.policy == ActivationPolicy::kBalance;
}
bool file_tier(const Facts& f) {
  return f.policy == ActivationPolicy::kOffloadFile || (f.policy == ActivationPolicy::kSelective && f.offload_dir);
}
// Ranks on CUDA devices: threads of this process (kGpu) or one process per rank, one GPU each.
bool on_gpus(const Facts& f) { return f.placement == RankPlacement::kGpu || f.cuda_devices > 0; }
bool sequential(const Facts& f) { return !f.pipelined; }
bool pipelined(const Facts& f) { return f.pipelined; }
// The schedules whose traits `keep` accepts, joined: "pipedream, pipedream-2bw".
std::string schedules_where(const std::function<bool(const sched::ScheduleTraits&)>& keep) {
  std::string out;
  for (const std::string& n : sched::generator_names_where(keep)) out += (out.empty() ? "" : ", ") + n;
  return out;
}
std::string stashing_schedules() {
  return schedules_where([](const sched::ScheduleTraits& t) { return t.stashes_weights; });
}
std::string local_schedules() {
  return schedules_where([](const sched::ScheduleTraits& t) { return t.local_learning(); });
}
std::string slicing_schedules() {
  return schedules_where([](const sched::ScheduleTraits& t) { return t.slices_sequences; });
}
std::string windowed_schedules() {
  return schedules_where([](const sched::ScheduleTraits& t) { return t.windowed(); });
}

// The asynchronous options and the method each belongs to.
struct AsyncOption {
  const char* key;
  sched::WeightVersioning owner;
  const char* owner_name;
  bool (*set)(const AsyncOptions&);
};
const AsyncOption kAsyncOptions[] = {
    {"vertical_sync", sched::WeightVersioning::kPipeDream, "pipedream",
     [](const AsyncOptions& a) { return a.vertical_sync != AsyncOptions().vertical_sync; }},
    {"spectrain_version", sched::WeightVersioning::kSpecTrain, "spectrain",
     [](const AsyncOptions& a) { return a.spectrain_version != AsyncOptions().spectrain_version; }},
    {"pipemare_anneal_updates", sched::WeightVersioning::kPipeMare, "pipemare",
     [](const AsyncOptions& a) { return a.pipemare_anneal_updates != AsyncOptions().pipemare_anneal_updates; }},
    {"pipemare_decay", sched::WeightVersioning::kPipeMare, "pipemare",
     [](const AsyncOptions& a) { return a.pipemare_decay != AsyncOptions().pipemare_decay; }},
};
// The first asynchronous option `f` sets that its schedule does not have (nullptr when none).
const AsyncOption* foreign_async_option(const Facts& f) {
  for (const AsyncOption& o : kAsyncOptions)
    if (o.set(f.async) && (!f.pipelined || f.traits.weights != o.owner)) return &o;
  return nullptr;
}

Capability rule(std::string id, Operation op, std::vector<std::string> options, std::string summary, ErrorCode code,
                std::function<bool(const Facts&)> refuses,
                std::function<std::string(const Facts&, const Names&)> message) {
  return Capability{std::move(id),   op,   std::move(options), std::move(summary), code, std::move(refuses),
                    std::move(message)};
}

// The operation and the codes the rules below use most.
constexpr Operation T = Operation::kTrain;
constexpr ErrorCode bad = ErrorCode::kInvalidArgument;     // the caller's to fix
constexpr ErrorCode later = ErrorCode::kUnimplemented;     // not supported yet
constexpr ErrorCode state = ErrorCode::kFailedPrecondition;

// The sequential trainer (no schedule): the pipeline's options need a schedule.
void add_sequential_rules(std::vector<Capability>& t) {
  t.push_back(rule(
      "sequential-activation-policy", T, {"activation_policy", "activation_budget_bytes", "offload_dir"},
      "an activation policy for the sequential trainer", bad,
      [](const Facts& f) {
        return sequential(f) && (f.policy != ActivationPolicy::kNone || f.activation_budget_bytes != 0 || f.offload_dir);
      },
      [](const Facts& f, const Names& n) {
        return n("activation_policy") + " '" + policy_name(f) + "', " + n("activation_budget_bytes") + " and " +
               n("offload_dir") + " apply to pipelined training, but no schedule is set: set " + n("schedule") +
               " or " + n("schedule_text");
      }));
  t.push_back(rule(
      "sequential-async-options", T, {"vertical_sync", "spectrain_version", "pipemare_anneal_updates", "pipemare_decay"}, "an asynchronous method's option without its schedule", bad,
      [](const Facts& f) { return sequential(f) && foreign_async_option(f) != nullptr; },
      [](const Facts& f, const Names& n) {
        const AsyncOption& o = *foreign_async_option(f);
        return n(o.key) + " applies to schedule " + o.owner_name + " only, but no schedule is set (set " +
               n("schedule") + ")";
      }));
  t.push_back(rule(
      "sequential-local-head", T, {"local_head"}, "a local-learning head without a local-learning schedule", bad,
      [](const Facts& f) { return sequential(f) && f.local_head != "auto"; },
      [](const Facts& f, const Names& n) {
        return n("local_head") + " is '" + f.local_head + "': it applies to the local-learning schedules (" +
               local_schedules() + ") only, but no schedule is set (set " + n("schedule") + ")";
      }));
  t.push_back(rule(
      "sequential-seq-slices", T, {"seq_slices"}, "sequence slices without a schedule that slices sequences", bad,
      [](const Facts& f) { return sequential(f) && f.seq_slices > 1; },
      [](const Facts& f, const Names& n) {
        return n("seq_slices") + " is " + std::to_string(f.seq_slices) +
               ": it needs a pipelined schedule that slices sequences, and no schedule is set (set " + n("schedule") +
               " to " + slicing_schedules() + ")";
      }));
  t.push_back(rule(
      "sequential-slow-rank", T, {"slow_rank", "slow_factor"}, "a slowed rank without a pipeline", bad,
      [](const Facts& f) { return sequential(f) && f.slow_factor != 1.0; },
      [](const Facts& f, const Names& n) {
        return n("slow_factor") + " is " + num(f.slow_factor) + " but no schedule is set: " + n("slow_rank") + " and " +
               n("slow_factor") + " need " + n("schedule") + " or " + n("schedule_text") + " (they slow one pipeline rank)";
      }));
  t.push_back(rule(
      "sequential-adaptation", T, {"adapt"}, "adaptation without a pipeline", bad,
      [](const Facts& f) { return sequential(f) && f.adapt; },
      [](const Facts&, const Names& n) {
        return n("adapt") + " needs a synchronous schedule (" + n("schedule") + ", e.g. 1f1b, or " +
               n("schedule_text") + "): it re-partitions a pipeline, and no schedule is set";
      }));
  t.push_back(rule(
      "sequential-devices", T, {"devices"}, "more than one device for the sequential trainer", bad,
      // (Tensor-parallel members may name one device each: sequential_device.)
      [](const Facts& f) { return sequential(f) && f.devices > 1 && f.devices != f.tensor_parallel; },
      [](const Facts& f, const Names& n) {
        return n("devices") + " has " + std::to_string(f.devices) +
               " entries: the sequential trainer (no schedule) runs on one device (or, tensor parallel, one per "
               "member)";
      }));

  t.push_back(rule(
      "sequential-ranks", T, {"ranks", "chunks"}, "pipeline ranks or chunks without a schedule", bad,
      [](const Facts& f) { return sequential(f) && (f.ranks > 1 || f.chunks > 1); },
      [](const Facts& f, const Names& n) {
        const bool ranks = f.ranks > 1;
        return n(ranks ? "ranks" : "chunks") + " " + std::to_string(ranks ? f.ranks : f.chunks) +
               " needs a schedule, and no schedule is set (the run would be sequential): set " + n("schedule") +
               " (e.g. 1f1b) or " + n("schedule_text");
      }));
}

// What a schedule carries.
void add_schedule_rules(std::vector<Capability>& t) {
  t.push_back(rule(
      "text-windowed-actions", T, {"schedule_text"}, "a schedule text with UPDATE or HEAD actions", later,
      [](const Facts& f) { return pipelined(f) && f.text_has_windowed_actions; },
      [](const Facts& f, const Names&) {
        return "pipeline trainer: schedule '" + f.schedule +
               "' has UPDATE or HEAD actions: asynchronous and local-learning schedules run from their generators "
               "only (" + windowed_schedules() + ")";
      }));
  t.push_back(rule(
      "local-head-schedule", T, {"local_head"}, "a local-learning head with another schedule", bad,
      [](const Facts& f) { return pipelined(f) && f.local_head != "auto" && !f.traits.local_learning(); },
      [](const Facts& f, const Names& n) {
        return n("local_head") + " '" + f.local_head + "' applies to the local-learning schedules (" +
               local_schedules() + ") only, not to '" + f.schedule + "'";
      }));
  t.push_back(rule(
      "async-option-method", T, {"vertical_sync", "spectrain_version", "pipemare_anneal_updates", "pipemare_decay"}, "an asynchronous method's option with another schedule", bad,
      [](const Facts& f) { return pipelined(f) && foreign_async_option(f) != nullptr; },
      [](const Facts& f, const Names& n) {
        const AsyncOption& o = *foreign_async_option(f);
        return "option " + n(o.key) + " applies to schedule " + o.owner_name + " only, not to '" + f.schedule + "'";
      }));
}

// Sequence slices.
void add_sequence_slices_rules(std::vector<Capability>& t) {
  t.push_back(rule(
      "seq-slices-schedule", T, {"seq_slices", "schedule"}, "sequence slices with a schedule that does not slice", bad,
      [](const Facts& f) { return pipelined(f) && f.seq_slices != f.schedule_seq_slices; },
      [](const Facts& f, const Names& n) {
        if (f.schedule == "custom")
          return n("schedule_text") + " has seq_slices " + std::to_string(f.schedule_seq_slices) + ", " +
                 n("seq_slices") + " is " + std::to_string(f.seq_slices);
        return f.schedule + " does not slice sequences: " + n("seq_slices") + " must be 1, got " +
               std::to_string(f.seq_slices) + " (" + slicing_schedules() + " takes " + n("seq_slices") + " > 1)";
      }));
  t.push_back(rule(
      "seq-slices-policy", T, {"seq_slices", "activation_policy"}, "sequence slices with an activation policy", bad,
      [](const Facts& f) { return pipelined(f) && f.seq_slices > 1 && f.policy != ActivationPolicy::kNone; },
      [](const Facts& f, const Names& n) {
        return n("seq_slices") + " " + std::to_string(f.seq_slices) + " needs " + n("activation_policy") +
               " none, got '" + policy_name(f) +
               "' (a slice's context holds the keys and values later slices read)";
      }));
  t.push_back(rule(
      "seq-slices-threads", T, {"seq_slices", "replicas", "world"},
      "sequence slices with data parallelism or one process per rank", bad,
      [](const Facts& f) {
        return pipelined(f) && f.seq_slices > 1 && (f.replicas > 1 || f.placement == RankPlacement::kProcesses);
      },
      [](const Facts& f, const Names& n) {
        return n("seq_slices") + " " + std::to_string(f.seq_slices) +
               " runs every rank as a thread of one process with one replica (replicas " + std::to_string(f.replicas) +
               (f.placement == RankPlacement::kProcesses ? ", a world of processes)" : ")");
      }));
  t.push_back(rule(
      "seq-slices-cpu", T, {"seq_slices", "devices"}, "sequence slices on GPUs", bad,
      [](const Facts& f) { return pipelined(f) && f.seq_slices > 1 && f.placement == RankPlacement::kGpu; },
      [](const Facts& f, const Names& n) {
        return n("seq_slices") + " " + std::to_string(f.seq_slices) + " runs on the CPU only; " + n("devices") +
               " names a CUDA device";
      }));
  t.push_back(rule(
      "seq-slices-tokens", T, {"seq_slices"}, "sequence slices of a model that reads features", bad,
      [](const Facts& f) { return pipelined(f) && f.seq_slices > 1 && !f.token_model; },
      [](const Facts& f, const Names& n) {
        return n("seq_slices") + " " + std::to_string(f.seq_slices) +
               " slices token sequences; this model reads features (use a token model such as the GPT)";
      }));
  t.push_back(rule(
      "seq-slices-length", T, {"seq_slices"}, "sequence slices that do not divide the sequence", bad,
      [](const Facts& f) {
        return pipelined(f) && f.seq_slices > 1 && f.token_model && f.seq_len % f.seq_slices != 0;
      },
      [](const Facts& f, const Names& n) {
        return n("seq_slices") + " " + std::to_string(f.seq_slices) + " must divide the model's seq_len " +
               std::to_string(f.seq_len);
      }));
}

// Adaptation.
void add_adaptation_rules(std::vector<Capability>& t) {
  t.push_back(rule(
      "adaptation-schedule", T, {"adapt", "schedule"}, "adaptation with an asynchronous, local or two-pipeline schedule",
      bad, [](const Facts& f) { return pipelined(f) && f.adapt && (f.traits.windowed() || f.pipelines > 1); },
      [](const Facts& f, const Names& n) {
        return n("adapt") + " is not supported with schedule '" + f.schedule +
               "': it needs a synchronous schedule with one pipeline";
      }));
  t.push_back(rule(
      "adaptation-replicas", T, {"adapt", "replicas"}, "adaptation with data parallelism", bad,
      [](const Facts& f) { return pipelined(f) && f.adapt && f.replicas > 1; },
      [](const Facts& f, const Names& n) {
        return n("adapt") + " is not supported with " + n("replicas") + " " + std::to_string(f.replicas) + " yet";
      }));
}

// Bubble filling.
void add_fill_rules(std::vector<Capability>& t) {
  t.push_back(rule(
      "sequential-fill", T, {"fill"}, "a fill job without a pipeline", bad,
      [](const Facts& f) { return sequential(f) && f.fill; },
      [](const Facts&, const Names& n) {
        return n("fill") + " runs in a pipeline's bubbles and needs a synchronous schedule (" + n("schedule") +
               ", e.g. 1f1b); no schedule is set";
      }));
  t.push_back(rule(
      "fill-schedule", T, {"fill", "schedule"}, "a fill job with an asynchronous or local schedule", bad,
      [](const Facts& f) { return pipelined(f) && f.fill && f.traits.windowed(); },
      [](const Facts& f, const Names& n) {
        return n("fill") + " is not supported with schedule '" + f.schedule + "' (" + family(f) +
               "): it fills the bubbles a synchronous schedule's timeline measured";
      }));
  t.push_back(rule(
      "fill-placement", T, {"fill", "world", "devices"}, "a fill job with ranks in processes or on GPUs", bad,
      [](const Facts& f) { return pipelined(f) && f.fill && f.placement != RankPlacement::kThreads; },
      [](const Facts& f, const Names& n) {
        return n("fill") + " runs with the ranks as CPU threads of one process; " +
               (f.placement == RankPlacement::kProcesses ? std::string("with one process per rank (") + n("world") + ")"
                                                         : "with the ranks on " + f.first_cuda_device + " (" +
                                                               n("devices") + ")") +
               " it is not supported yet";
      }));
}

// Data parallelism.
void add_data_parallelism_rules(std::vector<Capability>& t) {
  t.push_back(rule(
      "replicas-processes", T, {"replicas", "world"}, "data parallelism with the ranks as threads", bad,
      [](const Facts& f) {
        return pipelined(f) && f.replicas > 1 && (f.placement != RankPlacement::kProcesses || !f.data_parallel_world);
      },
      [](const Facts& f, const Names& n) {
        return n("replicas") + " " + std::to_string(f.replicas) +
               " with a schedule needs one process per rank: launch D x P processes, e.g. mpirun -np " +
               std::to_string(f.replicas * f.ranks);
      }));
}

// Tensor parallelism (docs/EXECUTION.md, "Tensor parallelism"): on the CPU, one member per process
// (or per thread with its own sequential trainer); with a synchronous pipeline schedule, one process
// per rank, member and replica (T x P x D).
void add_tensor_parallel_rules(std::vector<Capability>& t) {
  const auto split = [](const Facts& f) { return f.tensor_parallel > 1; };
  const auto tp = [](const Facts& f, const Names& n) {
    return n("tensor_parallel") + " " + std::to_string(f.tensor_parallel);
  };
  t.push_back(rule(
      "tensor-parallel-world", T, {"tensor_parallel", "tensor_parallel_world"},
      "tensor parallelism without its group of members", bad,
      [split](const Facts& f) { return split(f) && !f.tensor_parallel_world; },
      [tp](const Facts& f, const Names& n) {
        return tp(f, n) + " needs its group of " + std::to_string(f.tensor_parallel) +
               " members: one process each, e.g. mpirun -np " + std::to_string(f.tensor_parallel);
      }));
  t.push_back(rule(
      "tensor-parallel-threads", T, {"tensor_parallel", "schedule", "world"},
      "tensor parallelism with the pipeline's ranks as threads", bad,
      [split](const Facts& f) { return split(f) && pipelined(f) && f.placement != RankPlacement::kProcesses; },
      [tp](const Facts& f, const Names& n) {
        return tp(f, n) + " with a pipeline schedule needs one process per rank, member and replica: mpirun -np " +
               std::to_string(f.tensor_parallel * f.ranks * f.replicas);
      }));
  t.push_back(rule(
      "tensor-parallel-windowed", T, {"tensor_parallel", "schedule"},
      "tensor parallelism with an asynchronous or local schedule", later,
      [split](const Facts& f) { return split(f) && pipelined(f) && f.traits.windowed(); },
      [tp](const Facts& f, const Names& n) {
        return tp(f, n) + " with " + family(f) + " is not supported yet (synchronous schedules only)";
      }));
  t.push_back(rule(
      "tensor-parallel-neuron-groups", T, {"tensor_parallel", "neuron_groups"},
      "tensor parallelism with neuron groups", later,
      [split](const Facts& f) { return split(f) && f.neuron_groups > 1; },
      [tp](const Facts& f, const Names& n) {
        return tp(f, n) + " with " + n("neuron_groups") + " " + std::to_string(f.neuron_groups) +
               " is not supported yet";
      }));
  t.push_back(rule(
      "tensor-parallel-adapt", T, {"tensor_parallel", "adapt"}, "tensor parallelism with fail-slow adaptation", later,
      [split](const Facts& f) { return split(f) && f.adapt; },
      [tp](const Facts& f, const Names& n) {
        return tp(f, n) + " with " + n("adapt") + " is not supported yet (a re-partition would move split layers)";
      }));
  t.push_back(rule(
      "tensor-parallel-overlap-steps", T, {"tensor_parallel", "overlap_steps"},
      "tensor parallelism with overlapping steps", later,
      [split](const Facts& f) { return split(f) && f.overlap_steps; },
      [tp](const Facts& f, const Names& n) {
        return tp(f, n) + " with " + n("overlap_steps") + " is not supported yet";
      }));
  t.push_back(rule(
      "tensor-parallel-tied-stages", T, {"tensor_parallel", "schedule"},
      "tensor parallelism with parameters tied across pipeline stages", later,
      [split](const Facts& f) { return split(f) && pipelined(f) && f.tied_parameters; },
      [tp](const Facts& f, const Names& n) {
        return tp(f, n) + " with a pipeline schedule and tied parameters (tie_embeddings) is not supported yet";
      }));
  t.push_back(rule(
      "tensor-parallel-replicas", T, {"tensor_parallel", "replicas"},
      "tensor parallelism with data parallelism and no schedule", bad,
      [split](const Facts& f) { return split(f) && !pipelined(f) && f.replicas > 1; },
      [tp](const Facts& f, const Names& n) {
        return tp(f, n) + " with " + n("replicas") + " " + std::to_string(f.replicas) +
               " runs under a pipeline schedule (" + n("schedule") + "), one process per rank, member and replica";
      }));
  t.push_back(rule(
      "sequence-parallel-without-tensor-parallel", T, {"sequence_parallel", "tensor_parallel"},
      "sequence parallelism without tensor parallelism", bad,
      [](const Facts& f) { return f.sequence_parallel && f.tensor_parallel <= 1; },
      [](const Facts& f, const Names& n) {
        return n("sequence_parallel") + " splits the activations across the tensor-parallel group; it needs " +
               n("tensor_parallel") + " > 1, got " + std::to_string(f.tensor_parallel);
      }));
}

// Asynchronous and local-learning schedules.
void add_windowed_rules(std::vector<Capability>& t) {
  t.push_back(rule(
      "windowed-replicas", T, {"schedule", "replicas"}, "data parallelism with an asynchronous or local schedule", bad,
      [](const Facts& f) { return pipelined(f) && f.traits.windowed() && f.replicas > 1; },
      [](const Facts& f, const Names&) {
        return family(f) + " with " + std::to_string(f.replicas) +
               " data-parallel replicas is not supported (each stage updates itself; replicas 1)";
      }));
  t.push_back(rule(
      "windowed-clipping", T, {"schedule", "clip_norm"}, "gradient clipping with an asynchronous or local schedule",
      bad, [](const Facts& f) { return pipelined(f) && f.traits.windowed() && f.clip_norm != 0.0f; },
      [](const Facts& f, const Names& n) {
        return n("clip_norm") + " " + num(f.clip_norm) + " cannot apply to " + family(f) +
               ": each stage updates on its own, so there is no global gradient norm (use clip_norm 0)";
      }));
  t.push_back(rule(
      "windowed-lr-schedule", T, {"schedule", "lr_schedule"}, "a learning-rate schedule with an asynchronous or local schedule",
      bad, [](const Facts& f) { return pipelined(f) && f.traits.windowed() && !f.constant_lr; },
      [](const Facts& f, const Names&) {
        return "learning-rate schedule '" + f.lr_schedule + "' (warm-up " + std::to_string(f.warmup_steps) +
               " steps) is not supported with " + family(f) +
               " yet: its stages update per micro-batch with their own rates (use a constant one)";
      }));
  t.push_back(rule(
      "local-policy", T, {"schedule", "activation_policy"}, "an activation policy with local learning", bad,
      [](const Facts& f) { return pipelined(f) && f.traits.local_learning() && f.policy != ActivationPolicy::kNone; },
      [](const Facts& f, const Names&) {
        return "activation policy '" + policy_name(f) + "' cannot apply to " + family(f) +
               ": each stage's backward runs right after its forward and head (use activation policy none)";
      }));
  t.push_back(rule(
      "async-recompute", T, {"schedule", "activation_policy"}, "recompute with an asynchronous schedule that keeps no weights",
      bad,
      [](const Facts& f) {
        return pipelined(f) && f.traits.asynchronous() && f.policy == ActivationPolicy::kRecompute &&
               !f.traits.stashes_weights;
      },
      [](const Facts& f, const Names&) {
        return "activation policy 'recompute' cannot apply to " + family(f) +
               ": it keeps no copy of the weights a forward used, so a recomputed forward would not rebuild its "
               "activations (recompute works with " + stashing_schedules() + ")";
      }));
  t.push_back(rule(
      "async-policy", T, {"schedule", "activation_policy"}, "offloading with an asynchronous schedule", bad,
      [](const Facts& f) {
        return pipelined(f) && f.traits.asynchronous() && f.policy != ActivationPolicy::kNone &&
               f.policy != ActivationPolicy::kRecompute;
      },
      [](const Facts& f, const Names&) {
        return "activation policy '" + policy_name(f) + "' cannot apply to " + family(f) +
               ": its micro-batches stay in flight across steps (use none, or recompute with " + stashing_schedules() +
               ")";
      }));
  t.push_back(rule(
      "windowed-gpu", T, {"schedule", "devices"}, "asynchronous or local schedules on GPUs", later,
      [](const Facts& f) { return pipelined(f) && f.traits.windowed() && on_gpus(f); },
      [](const Facts& f, const Names&) {
        return "pipeline trainer: " + family(f) + " on CUDA devices is not supported yet; run it on the CPU";
      }));
}

// Local learning with neuron groups (runtime/neuron_groups).
bool grouped(const Facts& f) { return f.neuron_groups > 1; }
void add_neuron_group_rules(std::vector<Capability>& t) {
  t.push_back(rule(
      "neuron-groups-schedule", T, {"neuron_groups", "schedule"}, "neuron groups without a local-learning schedule", bad,
      [](const Facts& f) { return grouped(f) && !(pipelined(f) && f.traits.local_learning()); },
      [](const Facts& f, const Names& n) {
        return n("neuron_groups") + " " + std::to_string(f.neuron_groups) +
               " splits local learning's stages by width: it needs a local-learning schedule (" + n("schedule") + " " +
               local_schedules() + ")" + (f.pipelined ? ", not '" + f.schedule + "'" : ", and no schedule is set");
      }));
  t.push_back(rule(
      "group-diversity-groups", T, {"group_diversity", "neuron_groups"}, "the diversity term without neuron groups", bad,
      [](const Facts& f) { return f.group_diversity && !grouped(f); },
      [](const Facts&, const Names& n) {
        return n("group_diversity") + " and " + n("group_diversity_temperature") +
               " weigh the disagreement of a stage's width groups: they need " + n("neuron_groups") + " >= 2";
      }));
  t.push_back(rule(
      "neuron-groups-model", T, {"neuron_groups"}, "neuron groups of a token model", later,
      [](const Facts& f) { return grouped(f) && f.token_model; },
      [](const Facts&, const Names& n) {
        return n("neuron_groups") + " splits linear layers by width and supports feature models (MLPs) only yet; "
               "this model takes tokens";
      }));
  t.push_back(rule(
      "neuron-groups-slow-rank", T, {"neuron_groups", "slow_rank", "slow_factor"}, "a slowed rank with neuron groups", bad,
      [](const Facts& f) { return grouped(f) && f.slow_factor != 1.0; },
      [](const Facts&, const Names& n) {
        return n("slow_rank") + " and " + n("slow_factor") + " slow a rank of the pipeline trainer; " +
               n("neuron_groups") + " runs its own ranks";
      }));
}

// Overlapping steps (TrainingConfig::overlap_steps): what ends a step on every rank together.
bool overlapped(const Facts& f) { return f.overlap_steps && f.pipelined; }
void add_overlap_rules(std::vector<Capability>& t) {
  t.push_back(rule(
      "overlap-sequential", T, {"overlap_steps", "schedule"}, "overlapping steps without a schedule", bad,
      [](const Facts& f) { return f.overlap_steps && !f.pipelined; },
      [](const Facts&, const Names& n) {
        return n("overlap_steps") + " overlaps the consecutive steps of a pipeline schedule; no " + n("schedule") +
               " is set";
      }));
  t.push_back(rule(
      "overlap-windowed", T, {"overlap_steps", "schedule"}, "overlapping steps of a schedule that never flushes", bad,
      [](const Facts& f) { return overlapped(f) && f.traits.windowed(); },
      [](const Facts& f, const Names& n) {
        return n("overlap_steps") + " applies to synchronous schedules: " + family(f) +
               " never flushes, so its steps overlap already";
      }));
  t.push_back(rule(
      "overlap-replicas", T, {"overlap_steps", "replicas"}, "overlapping steps with data parallelism", later,
      [](const Facts& f) { return overlapped(f) && f.replicas > 1; },
      [](const Facts& f, const Names& n) {
        return n("overlap_steps") + " with " + n("replicas") + " " + std::to_string(f.replicas) +
               ": the replicas reduce each step's gradients before any rank updates, which ends the step on every "
               "rank together; not supported yet";
      }));
  t.push_back(rule(
      "overlap-policy", T, {"overlap_steps", "activation_policy"}, "overlapping steps with an activation policy", later,
      [](const Facts& f) { return overlapped(f) && f.policy != ActivationPolicy::kNone; },
      [](const Facts& f, const Names& n) {
        return n("overlap_steps") + " with " + n("activation_policy") + " '" + policy_name(f) +
               "': the activation stores and their copy lane are emptied and checked at the end of every step, on "
               "every rank together; not supported yet (use none)";
      }));
  t.push_back(rule(
      "overlap-gpu", T, {"overlap_steps", "devices"}, "overlapping steps on CUDA devices", later,
      [](const Facts& f) { return overlapped(f) && f.cuda_devices > 0; },
      [](const Facts& f, const Names& n) {
        return n("overlap_steps") + " runs CPU ranks only yet; " + n("devices") + " names " + f.first_cuda_device;
      }));
  t.push_back(rule(
      "overlap-fill", T, {"overlap_steps", "fill"}, "overlapping steps with bubble filling", later,
      [](const Facts& f) { return overlapped(f) && f.fill; },
      [](const Facts&, const Names& n) {
        return n("overlap_steps") + " with a fill job (" + n("fill") +
               "): filling plans each step's bubbles from the last step's timeline, whose bubbles overlapping "
               "closes; not supported yet";
      }));
  t.push_back(rule(
      "overlap-adapt", T, {"overlap_steps", "adapt"}, "overlapping steps with adaptation", later,
      [](const Facts& f) { return overlapped(f) && f.adapt; },
      [](const Facts&, const Names& n) {
        return n("overlap_steps") + " with " + n("adapt") +
               ": adaptation moves the pipeline between steps through a checkpoint; not supported yet";
      }));
  t.push_back(rule(
      "overlap-two-pipelines", T, {"overlap_steps", "schedule"}, "overlapping steps of two pipelines", later,
      [](const Facts& f) { return overlapped(f) && f.pipelines > 1; },
      [](const Facts& f, const Names& n) {
        return n("overlap_steps") + " with " + family(f) +
               ": the two copies of the model update together after every step; not supported yet";
      }));
}

// Weight tying (Parameter::tied_to): the pair's gradients are summed at the step's barrier
// (exec::TiedGradients), on CPU gradients.
bool tied(const Facts& f) { return f.tied_parameters && f.pipelined; }
void add_tied_rules(std::vector<Capability>& t) {
  t.push_back(rule(
      "tied-windowed", T, {"schedule"}, "tied weights with a schedule that updates inside its steps", later,
      [](const Facts& f) { return tied(f) && (f.traits.windowed() || f.traits.local_learning()); },
      [](const Facts& f, const Names& n) {
        return "the model ties weights across stages (e.g. the head to the token embedding), whose gradients are "
               "summed when every rank has finished a step; " + n("schedule") + " " + family(f) +
               " updates stages on their own; not supported yet";
      }));
  t.push_back(rule(
      "tied-overlap", T, {"overlap_steps"}, "tied weights with overlapping steps", later,
      [](const Facts& f) { return tied(f) && f.overlap_steps; },
      [](const Facts&, const Names& n) {
        return n("overlap_steps") + ": the model ties weights across stages, whose gradients are summed when every "
               "rank has finished a step; not supported yet";
      }));
  t.push_back(rule(
      "tied-gpu", T, {"devices"}, "tied weights across pipeline stages on CUDA devices", later,
      [](const Facts& f) { return tied(f) && f.cuda_devices > 0; },
      [](const Facts& f, const Names& n) {
        return n("devices") + " names " + f.first_cuda_device +
               ": weights tied across pipeline stages (the head tied to the token embedding) are summed between "
               "the ranks on the CPU only yet (one device, without a schedule, sums them on the device)";
      }));
  t.push_back(rule(
      "tied-neuron-groups", T, {"neuron_groups"}, "tied weights with neuron groups", later,
      [](const Facts& f) { return f.tied_parameters && f.neuron_groups > 1; },
      [](const Facts&, const Names& n) {
        return n("neuron_groups") + " with a model that ties weights; not supported yet";
      }));
}

// Placement.
void add_placement_rules(std::vector<Capability>& t) {
  t.push_back(rule(
      "processes-measured-policy", T, {"world", "activation_policy"}, "selective or balance with one process per rank",
      later,
      [](const Facts& f) { return pipelined(f) && f.placement == RankPlacement::kProcesses && measured_policy(f); },
      [](const Facts& f, const Names&) {
        return "pipeline trainer: activation policy '" + policy_name(f) +
               "' is planned from every stage's measured bytes, which one process per rank cannot measure yet; use "
               "none, recompute, offload-host or offload-file";
      }));
  t.push_back(rule(
      "gpu-policy", T, {"devices", "activation_policy", "offload_dir"}, "the file tier or balance on GPUs", later,
      [](const Facts& f) {
        return pipelined(f) && on_gpus(f) && (file_tier(f) || f.policy == ActivationPolicy::kBalance);
      },
      [](const Facts& f, const Names&) {
        return "pipeline trainer: activation policy '" + policy_name(f) + "'" +
               (file_tier(f) && f.policy == ActivationPolicy::kSelective ? " with offload_dir" : "") +
               " is not supported on CUDA devices yet: use offload-host, selective without offload_dir, recompute "
               "or none";
      }));
}

// Two pipelines (bitpipe).
void add_two_pipeline_rules(std::vector<Capability>& t) {
  t.push_back(rule(
      "two-pipelines-gpu", T, {"schedule", "devices"}, "two copies of the model on GPUs", later,
      [](const Facts& f) { return pipelined(f) && f.pipelines > 1 && on_gpus(f); },
      [](const Facts& f, const Names&) {
        return "pipeline trainer: schedule '" + f.schedule +
               "' trains two copies of the model (pipelines 2) on the CPU only yet";
      }));
  t.push_back(rule(
      "two-pipelines-replicas", T, {"schedule", "replicas"}, "two copies of the model with data parallelism", bad,
      [](const Facts& f) { return pipelined(f) && f.pipelines > 1 && f.replicas > 1; },
      [](const Facts& f, const Names&) {
        return "replicas " + std::to_string(f.replicas) + ": schedule '" + f.schedule +
               "' trains two copies of the model (pipelines 2), which is data parallelism of its own; use replicas 1";
      }));
  t.push_back(rule(
      "two-pipelines-measured-policy", T, {"schedule", "activation_policy"}, "selective or balance with two copies",
      later, [](const Facts& f) { return pipelined(f) && f.pipelines > 1 && measured_policy(f); },
      [](const Facts& f, const Names&) {
        return "pipeline trainer: activation policy '" + policy_name(f) + "' with schedule '" + f.schedule +
               "', which trains two copies of the model (pipelines 2), is not supported yet; use none, recompute, "
               "offload-host or offload-file";
      }));
}

// Evaluation and checkpoints.
void add_operation_rules(std::vector<Capability>& t) {
  t.push_back(rule(
      "evaluate-windowed", Operation::kEvaluate, {"schedule"}, "evaluation with an asynchronous or local schedule", state,
      [](const Facts& f) { return pipelined(f) && f.traits.windowed() && !grouped(f); },
      [](const Facts& f, const Names&) {
        return "evaluation is not supported with " + family(f) +
               " yet: it keeps micro-batches in flight between steps (evaluation runs with synchronous schedules)";
      }));
  t.push_back(rule(
      "checkpoint-state", Operation::kCheckpoint, {"schedule"}, "checkpoints of a schedule whose state is not saved yet",
      state,  // code_for_checkpoint() below: unimplemented for an asynchronous method's state
      [](const Facts& f) { return pipelined(f) && !f.traits.checkpointable(); },
      [](const Facts& f, const Names&) {
        return "checkpoints of " + family(f) + " are not supported yet (" + f.traits.checkpoint_refusal + ")";
      }));
  t.push_back(rule(
      "checkpoint-two-pipelines-processes", Operation::kLoadCheckpoint, {"schedule", "world"},
      "resuming two copies of the model with one process per rank", later,
      [](const Facts& f) { return pipelined(f) && f.pipelines > 1 && f.placement == RankPlacement::kProcesses; },
      [](const Facts& f, const Names&) {
        return "schedule '" + f.schedule +
               "' (two copies of the model) with one process per rank cannot resume from a checkpoint yet";
      }));
  t.push_back(rule(
      "periodic-checkpoint-windowed", Operation::kPeriodicCheckpoint, {"schedule"},
      "checkpoints every N steps with an asynchronous or local schedule", bad,
      [](const Facts& f) { return pipelined(f) && f.traits.windowed(); },
      [](const Facts& f, const Names&) {
        return "periodic checkpoints are not supported with " + family(f) +
               " yet: its micro-batches stay in flight between steps (it checkpoints at the end)";
      }));
}

std::vector<Capability> make_table() {
  std::vector<Capability> t;
  add_sequential_rules(t);
  add_schedule_rules(t);
  add_sequence_slices_rules(t);
  add_adaptation_rules(t);
  add_fill_rules(t);
  add_data_parallelism_rules(t);
  add_tensor_parallel_rules(t);
  add_windowed_rules(t);
  add_neuron_group_rules(t);
  add_overlap_rules(t);
  add_tied_rules(t);
  add_placement_rules(t);
  add_two_pipeline_rules(t);
  add_operation_rules(t);
  return t;
}

// An asynchronous method's unsaved state is unimplemented; local learning's heads are the
// trainer's state (kFailedPrecondition, as since 0.4).
ErrorCode code_of(const Capability& c, const Facts& f) {
  if (c.id == "checkpoint-state" && f.traits.asynchronous()) return ErrorCode::kUnimplemented;
  return c.code;
}

}  // namespace

const char* operation_name(Operation operation) {
  switch (operation) {
    case Operation::kTrain: return "train";
    case Operation::kEvaluate: return "evaluate";
    case Operation::kCheckpoint: return "checkpoint";
    case Operation::kLoadCheckpoint: return "resume";
    case Operation::kPeriodicCheckpoint: return "periodic checkpoints";
  }
  return "?";
}

std::string runtime_option_name(const std::string& key) { return key; }

const std::vector<Capability>& capability_table() {
  static const std::vector<Capability> table = make_table();
  return table;
}

Refusal find_refusal(const CapabilityFacts& facts, Operation operation, const OptionNamer& names) {
  for (const Capability& c : capability_table()) {
    const bool applies = c.operation == operation ||
                         (operation == Operation::kLoadCheckpoint && c.operation == Operation::kCheckpoint);
    if (applies && c.refuses(facts)) return {code_of(c, facts), c.message(facts, names)};
  }
  return {};
}

void check_capabilities(const CapabilityFacts& facts, Operation operation, const OptionNamer& names) {
  const Refusal r = find_refusal(facts, operation, names);
  if (r.refused()) throw Error(r.code, r.message);
}

std::string capabilities_text() {
  std::ostringstream out;
  out << "What PipeForge refuses to combine: one rule a line, with the options it names and the error code\n"
         "of the refusal (docs/CAPABILITIES.md).\n";
  size_t width = 0;
  for (const Capability& c : capability_table()) width = std::max(width, c.summary.size());
  bool first = true;
  Operation last = Operation::kTrain;
  for (const Capability& c : capability_table()) {
    if (first || c.operation != last) out << "\n" << operation_name(c.operation) << ":\n";
    first = false;
    last = c.operation;
    std::string options;
    for (const std::string& o : c.options) options += (options.empty() ? "" : ", ") + o;
    const std::string code = error_code_name(c.code);
    out << "  " << c.summary << std::string(width - c.summary.size() + 2, ' ') << code
        << std::string(code.size() < 20 ? 20 - code.size() : 1, ' ') << "(" << options << ")\n";
  }
  return out.str();
}

std::string capabilities_markdown() {
  std::ostringstream out;
  out << "# What may combine with what\n\n"
      << "Generated from the capability table (`runtime/run/capabilities.cc`) by `pipeforge train "
         "--capabilities --markdown`; a test keeps this file equal to it. Each row is a combination PipeForge "
         "refuses, with the operation it guards, the options it concerns and the error code of the refusal, "
         "whose message names the options as the front-end spells them.\n\n"
      << "| operation | refused | options | code | rule |\n| --- | --- | --- | --- | --- |\n";
  for (const Capability& c : capability_table()) {
    std::string options;
    for (const std::string& o : c.options) options += (options.empty() ? "`" : ", `") + o + "`";
    out << "| " << operation_name(c.operation) << " | " << c.summary << " | " << options << " | "
        << error_code_name(c.code) << " | `" << c.id << "` |\n";
  }
  out << "\n## Config keys\n\n"
      << "Every option as a key/value entry (C: `pf_trainer_options.config_entries`, since 0.11; Python: "
         "`Trainer(..., config={...})`; Java: `TrainerOptions.set`; Go: `TrainerOptions.Config`). Entries are "
         "applied after the struct's fields, so they win; a new option arrives as a new key.\n\n"
      << config_keys_markdown();
  return out.str();
}

}  // namespace pf

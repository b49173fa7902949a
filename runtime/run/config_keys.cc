#include "runtime/run/config_keys.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <type_traits>

#include "runtime/core/error.h"
#include "runtime/core/suggest.h"
#include "runtime/tensor/device.h"

namespace pf {
namespace {

[[noreturn]] void bad_value(const std::string& key, const std::string& value, const std::string& expected) {
  fail(ErrorCode::kInvalidArgument, "config key '", key, "': '", value, "' is not ", expected);
}

int64_t parse_int(const std::string& key, const std::string& value, int64_t lo, int64_t hi) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || end != value.c_str() + value.size() || errno == ERANGE || v < lo || v > hi)
    bad_value(key, value, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

double parse_float(const std::string& key, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size() || errno == ERANGE || !std::isfinite(v))
    bad_value(key, value, "a finite number");
  return v;
}

bool parse_bool(const std::string& key, const std::string& value) {
  if (value == "true" || value == "1") return true;
  if (value == "false" || value == "0") return false;
  bad_value(key, value, "a bool (true, false, 1 or 0)");
}

std::vector<int> parse_int_list(const std::string& key, const std::string& value) {
  std::vector<int> out;
  std::stringstream in(value);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t b = item.find_first_not_of(' '), e = item.find_last_not_of(' ');
    out.push_back(static_cast<int>(parse_int(key, b == std::string::npos ? "" : item.substr(b, e - b + 1), 0,
                                             std::numeric_limits<int>::max())));
  }
  if (out.empty()) bad_value(key, value, "a comma-separated list of integers");
  return out;
}

using Set = std::function<void(TrainingConfig&, const std::string&, const std::string&)>;

ConfigKey key(const char* name, const char* type, const char* summary, Set set) {
  const std::string k = name;
  return ConfigKey{k, type, summary, [k, set](TrainingConfig& c, const std::string& v) { set(c, k, v); }};
}

// Setters for the common types, writing through `field`.
template <typename Field>
Set int_field(Field field, int64_t lo, int64_t hi) {
  return [field, lo, hi](TrainingConfig& c, const std::string& k, const std::string& v) {
    field(c) = static_cast<std::remove_reference_t<decltype(field(c))>>(parse_int(k, v, lo, hi));
  };
}
template <typename Field>
Set float_field(Field field) {
  return [field](TrainingConfig& c, const std::string& k, const std::string& v) {
    field(c) = static_cast<std::remove_reference_t<decltype(field(c))>>(parse_float(k, v));
  };
}
template <typename Field>
Set bool_field(Field field) {
  return [field](TrainingConfig& c, const std::string& k, const std::string& v) { field(c) = parse_bool(k, v); };
}
template <typename Field>
Set string_field(Field field) {
  return [field](TrainingConfig& c, const std::string&, const std::string& v) { field(c) = v; };
}

constexpr int64_t kMaxInt = std::numeric_limits<int>::max();

std::vector<ConfigKey> make_keys() {
  using C = TrainingConfig;
  return {
      // ---- Optimizer, data split, initialisation.
      key("micro_batches", "int", "micro-batches per step (per replica)",
          int_field([](C& c) -> int& { return c.base.micro_batches; }, 1, kMaxInt)),
      key("replicas", "int", "data-parallel replicas D",
          int_field([](C& c) -> int& { return c.base.replicas; }, 1, kMaxInt)),
      key("seed", "int", "seed of the initial parameters",
          int_field([](C& c) -> uint64_t& { return c.base.seed; }, 0, std::numeric_limits<int64_t>::max())),
      key("blas_threads", "int", "BLAS threads per worker",
          int_field([](C& c) -> int& { return c.base.blas_threads; }, 1, 1024)),
      key("optimizer", "one of adamw, sgd", "the optimizer",
          [](C& c, const std::string& k, const std::string& v) {
            if (v == "adamw") c.base.optimizer.kind = OptimizerConfig::Kind::kAdamW;
            else if (v == "sgd") c.base.optimizer.kind = OptimizerConfig::Kind::kSgd;
            else bad_value(k, v, "adamw or sgd");
          }),
      key("lr", "float", "learning rate", float_field([](C& c) -> float& { return c.base.optimizer.lr; })),
      key("momentum", "float", "SGD momentum", float_field([](C& c) -> float& { return c.base.optimizer.momentum; })),
      key("weight_decay", "float", "weight decay",
          float_field([](C& c) -> float& { return c.base.optimizer.weight_decay; })),
      key("clip_norm", "float", "global gradient-norm clip (0: off)",
          float_field([](C& c) -> float& { return c.base.optimizer.clip_norm; })),
      key("lr_schedule", "one of constant, cosine, linear", "learning-rate schedule",
          [](C& c, const std::string&, const std::string& v) { c.base.lr_schedule.kind = parse_lr_schedule_kind(v); }),
      key("warmup_steps", "int", "steps of linear warm-up",
          int_field([](C& c) -> int64_t& { return c.base.lr_schedule.warmup_steps; }, 0,
                    std::numeric_limits<int64_t>::max())),
      // ---- Schedule.
      key("schedule", "string", "a registered schedule name (\"\": the sequential trainer)",
          string_field([](C& c) -> std::string& { return c.schedule; })),
      key("schedule_text", "string", "a schedule in the text form",
          string_field([](C& c) -> std::string& { return c.schedule_text; })),
      key("ranks", "int", "pipeline ranks P", int_field([](C& c) -> int& { return c.ranks; }, 1, kMaxInt)),
      key("chunks", "int", "model chunks per rank V (0: the schedule's default, 2 looped or V, else 1)", int_field([](C& c) -> int& { return c.chunks; }, 0, kMaxInt)),
      key("seq_slices", "int", "sequence slices per micro-batch",
          int_field([](C& c) -> int& { return c.seq_slices; }, 1, kMaxInt)),
      // ---- Model split.
      key("layers_per_stage", "int list", "top-level layers per stage (\"3,4\")",
          [](C& c, const std::string& k, const std::string& v) { c.layers_per_stage = parse_int_list(k, v); }),
      key("partition", "one of params, even", "the split when layers_per_stage is empty (default params)",
          [](C& c, const std::string& k, const std::string& v) {
            if (v == "params") c.partition = PartitionKind::kParameters;
            else if (v == "even") c.partition = PartitionKind::kEven;
            else bad_value(k, v, "params (balanced parameter counts) or even (balanced layer counts)");
          }),
      // ---- Placement.
      key("devices", "string",
          "cpu, cuda:N, or one device per rank (\"cuda:0,cuda:1\"); one process per rank: \"cuda\", each its "
          "node-local GPU",
          [](C& c, const std::string&, const std::string& v) { c.devices = parse_device_list(v); }),
      key("cpu_affinity", "int list", "CPU of each worker thread (rank r: entry r % size)",
          [](C& c, const std::string& k, const std::string& v) { c.cpu_affinity = parse_int_list(k, v); }),
      // ---- Activation memory.
      key("activation_policy", "string", "none, recompute, offload-host, offload-file, selective or balance",
          string_field([](C& c) -> std::string& { return c.activation_policy; })),
      key("activation_budget_bytes", "float", "selective: activation bytes per rank",
          float_field([](C& c) -> double& { return c.activation_budget_bytes; })),
      key("offload_dir", "string", "the file tier's folder", string_field([](C& c) -> std::string& { return c.offload_dir; })),
      // ---- Data parallel.
      key("gradient_reduction", "one of allreduce, deterministic", "how replicas' gradients are summed",
          [](C& c, const std::string& k, const std::string& v) {
            if (v != "allreduce" && v != "deterministic") bad_value(k, v, "allreduce or deterministic");
            c.gradient_reduction = v;
          }),
      // ---- Tensor parallel.
      key("tensor_parallel", "int", "tensor-parallel members T (1: none); the group is the process's world",
          int_field([](C& c) -> int& { return c.tensor_parallel; }, 1, kMaxInt)),
      key("tensor_reduction", "one of allreduce, deterministic", "how the tensor-parallel members' partial results are summed",
          [](C& c, const std::string& k, const std::string& v) {
            if (v != "allreduce" && v != "deterministic") bad_value(k, v, "allreduce or deterministic");
            c.tensor_reduction = v;
          }),
      key("sequence_parallel", "bool",
          "tensor parallel: split the activations between the split layers by sequence steps (Megatron's sequence "
          "parallelism)",
          bool_field([](C& c) -> bool& { return c.sequence_parallel; })),
      key("tensor_parallel_overlap", "bool",
          "tensor parallel: B's collective of a column split's input gradient runs while W computes (false: it "
          "blocks; the same bits)",
          bool_field([](C& c) -> bool& { return c.tensor_parallel_overlap; })),
      // ---- Asynchronous and local-learning schedules.
      key("vertical_sync", "bool", "pipedream: vertical sync",
          bool_field([](C& c) -> bool& { return c.async.vertical_sync; })),
      key("spectrain_version", "int", "spectrain: 1 or 2",
          int_field([](C& c) -> int& { return c.async.spectrain_version; }, 1, 2)),
      key("pipemare_anneal_updates", "int", "pipemare: updates over which lr anneals (0: none)",
          int_field([](C& c) -> int64_t& { return c.async.pipemare_anneal_updates; }, 0,
                    std::numeric_limits<int64_t>::max())),
      key("pipemare_decay", "float", "pipemare: decay of the discrepancy average, in [0, 1)",
          float_field([](C& c) -> float& { return c.async.pipemare_decay; })),
      key("local_head", "string", "local learning's heads: auto, linear, layernorm-linear or mlp",
          string_field([](C& c) -> std::string& { return c.local_head; })),
      key("neuron_groups", "int", "local learning: width groups of every stage but the last, one rank each (1: none)",
          int_field([](C& c) -> int& { return c.neuron_groups; }, 1, kMaxInt)),
      key("group_diversity", "float", "neuron groups: weight of the heads' diversity term (0: off)",
          float_field([](C& c) -> float& { return c.group_diversity; })),
      key("group_diversity_temperature", "float", "neuron groups: the diversity term's softmax temperature",
          float_field([](C& c) -> float& { return c.group_diversity_temperature; })),
      key("overlap_steps", "bool", "synchronous schedules: a rank starts the next step once its own part is done",
          bool_field([](C& c) -> bool& { return c.overlap_steps; })),
      // ---- Adaptation.
      key("adapt", "bool", "re-partition live when a rank turns fail-slow",
          bool_field([](C& c) -> bool& { return c.adaptation.enabled; })),
      key("adapt_threshold", "float", "how many times slower than predicted is slow (> 1)",
          float_field([](C& c) -> double& { return c.adaptation.threshold; })),
      key("adapt_patience", "int", "slow steps in a row before a move",
          int_field([](C& c) -> int& { return c.adaptation.patience; }, 1, kMaxInt)),
      key("slow_rank", "int", "test knob: the rank whose compute is slowed (-1: none)",
          int_field([](C& c) -> int& { return c.slow_rank; }, -1, kMaxInt)),
      key("slow_factor", "float", "test knob: how many times as long (>= 1)",
          float_field([](C& c) -> double& { return c.slow_factor; })),
      // ---- The runtime's knobs.
      key("recv_timeout_seconds", "float", "a rank waiting longer for a peer fails the step",
          float_field([](C& c) -> double& { return c.recv_timeout_seconds; })),
      key("mailbox_capacity", "int", "messages queued per rank pair",
          int_field([](C& c) -> int& { return c.mailbox_capacity; }, 1, kMaxInt)),
      key("spin_seconds", "float", "how long a waiting rank polls before it sleeps",
          float_field([](C& c) -> double& { return c.spin_seconds; })),
      key("record_timeline", "bool", "timestamp every action (last_timeline)",
          bool_field([](C& c) -> bool& { return c.record_timeline; })),
      key("rank_optimizer", "bool", "each CPU rank's worker steps its own parameters",
          bool_field([](C& c) -> bool& { return c.rank_optimizer; })),
      key("fill", "string", "a job for the bubbles: sweep:FILE (a packed MLP sweep, docs/SWEEP.md)",
          string_field([](C& c) -> std::string& { return c.fill; })),
  };
}

}  // namespace

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = make_keys();
  return keys;
}

void set_config_entry(TrainingConfig& config, const std::string& name, const std::string& value) {
  for (const ConfigKey& k : config_keys())
    if (k.key == name) return k.set(config, value);
  std::vector<std::string> known;
  for (const ConfigKey& k : config_keys()) known.push_back(k.key);
  fail(ErrorCode::kInvalidArgument, "unknown config key '", name, "'", did_you_mean(name, known),
       " (docs/CAPABILITIES.md lists the keys)");
}

std::string config_keys_markdown() {
  std::ostringstream out;
  out << "| key | type | what |\n| --- | --- | --- |\n";
  for (const ConfigKey& k : config_keys()) out << "| `" << k.key << "` | " << k.type << " | " << k.summary << " |\n";
  return out.str();
}

}  // namespace pf

// What may combine with what: one table of rules, each with the operation it guards, the options it
// concerns, its error code and its refusal message. resolve() checks the training rules once; the
// trainer checks the evaluation and checkpoint rules when asked to evaluate or save; the command
// line checks them all before a run starts. `pipeforge train --capabilities` prints the table and
// docs/CAPABILITIES.md is generated from it (tools/cli capabilities_test keeps the two equal).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/run/training_config.h"
#include "runtime/schedules/activation_policy.h"
#include "runtime/schedules/schedule_traits.h"

namespace pf {

// The operation a rule guards.
enum class Operation {
  kTrain,              // creating a trainer (resolve)
  kEvaluate,           // evaluation on held-out data
  kCheckpoint,         // saving or loading a checkpoint
  kLoadCheckpoint,     // loading one (after kCheckpoint's rules)
  kPeriodicCheckpoint  // checkpoints every N steps during a run
};
const char* operation_name(Operation operation);

// Where the ranks run.
enum class RankPlacement { kThreads, kProcesses, kGpu };

// The facts of one run that the rules read: the config's choices and what the schedule and the
// model are (capability_facts() fills them).
struct CapabilityFacts {
  bool pipelined = false;
  std::string schedule;                 // its name ("custom" for a schedule text)
  sched::ScheduleTraits traits;         // synchronous for the sequential trainer and schedule texts
  bool text_has_windowed_actions = false;  // a schedule text with UPDATE or HEAD actions
  int schedule_seq_slices = 1;          // what the schedule (text) slices
  int pipelines = 1;
  int ranks = 1, chunks = 1;            // as the config asks (the schedule's for a text)
  RankPlacement placement = RankPlacement::kThreads;
  int devices = 0;                      // entries of config.devices
  int cuda_devices = 0;                 // of which CUDA devices
  std::string first_cuda_device;       // "cuda:0"
  sched::ActivationPolicy policy = sched::ActivationPolicy::kNone;
  bool offload_dir = false;
  double activation_budget_bytes = 0;
  int replicas = 1;
  bool data_parallel_world = false;
  int seq_slices = 1;
  bool token_model = false;
  int64_t seq_len = 0;
  float clip_norm = 0;
  bool constant_lr = true;
  std::string lr_schedule;              // its kind's name
  int warmup_steps = 0;
  std::string local_head = "auto";
  int neuron_groups = 1;
  bool group_diversity = false;         // a diversity weight or temperature other than the defaults
  AsyncOptions async;
  bool adapt = false;
  double slow_factor = 1.0;
  bool fill = false;                    // a fill job: bubble_fill or fill set
  bool overlap_steps = false;
  bool tied_parameters = false;         // the model ties parameters (Parameter::tied_to)
  int tensor_parallel = 1;              // T: the config's, or the model's group's once split
  bool tensor_parallel_world = false;
  bool sequence_parallel = false;
};

// How a front-end spells an option: key is the TrainingConfig field ("replicas", "seq_slices",
// "activation_policy", "optimizer.clip_norm", ...). The runtime's own spelling is the key itself;
// the command line's is its flag (--data-parallel), the C API's "options-><field>".
using OptionNamer = std::function<std::string(const std::string& key)>;
std::string runtime_option_name(const std::string& key);

struct Capability {
  std::string id;           // "windowed-replicas"
  Operation operation;
  std::vector<std::string> options;  // the keys it concerns, for the printed table
  std::string summary;      // one line for --capabilities: what is refused
  ErrorCode code;
  std::function<bool(const CapabilityFacts&)> refuses;
  std::function<std::string(const CapabilityFacts&, const OptionNamer&)> message;
};

// The table, in the order its rules are checked.
const std::vector<Capability>& capability_table();

// Throws the first refusal of `operation`'s rules (kTrain: also every earlier rule of the
// sequential or pipelined trainer), naming options as `names` spells them.
void check_capabilities(const CapabilityFacts& facts, Operation operation,
                        const OptionNamer& names = runtime_option_name);
// The same, as (code, message): code kOk when nothing refuses.
struct Refusal {
  ErrorCode code = ErrorCode::kOk;
  std::string message;
  bool refused() const { return code != ErrorCode::kOk; }
};
Refusal find_refusal(const CapabilityFacts& facts, Operation operation, const OptionNamer& names = runtime_option_name);

// The table as text (`pipeforge train --capabilities`) and as Markdown (docs/CAPABILITIES.md).
std::string capabilities_text();
std::string capabilities_markdown();

}  // namespace pf

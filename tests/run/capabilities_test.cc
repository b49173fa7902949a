// The capability table (runtime/run/capabilities.h): every rule is reachable, refuses what its
// summary says with its own code, names its options as the caller spells them, and a plain run
// passes them all; make_trainer and resolve check it once, so the library refuses what the
// command line refuses.
#include "runtime/run/capabilities.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <string>

#include "runtime/models/builders.h"
#include "runtime/run/config_keys.h"
#include "runtime/run/make_trainer.h"
#include "runtime/run/resolve.h"
#include "runtime/schedules/generators.h"

namespace pf {
namespace {

// A 1f1b pipeline of 2 threads with nothing unusual: no rule refuses it.
CapabilityFacts plain() {
  CapabilityFacts f;
  f.pipelined = true;
  f.schedule = "1f1b";
  f.traits = sched::schedule_traits("1f1b");
  f.ranks = 2;
  f.token_model = true;
  f.seq_len = 16;
  return f;
}

std::string angle(const std::string& key) { return "<" + key + ">"; }

TEST(Capabilities, RulesHaveUniqueIdsAndSummariesAndNameTheirOptions) {
  std::set<std::string> ids, summaries;
  for (const Capability& c : capability_table()) {
    EXPECT_TRUE(ids.insert(c.id).second) << "duplicate rule id " << c.id;
    EXPECT_TRUE(summaries.insert(c.summary).second) << "duplicate summary " << c.summary;
    EXPECT_FALSE(c.options.empty()) << c.id;
    EXPECT_NE(c.code, ErrorCode::kOk) << c.id;
  }
  EXPECT_GE(capability_table().size(), 30u);
}

TEST(Capabilities, APlainPipelineAndTheSequentialTrainerPassEveryOperation) {
  CapabilityFacts sequential;
  for (Operation op : {Operation::kTrain, Operation::kEvaluate, Operation::kCheckpoint, Operation::kLoadCheckpoint,
                       Operation::kPeriodicCheckpoint}) {
    EXPECT_FALSE(find_refusal(plain(), op).refused()) << operation_name(op) << ": " << find_refusal(plain(), op).message;
    EXPECT_FALSE(find_refusal(sequential, op).refused()) << operation_name(op);
  }
}

// One fact changed from a plain run: the rule that refuses it, its code, and the options it names
// in the caller's spelling.
TEST(Capabilities, EachChangeIsRefusedByItsRuleNamingTheOptions) {
  struct Case {
    const char* what;
    std::function<void(CapabilityFacts&)> change;
    Operation operation;
    ErrorCode code;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {"replicas on threads", [](CapabilityFacts& f) { f.replicas = 2; }, Operation::kTrain,
       ErrorCode::kInvalidArgument, {"<replicas> 2", "mpirun -np 4"}},
      {"ranks without a schedule", [](CapabilityFacts& f) { f.pipelined = false; }, Operation::kTrain,
       ErrorCode::kInvalidArgument, {"<ranks> 2 needs a schedule", "<schedule>"}},
      {"pipedream with clipping",
       [](CapabilityFacts& f) {
         f.schedule = "pipedream";
         f.traits = sched::schedule_traits("pipedream");
         f.clip_norm = 1;
       },
       Operation::kTrain, ErrorCode::kInvalidArgument, {"<clip_norm> 1", "asynchronous schedule 'pipedream'"}},
      {"spectrain recomputes",
       [](CapabilityFacts& f) {
         f.schedule = "spectrain";
         f.traits = sched::schedule_traits("spectrain");
         f.policy = sched::ActivationPolicy::kRecompute;
       },
       Operation::kTrain, ErrorCode::kInvalidArgument, {"keeps no copy of the weights", "pipedream, pipedream-2bw"}},
      {"vertical sync on 1f1b", [](CapabilityFacts& f) { f.async.vertical_sync = true; }, Operation::kTrain,
       ErrorCode::kInvalidArgument, {"<vertical_sync> applies to schedule pipedream only, not to '1f1b'"}},
      {"adapt with bitpipe",
       [](CapabilityFacts& f) {
         f.adapt = true;
         f.pipelines = 2;
       },
       Operation::kTrain, ErrorCode::kInvalidArgument, {"<adapt> is not supported with schedule '1f1b'"}},
      {"balance in processes",
       [](CapabilityFacts& f) {
         f.placement = RankPlacement::kProcesses;
         f.policy = sched::ActivationPolicy::kBalance;
       },
       Operation::kTrain, ErrorCode::kUnimplemented, {"'balance'", "one process per rank cannot measure"}},
      {"slices of features",
       [](CapabilityFacts& f) {
         f.schedule_seq_slices = f.seq_slices = 2;
         f.token_model = false;
       },
       Operation::kTrain, ErrorCode::kInvalidArgument, {"<seq_slices> 2 slices token sequences"}},
      {"pipemare checkpoint",
       [](CapabilityFacts& f) {
         f.schedule = "pipemare";
         f.traits = sched::schedule_traits("pipemare");
       },
       Operation::kCheckpoint, ErrorCode::kUnimplemented, {"discrepancy average"}},
      {"ppll checkpoint (the trainer's state)",
       [](CapabilityFacts& f) {
         f.schedule = "ppll";
         f.traits = sched::schedule_traits("ppll");
       },
       Operation::kLoadCheckpoint, ErrorCode::kFailedPrecondition, {"auxiliary heads"}},
      {"a fill job in processes",
       [](CapabilityFacts& f) {
         f.fill = true;
         f.placement = RankPlacement::kProcesses;
       },
       Operation::kTrain, ErrorCode::kInvalidArgument, {"<fill> runs with the ranks as CPU threads", "(<world>)"}},
      {"a fill job on a GPU",
       [](CapabilityFacts& f) {
         f.fill = true;
         f.placement = RankPlacement::kGpu;
         f.first_cuda_device = "cuda:0";
       },
       Operation::kTrain, ErrorCode::kInvalidArgument, {"on cuda:0 (<devices>)"}},
      {"two copies of the model on GPUs in processes",
       [](CapabilityFacts& f) {
         f.placement = RankPlacement::kProcesses;
         f.cuda_devices = 1;
         f.first_cuda_device = "cuda:0";
         f.pipelines = 2;
       },
       Operation::kTrain, ErrorCode::kUnimplemented, {"two copies of the model", "on the CPU only yet"}},
      {"the file tier on GPUs in processes",
       [](CapabilityFacts& f) {
         f.placement = RankPlacement::kProcesses;
         f.cuda_devices = 1;
         f.policy = sched::ActivationPolicy::kOffloadFile;
       },
       Operation::kTrain, ErrorCode::kUnimplemented, {"'offload-file'", "not supported on CUDA devices yet"}},
      {"an asynchronous schedule on GPUs in processes",
       [](CapabilityFacts& f) {
         f.placement = RankPlacement::kProcesses;
         f.cuda_devices = 1;
         f.schedule = "pipedream";
         f.traits = sched::schedule_traits("pipedream");
       },
       Operation::kTrain, ErrorCode::kUnimplemented, {"on CUDA devices is not supported yet"}},
      {"evaluating local-updates",
       [](CapabilityFacts& f) {
         f.schedule = "local-updates";
         f.traits = sched::schedule_traits("local-updates");
       },
       Operation::kEvaluate, ErrorCode::kFailedPrecondition, {"local-learning schedule 'local-updates'"}},
      {"neuron groups on 1f1b", [](CapabilityFacts& f) { f.neuron_groups = 2; }, Operation::kTrain,
       ErrorCode::kInvalidArgument, {"<neuron_groups> 2", "local-learning schedule (<schedule> ppll, local-updates)", "'1f1b'"}},
      {"neuron groups without a schedule",
       [](CapabilityFacts& f) {
         f.pipelined = false;
         f.ranks = 1;
         f.neuron_groups = 3;
       },
       Operation::kTrain, ErrorCode::kInvalidArgument, {"<neuron_groups> 3", "no schedule is set"}},
      {"overlapping steps of pipedream",
       [](CapabilityFacts& f) {
         f.schedule = "pipedream";
         f.traits = sched::schedule_traits("pipedream");
         f.overlap_steps = true;
       },
       Operation::kTrain, ErrorCode::kInvalidArgument, {"<overlap_steps> applies to synchronous schedules"}},
      {"overlapping steps with offloading",
       [](CapabilityFacts& f) {
         f.overlap_steps = true;
         f.policy = sched::ActivationPolicy::kOffloadHost;
       },
       Operation::kTrain, ErrorCode::kUnimplemented, {"<overlap_steps> with <activation_policy> 'offload-host'"}},
      {"overlapping steps on a GPU",
       [](CapabilityFacts& f) {
         f.overlap_steps = true;
         f.cuda_devices = 2;
         f.placement = RankPlacement::kGpu;
         f.first_cuda_device = "cuda:0";
       },
       Operation::kTrain, ErrorCode::kUnimplemented, {"CPU ranks only", "cuda:0"}},
      {"overlapping steps with a fill job", [](CapabilityFacts& f) { f.overlap_steps = true; f.fill = true; },
       Operation::kTrain, ErrorCode::kUnimplemented, {"<overlap_steps> with a fill job"}},
      {"overlapping steps with adaptation", [](CapabilityFacts& f) { f.overlap_steps = true; f.adapt = true; },
       Operation::kTrain, ErrorCode::kUnimplemented, {"<overlap_steps> with <adapt>"}},
      {"overlapping steps of two pipelines", [](CapabilityFacts& f) { f.overlap_steps = true; f.pipelines = 2; },
       Operation::kTrain, ErrorCode::kUnimplemented, {"the two copies of the model"}},
      {"overlapping steps without a schedule",
       [](CapabilityFacts& f) {
         f.pipelined = false;
         f.ranks = 1;
         f.overlap_steps = true;
       },
       Operation::kTrain, ErrorCode::kInvalidArgument, {"<overlap_steps> overlaps", "no <schedule> is set"}},
      {"diversity without groups", [](CapabilityFacts& f) { f.group_diversity = true; }, Operation::kTrain,
       ErrorCode::kInvalidArgument, {"<group_diversity>", "<neuron_groups> >= 2"}},
      {"neuron groups of a GPT",
       [](CapabilityFacts& f) {
         f.schedule = "ppll";
         f.traits = sched::schedule_traits("ppll");
         f.neuron_groups = 2;
         f.token_model = true;
       },
       Operation::kTrain, ErrorCode::kUnimplemented, {"feature models (MLPs) only"}},
      {"neuron groups on a GPU (as ppll alone)",
       [](CapabilityFacts& f) {
         f.schedule = "ppll";
         f.traits = sched::schedule_traits("ppll");
         f.neuron_groups = 2;
         f.token_model = false;
         f.placement = RankPlacement::kGpu;
       },
       Operation::kTrain, ErrorCode::kUnimplemented, {"'ppll' on CUDA devices is not supported yet"}},
      {"neuron groups with a slowed rank",
       [](CapabilityFacts& f) {
         f.schedule = "ppll";
         f.traits = sched::schedule_traits("ppll");
         f.neuron_groups = 2;
         f.token_model = false;
         f.slow_factor = 2;
       },
       Operation::kTrain, ErrorCode::kInvalidArgument, {"<slow_rank>", "<neuron_groups> runs its own ranks"}},
      {"neuron groups checkpoint",
       [](CapabilityFacts& f) {
         f.schedule = "ppll";
         f.traits = sched::schedule_traits("ppll");
         f.neuron_groups = 2;
       },
       Operation::kCheckpoint, ErrorCode::kFailedPrecondition, {"auxiliary heads"}},
  };
  for (const Case& c : cases) {
    CapabilityFacts f = plain();
    c.change(f);
    const Refusal r = find_refusal(f, c.operation, angle);
    ASSERT_TRUE(r.refused()) << c.what;
    EXPECT_EQ(r.code, c.code) << c.what << ": " << r.message;
    for (const std::string& part : c.says)
      EXPECT_NE(r.message.find(part), std::string::npos) << c.what << ": '" << part << "' not in: " << r.message;
  }
}

// One process per rank on CUDA devices (one GPU each) is a plain pipeline now, data parallel too.
TEST(Capabilities, CudaRanksInProcessesPassEveryOperation) {
  CapabilityFacts f = plain();
  f.placement = RankPlacement::kProcesses;
  f.devices = 1;
  f.cuda_devices = 1;
  f.first_cuda_device = "cuda:0";
  for (Operation op : {Operation::kTrain, Operation::kEvaluate, Operation::kCheckpoint, Operation::kLoadCheckpoint,
                       Operation::kPeriodicCheckpoint})
    EXPECT_FALSE(find_refusal(f, op).refused()) << operation_name(op) << ": " << find_refusal(f, op).message;
  f.replicas = 2;
  f.data_parallel_world = true;
  EXPECT_FALSE(find_refusal(f, Operation::kTrain).refused()) << find_refusal(f, Operation::kTrain).message;
}

// Neuron groups evaluate with the current weights of every group (ppll alone refuses).
TEST(Capabilities, NeuronGroupsEvaluate) {
  CapabilityFacts f = plain();
  f.schedule = "ppll";
  f.traits = sched::schedule_traits("ppll");
  f.neuron_groups = 2;
  f.token_model = false;
  EXPECT_FALSE(find_refusal(f, Operation::kTrain).refused()) << find_refusal(f, Operation::kTrain).message;
  EXPECT_FALSE(find_refusal(f, Operation::kEvaluate).refused()) << find_refusal(f, Operation::kEvaluate).message;
}

// The library refuses through the same table as the command line, once, at make_trainer.
TEST(Capabilities, MakeTrainerRefusesWithTheCallersSpelling) {
  auto model = build_model_from_json_text(R"({"preset": "gpt", "vocab": 16, "d_model": 8, "heads": 2, "layers": 2,
                                              "seq_len": 8})");
  std::shared_ptr<Model> shared = std::move(model);
  TrainingConfig config;
  config.schedule = "pipedream";
  config.ranks = 2;
  config.base.micro_batches = 2;
  config.base.optimizer.clip_norm = 1;
  TrainerInputs inputs;
  inputs.names = [](const std::string& key) { return key == "clip_norm" ? std::string("--clip-norm") : key; };
  try {
    make_trainer(shared, config, inputs);
    FAIL() << "pipedream with clipping was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("--clip-norm 1 cannot apply to asynchronous schedule 'pipedream'"),
              std::string::npos)
        << e.what();
  }
  config.base.optimizer.clip_norm = 0;
  EXPECT_NE(make_trainer(shared, config, inputs), nullptr);
}

// Every config key takes a value of its type and refuses a bad one naming the key and the value;
// a key added without a line here fails the test.
TEST(ConfigKeys, EveryKeySetsItsFieldAndRefusesABadValue) {
  const std::map<std::string, std::pair<std::string, std::function<bool(const TrainingConfig&)>>> good = {
      {"micro_batches", {"4", [](const TrainingConfig& c) { return c.base.micro_batches == 4; }}},
      {"replicas", {"2", [](const TrainingConfig& c) { return c.base.replicas == 2; }}},
      {"seed", {"9", [](const TrainingConfig& c) { return c.base.seed == 9u; }}},
      {"blas_threads", {"2", [](const TrainingConfig& c) { return c.base.blas_threads == 2; }}},
      {"optimizer", {"sgd", [](const TrainingConfig& c) { return c.base.optimizer.kind == OptimizerConfig::Kind::kSgd; }}},
      {"lr", {"0.5", [](const TrainingConfig& c) { return c.base.optimizer.lr == 0.5f; }}},
      {"momentum", {"0.9", [](const TrainingConfig& c) { return c.base.optimizer.momentum == 0.9f; }}},
      {"weight_decay", {"0.25", [](const TrainingConfig& c) { return c.base.optimizer.weight_decay == 0.25f; }}},
      {"clip_norm", {"1", [](const TrainingConfig& c) { return c.base.optimizer.clip_norm == 1.0f; }}},
      {"lr_schedule", {"cosine", [](const TrainingConfig& c) { return c.base.lr_schedule.kind == LrSchedule::Kind::kCosine; }}},
      {"warmup_steps", {"5", [](const TrainingConfig& c) { return c.base.lr_schedule.warmup_steps == 5; }}},
      {"schedule", {"zb-h1", [](const TrainingConfig& c) { return c.schedule == "zb-h1"; }}},
      {"schedule_text", {"0F0 0BW0", [](const TrainingConfig& c) { return c.schedule_text == "0F0 0BW0"; }}},
      {"ranks", {"3", [](const TrainingConfig& c) { return c.ranks == 3; }}},
      {"chunks", {"2", [](const TrainingConfig& c) { return c.chunks == 2; }}},
      {"seq_slices", {"2", [](const TrainingConfig& c) { return c.seq_slices == 2; }}},
      {"layers_per_stage", {"3, 4", [](const TrainingConfig& c) { return c.layers_per_stage == std::vector<int>{3, 4}; }}},
      {"partition", {"even", [](const TrainingConfig& c) { return c.partition == PartitionKind::kEven; }}},
      {"devices", {"cpu", [](const TrainingConfig& c) { return c.devices.size() == 1; }}},
      {"cpu_affinity", {"0,1", [](const TrainingConfig& c) { return c.cpu_affinity == std::vector<int>{0, 1}; }}},
      {"activation_policy", {"recompute", [](const TrainingConfig& c) { return c.activation_policy == "recompute"; }}},
      {"activation_budget_bytes", {"1e6", [](const TrainingConfig& c) { return c.activation_budget_bytes == 1e6; }}},
      {"offload_dir", {"/tmp/x", [](const TrainingConfig& c) { return c.offload_dir == "/tmp/x"; }}},
      {"gradient_reduction", {"deterministic", [](const TrainingConfig& c) { return c.gradient_reduction == "deterministic"; }}},
      {"tensor_parallel", {"2", [](const TrainingConfig& c) { return c.tensor_parallel == 2; }}},
      {"tensor_reduction", {"deterministic", [](const TrainingConfig& c) { return c.tensor_reduction == "deterministic"; }}},
      {"sequence_parallel", {"true", [](const TrainingConfig& c) { return c.sequence_parallel; }}},
      {"tensor_parallel_overlap", {"false", [](const TrainingConfig& c) { return !c.tensor_parallel_overlap; }}},
      {"vertical_sync", {"true", [](const TrainingConfig& c) { return c.async.vertical_sync; }}},
      {"spectrain_version", {"2", [](const TrainingConfig& c) { return c.async.spectrain_version == 2; }}},
      {"pipemare_anneal_updates", {"7", [](const TrainingConfig& c) { return c.async.pipemare_anneal_updates == 7; }}},
      {"pipemare_decay", {"0.5", [](const TrainingConfig& c) { return c.async.pipemare_decay == 0.5f; }}},
      {"local_head", {"mlp", [](const TrainingConfig& c) { return c.local_head == "mlp"; }}},
      {"neuron_groups", {"3", [](const TrainingConfig& c) { return c.neuron_groups == 3; }}},
      {"group_diversity", {"0.5", [](const TrainingConfig& c) { return c.group_diversity == 0.5f; }}},
      {"group_diversity_temperature",
       {"2", [](const TrainingConfig& c) { return c.group_diversity_temperature == 2.0f; }}},
      {"overlap_steps", {"true", [](const TrainingConfig& c) { return c.overlap_steps; }}},
      {"adapt", {"1", [](const TrainingConfig& c) { return c.adaptation.enabled; }}},
      {"adapt_threshold", {"2", [](const TrainingConfig& c) { return c.adaptation.threshold == 2.0; }}},
      {"adapt_patience", {"4", [](const TrainingConfig& c) { return c.adaptation.patience == 4; }}},
      {"slow_rank", {"1", [](const TrainingConfig& c) { return c.slow_rank == 1; }}},
      {"slow_factor", {"3", [](const TrainingConfig& c) { return c.slow_factor == 3.0; }}},
      {"recv_timeout_seconds", {"5", [](const TrainingConfig& c) { return c.recv_timeout_seconds == 5.0; }}},
      {"mailbox_capacity", {"8", [](const TrainingConfig& c) { return c.mailbox_capacity == 8; }}},
      {"spin_seconds", {"0", [](const TrainingConfig& c) { return c.spin_seconds == 0.0; }}},
      {"record_timeline", {"false", [](const TrainingConfig& c) { return !c.record_timeline; }}},
      {"rank_optimizer", {"false", [](const TrainingConfig& c) { return !c.rank_optimizer; }}},
      {"fill", {"sweep:grid.json", [](const TrainingConfig& c) { return c.fill == "sweep:grid.json"; }}},
  };
  for (const ConfigKey& k : config_keys()) {
    const auto it = good.find(k.key);
    ASSERT_NE(it, good.end()) << "no test value for config key '" << k.key << "'";
    TrainingConfig c;
    set_config_entry(c, k.key, it->second.first);
    EXPECT_TRUE(it->second.second(c)) << k.key << " = " << it->second.first;
    if (k.type == "string") continue;  // any text is a string
    try {
      set_config_entry(c, k.key, "x?");
      ADD_FAILURE() << k.key << " took 'x?'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'x?'"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(good.size(), config_keys().size());
  try {
    TrainingConfig c;
    set_config_entry(c, "micro_batch", "4");
    ADD_FAILURE() << "a misspelt key was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'micro_batches'"), std::string::npos) << e.what();
  }
}

TEST(Capabilities, TheTextAndTheMarkdownListEveryRule) {
  const std::string text = capabilities_text(), markdown = capabilities_markdown();
  for (const Capability& c : capability_table()) {
    EXPECT_NE(text.find(c.summary), std::string::npos) << c.id;
    EXPECT_NE(markdown.find("`" + c.id + "`"), std::string::npos) << c.id;
  }
}

}  // namespace
}  // namespace pf

// One process per rank (run under mpirun -np 4 by run_mpi_test.sh): every synchronous schedule,
// p = 2 and 4, MLP and GPT, AdamW and SGD, with and without clipping, with overlapping steps (m = 8)
// and with activation policies, trains bitwise equal to the sequential trainer that each process also runs; each
// process allocates only its stages' parameters.
#include <gtest/gtest.h>

#include <optional>

#include <functional>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "runtime/checkpoint/parameter_checksum.h"
#include "runtime/checkpoint/sharded_checkpoint.h"
#include "runtime/comm/mpi_world.h"
#include "runtime/comm/process_grid.h"
#include "runtime/core/error.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/models/builders.h"
#include "runtime/schedules/schedule_request.h"
#include "runtime/tensor/memory_tracker.h"
#include "runtime/train/micro_batches.h"
#include "tests/execution/test_util.h"

namespace pf::exec {
namespace {

using testing::data_for;

using testing::ModelKind;

std::shared_ptr<Model> make_model(ModelKind kind) { return testing::model_of(kind); }

// The processes of the launch in groups of p (ranks r / p): each group trains on its own.
std::shared_ptr<comm::World> group_of(int p) {
  static std::map<int, std::shared_ptr<comm::World>> groups;
  auto it = groups.find(p);
  if (it != groups.end()) return it->second;
  auto world = comm::MpiWorld::world();
  PF_CHECK_ARG(world->size() % p == 0, "launch a multiple of ", p, " processes, got ", world->size());
  std::shared_ptr<comm::World> group(world->split(world->rank() / p, world->rank() % p));
  groups[p] = group;
  return group;
}


// The micro-batches of data_for's batches, step after step: what a trainer that overlaps steps
// (overlap_steps) pulls, one step ahead.
class StepBatches : public DataSource {
 public:
  StepBatches(const Model& model, int micro_batches) : model_(&model), m_(micro_batches) {}
  Batch next() override {
    const int step = static_cast<int>(position_ / m_);
    const std::vector<Batch> micro = split_into_micro_batches(*model_, data_for(*model_, m_, step), m_);
    return micro[static_cast<size_t>(position_++ % m_)];
  }
  int64_t position() const override { return position_; }
  void seek(int64_t position) override { position_ = position; }

 private:
  const Model* model_;
  int m_;
  int64_t position_ = 0;
};

// Trains the sequential reference here and the pipeline across the group; returns "" when every
// step's loss and gradient norm and the final parameters match bitwise. Every process of the group
// makes the same collective calls whatever it finds (no early return).
// `reference`: the sequential trainer's options when they are not popts.base (bitpipe: two replicas).
std::string compare(ModelKind kind, PipelineOptions popts, int steps = 2,
                    const std::optional<TrainerOptions>& reference = std::nullopt) {
  std::string problems;
  SequentialTrainer ref(make_model(kind), reference ? *reference : popts.base);
  std::shared_ptr<Model> model;
  {
    DeferParameterAllocation defer;  // as the CLI builds it: nothing allocated until the trainer places it
    model = make_model(kind);
  }
  PipelineTrainer pipe(model, popts);
  // Overlapping steps run back to back from a source (the batches' micro-batches in order).
  StepBatches source(ref.model(), popts.base.micro_batches);
  if (popts.overlap_steps) pipe.expect_steps(steps);
  for (int step = 0; step < steps; ++step) {
    const Batch batch = data_for(ref.model(), popts.base.micro_batches, step);
    const StepResult a = ref.step(batch);
    const StepResult b = popts.overlap_steps ? pipe.step(source) : pipe.step(batch);
    if (a.loss != b.loss) problems += " loss differs at step " + std::to_string(step) + ";";
    if (a.grad_norm != b.grad_norm) problems += " grad norm differs at step " + std::to_string(step) + ";";
    if (a.samples != b.samples || a.tokens != b.tokens) problems += " counts differ;";
  }
  // This process holds exactly its stages' parameters, bitwise equal to the reference's.
  const auto& mine = pipe.model().parameters();
  const auto& theirs = ref.model().parameters();
  size_t local = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    const bool owned = pipe.parts().ownership.is_local_rank(pipe.parts().ownership.owner(mine[i]));
    if (owned != mine[i]->allocated()) problems += " " + mine[i]->name + " allocated wrongly;";
    if (!owned) continue;
    ++local;
    if (std::memcmp(mine[i]->value.data<char>(), theirs[i]->value.data<char>(), theirs[i]->value.nbytes()) != 0)
      problems += " parameter " + mine[i]->name + " differs;";
  }
  if (local != pipe.local_parameters().size()) problems += " local parameter count;";
  if (popts.world->size() > 1 && local >= mine.size()) problems += " this process holds every parameter;";
  if (pipe.parameter_checksum() != parameter_checksum(ref.model().parameters())) problems += " checksum differs;";
  return problems;
}

using Case = testing::ScheduleCase;

class ProcessEquivalence : public ::testing::TestWithParam<std::tuple<Case, ModelKind>> {};

TEST_P(ProcessEquivalence, BitwiseEqualToSequential) {
  const Case c = std::get<0>(GetParam());
  const ModelKind kind = std::get<1>(GetParam());
  int ran = 0, variant = 0;
  for (int p : {2, 4}) {
    for (int m : {4, 8}) {
      // Under a sanitizer two of the four: p = 2 stepping alone, p = 4 overlapping steps.
      if (pf::testing::kUnderSanitizer && (p == 2) != (m == 4)) continue;
      sched::ScheduleRequest req;
      req.name = c.schedule;
      req.ranks = p;
      req.micro_batches = m;
      req.chunks = c.chunks;
      try {
        sched::make_schedule(req);
      } catch (const Error&) {
        continue;  // e.g. interleaving needs m % p == 0: the same on every process
      }
      PipelineOptions o;
      o.schedule = c.schedule;
      o.ranks = p;
      o.chunks = c.chunks;
      o.base = testing::varied_options(m, variant++);
      o.world = group_of(p);
      o.recv_timeout_seconds = 60;
      o.overlap_steps = m == 8;  // overlapping steps (three back to back), clipped in some variants
      ++ran;
      EXPECT_EQ(compare(kind, o, o.overlap_steps ? 3 : 2), "")
          << c.schedule << " p=" << p << " m=" << m << (o.overlap_steps ? " overlapped " : " ")
          << o.world->describe();
    }
  }
  EXPECT_GE(ran, pf::testing::kUnderSanitizer ? 1 : 3) << c.schedule;
}

INSTANTIATE_TEST_SUITE_P(
    AllSynchronousSchedules, ProcessEquivalence,
    ::testing::Combine(::testing::ValuesIn(testing::synchronous_schedules()),
                       ::testing::Values(ModelKind::kMlp, ModelKind::kGpt)),
    [](const ::testing::TestParamInfo<std::tuple<Case, ModelKind>>& info) {
      return testing::test_name(std::get<0>(info.param).schedule,
                                testing::kind_name(std::get<1>(info.param)));
    });

// The Llama (grouped-query attention, rotary positions, SwiGLU, RMSNorm), the GPT with its head
// tied to the token embedding (GPT-2's form: the pair's gradients swapped between the first and
// the last stage's processes, or summed in one process where a V placement puts both on rank 0),
// the ResNet (feature maps [B, C, H, W] between stages) and the ViT under a schedule of each kind:
// one stage per rank, two interleaved chunks with split backward, and a V placement.
TEST(ProcessEquivalence, LlamaTiedGptResNetAndViTBitwiseEqualToSequential) {
  int variant = 0;
  for (const Case& c : std::vector<Case>{{"1f1b", 1}, {"interleaved-zb", 2}, {"zb-v", 2}}) {
    for (int p : {2, 4}) {
      // Under a sanitizer one stage count per schedule: 2 for one stage per rank, else 4.
      if (pf::testing::kUnderSanitizer && p != (c.chunks == 1 ? 2 : 4)) continue;
      for (ModelKind kind : {ModelKind::kLlama, ModelKind::kTiedGpt, ModelKind::kResNet, ModelKind::kViT}) {
        PipelineOptions o;
        o.schedule = c.schedule;
        o.ranks = p;
        o.chunks = c.chunks;
        o.base = testing::varied_options(4, variant++);
        o.world = group_of(p);
        o.recv_timeout_seconds = 60;
        EXPECT_EQ(compare(kind, o, 2), "") << c.schedule << " p=" << p << " " << o.world->describe();
      }
    }
  }
}

// BitPipe: two copies of the model over the same processes, their stages exchanging gradients
// across processes; bitwise equal to the sequential trainer of two replicas of m/2 micro-batches.
TEST(ProcessEquivalence, BitPipeTwoCopiesOfTheModel) {
  int variant = 0;
  for (int p : {2, 4}) {
    for (int m : {4, 8}) {
      if (pf::testing::kUnderSanitizer && (p == 2) != (m == 4)) continue;  // slow there: two of four
      for (ModelKind kind : {ModelKind::kMlp, ModelKind::kGpt, ModelKind::kTiedGpt}) {
        PipelineOptions o;
        o.schedule = "bitpipe";
        o.ranks = p;
        o.base = testing::varied_options(m, variant++);
        o.world = group_of(p);
        TrainerOptions reference = o.base;
        reference.micro_batches = m / 2;
        reference.replicas = 2;
        EXPECT_EQ(compare(kind, o, 2, reference), "") << "bitpipe p=" << p << " m=" << m << " " << o.world->describe();
      }
    }
  }
}

// Resuming would need the first copy's values in the second copy's processes: refused before
// anything is read or changed.
TEST(ProcessEquivalence, BitPipeRefusesToResumeAcrossProcesses) {
  PipelineOptions o;
  o.schedule = "bitpipe";
  o.ranks = 2;
  o.base.micro_batches = 4;
  o.world = group_of(2);
  PipelineTrainer pipe(make_model(ModelKind::kMlp), o);
  const std::string before = pipe.parameter_checksum();
  try {
    load_trainer_checkpoint(pipe, "/nonexistent/bitpipe.ckpt");
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("cannot resume from a checkpoint yet"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pipe.parameter_checksum(), before);
}

TEST(ProcessEquivalence, ActivationPolicies) {
  int variant = 0;
  for (const char* policy : {"recompute", "offload-host", "offload-file"}) {
    for (ModelKind kind : {ModelKind::kMlp, ModelKind::kGpt}) {
      PipelineOptions o;
      o.schedule = "1f1b";
      o.ranks = 4;
      o.base = testing::varied_options(8, variant++);
      o.activation_policy = policy;
      o.world = group_of(4);
      EXPECT_EQ(compare(kind, o), "") << policy;
    }
  }
}

// PyTorch's deferred receives (1F1B, p = 2, each rank's RECV before the compute it overlaps): a
// deadlock with blocking receives, so the processes post them; bitwise equal to sequential.
TEST(ProcessEquivalence, DeferredReceivesRunPosted) {
  for (ModelKind kind : {ModelKind::kMlp, ModelKind::kGpt}) {
    PipelineOptions o;
    o.schedule_text =
        "0F0 0SEND_F0 0RECV_B0 0F1 0SEND_F1 0BW0 0RECV_B1 0BW1\n"
        "1RECV_F0 1F0 1RECV_F1 1BW0 1SEND_B0 1F1 1BW1 1SEND_B1\n";
    o.base = testing::varied_options(2, 1);
    o.world = group_of(2);
    EXPECT_EQ(compare(kind, o), "");
  }
}

// Trains `o` as threads of this process and across group_of(o.ranks) processes: 3 steps and the
// drain. "" when every step's loss, the drained parameters and `also(threads, processes)` agree.
std::string compare_with_threads(
    ModelKind kind, PipelineOptions o,
    const std::function<std::string(const PipelineTrainer&, const PipelineTrainer&)>& also = nullptr) {
  std::string problems;
  PipelineTrainer threads(make_model(kind), o);
  o.world = group_of(o.ranks);
  std::shared_ptr<Model> model;
  {
    DeferParameterAllocation defer;
    model = make_model(kind);
  }
  PipelineTrainer procs(model, o);
  for (int step = 0; step < 3; ++step) {
    const Batch batch = data_for(threads.model(), o.base.micro_batches, step);
    if (threads.step(batch).loss != procs.step(batch).loss) problems += " loss differs at step " + std::to_string(step) + ";";
  }
  threads.drain();
  procs.drain();
  if (!procs.parts().async.pipeline_empty()) problems += " not drained;";
  if (procs.parameter_checksum() != threads.parameter_checksum()) problems += " checksum differs;";
  if (also) problems += also(threads, procs);
  return problems;
}

// The asynchronous schedules across processes: the micro-batches in flight cross step boundaries
// as messages between processes; every step's loss and the drained parameters equal the same
// schedule run as threads of this process, bitwise.
TEST(ProcessEquivalence, AsynchronousSchedulesEqualTheirThreadedRuns) {
  struct Method {
    std::string schedule;
    AsyncOptions options;
  };
  AsyncOptions vs, v2, mare;
  vs.vertical_sync = true;
  v2.spectrain_version = 2;
  mare.pipemare_anneal_updates = 4;
  for (const Method& method : std::vector<Method>{{"pipedream", {}}, {"pipedream", vs}, {"pipedream-2bw", {}},
                                                  {"spectrain", v2}, {"pipemare", mare}}) {
    for (int p : {2, 4}) {
      for (ModelKind kind : {ModelKind::kMlp, ModelKind::kGpt}) {
        PipelineOptions o;
        o.schedule = method.schedule;
        o.ranks = p;
        o.async = method.options;
        o.base.micro_batches = p;
        o.base.seed = 3;
        o.base.optimizer.kind = OptimizerConfig::Kind::kSgd;
        o.base.optimizer.lr = 0.05f;
        o.base.optimizer.momentum = 0.9f;
        EXPECT_EQ(compare_with_threads(kind, o), "")
            << method.schedule << (method.options.vertical_sync ? " (vertical sync)" : "") << " p=" << p;
      }
    }
  }
}

// Local learning across processes: activations go forward only, each process trains its stage and
// its head; every step's loss and the drained parameters (heads included) equal the same schedule
// run as threads of this process, bitwise.
TEST(ProcessEquivalence, LocalLearningEqualsItsThreadedRun) {
  for (const std::string schedule : {"ppll", "local-updates"}) {
    for (int p : {2, 4}) {
      for (ModelKind kind : {ModelKind::kMlp, ModelKind::kGpt}) {
        PipelineOptions o;
        o.schedule = schedule;
        o.ranks = p;
        o.base.micro_batches = p;
        o.base.seed = 4;
        o.base.optimizer.lr = 1e-2f;
        // This process's head equals the threaded run's head of the same stage.
        EXPECT_EQ(compare_with_threads(kind, o, [&](const PipelineTrainer& threads, const PipelineTrainer& procs) {
                    const int me = group_of(p)->rank();
                    if (me + 1 == p) return std::string();
                    if (!procs.parts().async.local_head(me)) return std::string(" no head on this process;");
                    std::string diff;
                    return testing::parameters_bitwise_equal(*procs.parts().async.local_head(me), *threads.parts().async.local_head(me), &diff)
                               ? std::string()
                               : " head parameter " + diff + " differs;";
                  }),
                  "")
            << schedule << " p=" << p;
      }
    }
  }
}

// D replicas x P ranks of the launch's 4 processes, made once per (D, P).
const comm::ProcessGrid& grid_of(int replicas, int ranks) {
  static std::map<std::pair<int, int>, comm::ProcessGrid> grids;
  auto it = grids.find({replicas, ranks});
  if (it == grids.end())
    it = grids.emplace(std::make_pair(replicas, ranks),
                       comm::make_process_grid(*comm::MpiWorld::world(), 1, replicas, ranks)).first;
  return it->second;
}

// Data parallel x pipeline: the largest relative difference of the final parameters from
// SequentialTrainer with the same replicas (0 when bitwise equal); -1 when the losses differ.
double data_parallel_difference(ModelKind kind, PipelineOptions popts, int steps = 2) {
  SequentialTrainer ref(make_model(kind), popts.base);
  std::shared_ptr<Model> model;
  {
    DeferParameterAllocation defer;
    model = make_model(kind);
  }
  PipelineTrainer pipe(model, popts);
  bool losses_equal = true;
  for (int step = 0; step < steps; ++step) {
    // The whole step's batch: D * m micro-batches, of which each replica takes its m.
    const Batch batch = data_for(ref.model(), popts.base.step_micro_batches(), step);
    const StepResult a = ref.step(batch);
    const StepResult b = pipe.step(batch);
    losses_equal = losses_equal && std::abs(a.loss - b.loss) <= 1e-6 * std::abs(a.loss);
    EXPECT_EQ(a.samples, b.samples);
  }
  double worst = 0;
  const auto& mine = pipe.model().parameters();
  const auto& theirs = ref.model().parameters();
  for (size_t i = 0; i < mine.size(); ++i) {
    if (!mine[i]->allocated()) continue;
    const float* x = mine[i]->value.f32();
    const float* y = theirs[i]->value.f32();
    for (int64_t j = 0; j < mine[i]->value.numel(); ++j)
      worst = std::max(worst, static_cast<double>(std::abs(x[j] - y[j])) / std::max(1e-3, std::abs(1.0 * y[j])));
  }
  const std::vector<double> all = comm::all_gather_doubles(*comm::MpiWorld::world(), {worst}, 60);
  for (double w : all) worst = std::max(worst, w);
  return losses_equal ? worst : -1;
}

TEST(DataParallel, DeterministicReductionIsBitwiseTheSequentialReplicaSum) {
  int variant = 0;
  for (auto [replicas, ranks] : {std::pair<int, int>{2, 2}, {4, 1}}) {
    for (const Case& c : {Case{"1f1b", 1}, Case{"zb-h1", 1}, Case{"interleaved-1f1b", 2}}) {
      if (ranks == 1 && c.chunks > 1) continue;
      for (ModelKind kind : {ModelKind::kMlp, ModelKind::kGpt, ModelKind::kTiedGpt}) {
        PipelineOptions o;
        o.schedule = c.schedule;
        o.ranks = ranks;
        o.chunks = c.chunks;
        o.base = testing::varied_options(4, variant++);
        o.base.replicas = replicas;
        o.world = grid_of(replicas, ranks).pipeline;
        o.data_parallel_world = grid_of(replicas, ranks).data_parallel;
        o.gradient_reduction = "deterministic";
        EXPECT_EQ(data_parallel_difference(kind, o), 0.0)
            << c.schedule << " D=" << replicas << " P=" << ranks << " " << comm::MpiWorld::world()->describe();
      }
    }
  }
}

TEST(DataParallel, AllReduceIsWithinRoundingOfTheDeterministicSum) {
  int variant = 0;
  for (auto [replicas, ranks] : {std::pair<int, int>{2, 2}, {4, 1}}) {
    for (ModelKind kind : {ModelKind::kMlp, ModelKind::kGpt}) {
      PipelineOptions o;
      o.schedule = "1f1b";
      o.ranks = ranks;
      o.base = testing::varied_options(4, variant++);
      o.base.replicas = replicas;
      o.world = grid_of(replicas, ranks).pipeline;
      o.data_parallel_world = grid_of(replicas, ranks).data_parallel;
      o.gradient_reduction = "allreduce";
      const double diff = data_parallel_difference(kind, o);
      EXPECT_GE(diff, 0.0) << "losses differ";
      EXPECT_LE(diff, 1e-5) << "D=" << replicas << " P=" << ranks;
    }
  }
}

TEST(ProcessEquivalence, EachProcessHoldsItsShareOfTheParameters) {
  // 1F1B on 4 processes, GPT of 6 blocks: 8 layers, 2 per stage. Each process's parameter and
  // gradient bytes are those of its stages, not the model's.
  GptConfig c;
  c.vocab = 96;
  c.seq_len = 8;
  c.d_model = 32;
  c.heads = 2;
  c.layers = 6;
  int64_t whole = 0;
  {
    auto full = build_gpt(c);
    for (Parameter* p : full->parameters()) whole += p->value.nbytes();
  }
  MemoryTracker& tracker = memory_tracker(Device::cpu());
  const int64_t before = tracker.stats().current[static_cast<int>(MemoryCategory::kParameters)];
  std::shared_ptr<Model> model;
  {
    DeferParameterAllocation defer;
    model = build_gpt(c);
  }
  EXPECT_EQ(tracker.stats().current[static_cast<int>(MemoryCategory::kParameters)], before);
  PipelineOptions o;
  o.schedule = "1f1b";
  o.ranks = 4;
  o.base = testing::varied_options(4, 0);
  o.world = group_of(4);
  PipelineTrainer pipe(model, o);
  int64_t mine = 0;
  for (Parameter* p : pipe.local_parameters()) mine += p->value.nbytes();
  EXPECT_EQ(tracker.stats().current[static_cast<int>(MemoryCategory::kParameters)] - before, mine);
  EXPECT_GT(mine, 0);
  EXPECT_LT(mine, whole / 2) << "rank " << o.world->rank() << " holds " << mine << " of " << whole << " bytes";
  const std::vector<int64_t> all = comm::all_gather_int64s(*o.world, {mine}, 60);
  int64_t sum = 0;
  for (int64_t b : all) sum += b;
  EXPECT_EQ(sum, whole);  // the shares add up to the model
}

}  // namespace
}  // namespace pf::exec

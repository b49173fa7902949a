// The C++ layer every binding wraps (bindings/pipeforge_core.h), tested directly: both error modes
// (throw for Python and Java, Status for Go), closed handles, the data-loader bridge, which must
// turn whatever a callback does (an error message, an exception, a missing tensor) into a status,
// Schedule/Simulation/CostModel (per-stage arrays of different lengths are caught here), the
// activation-policy pass, the pipelined trainer's options (activation policies included) and
// measurements, the asynchronous schedules' options and drain, local learning's local_head, and
// the trainer's devices option, seq_slices.
#include "bindings/pipeforge_core.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using pipeforge::Status;

std::unique_ptr<pipeforge::Model> Mlp() {
  pipeforge::MlpConfig config;
  config.input_dim = 4;
  const int64_t hidden[] = {8};
  config.set_hidden(hidden, 1);
  config.classes = 3;
  return std::unique_ptr<pipeforge::Model>(pipeforge::Model::mlp(config, nullptr));
}

std::unique_ptr<pipeforge::Trainer> MakeTrainer(pipeforge::Model& model) {
  pipeforge::TrainerOptions options;
  options.micro_batches = 2;
  return std::unique_ptr<pipeforge::Trainer>(pipeforge::Trainer::create(model, options, nullptr));
}

pipeforge::Tensor Inputs(int64_t rows) {
  std::vector<float> x(static_cast<size_t>(rows) * 4, 0.5f);
  const int64_t shape[] = {rows, 4};
  return pipeforge::Tensor::from_floats(x.data(), x.size(), shape, 2, nullptr);
}

pipeforge::Tensor Targets(int64_t rows) {
  std::vector<int32_t> y(static_cast<size_t>(rows), 1);
  const int64_t shape[] = {rows};
  return pipeforge::Tensor::from_ints(y.data(), y.size(), shape, 1, nullptr);
}

TEST(CoreTest, ErrorsThrowWithoutAStatusAndAreRecordedWithOne) {
  try {
    pipeforge::Model::from_json("{", nullptr);
    FAIL() << "no exception";
  } catch (const pipeforge::Error& e) {
    EXPECT_EQ(e.code(), PF_INVALID_ARGUMENT);
    EXPECT_EQ(e.code_name(), "INVALID_ARGUMENT");
    EXPECT_NE(e.message().find("malformed"), std::string::npos) << e.message();
  }
  Status status;
  EXPECT_EQ(pipeforge::Model::from_json("{", &status), nullptr);
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("malformed"), std::string::npos);
  std::unique_ptr<pipeforge::Model> model(pipeforge::Model::from_json(Mlp()->to_json(nullptr), &status));
  EXPECT_TRUE(status.ok()) << "a later success clears the status";
  EXPECT_EQ(model->num_parameters(&status), 4);
}

TEST(CoreTest, ClosedObjectsFailWithFailedPrecondition) {
  auto model = Mlp();
  auto trainer = MakeTrainer(*model);
  trainer->close();
  trainer->close();
  Status status;
  trainer->step(Inputs(4), Targets(4), &status);
  EXPECT_EQ(status.code(), PF_FAILED_PRECONDITION);
  EXPECT_EQ(trainer->checksum(&status), "");
  EXPECT_EQ(status.code(), PF_FAILED_PRECONDITION);
  model->close();
  EXPECT_EQ(pipeforge::Trainer::create(*model, pipeforge::TrainerOptions(), &status), nullptr);
  EXPECT_EQ(status.code(), PF_FAILED_PRECONDITION);
}

TEST(CoreTest, TensorsCheckShapesAndCopyOut) {
  Status status;
  const float data[] = {1, 2, 3};
  const int64_t shape[] = {2, 2};
  pipeforge::Tensor::from_floats(data, 3, shape, 2, &status);
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
  const pipeforge::Tensor t = Inputs(2);
  EXPECT_EQ(t.size(), 8);
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 4}));
  std::vector<float> out(8);
  t.copy_floats(out.data(), out.size(), &status);
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(out[7], 0.5f);
  std::vector<int32_t> wrong(8);
  t.copy_ints(wrong.data(), wrong.size(), &status);
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
}

// A loader whose next() does what `mode` says.
class Loader : public pipeforge::LoaderCallback {
 public:
  std::string mode = "ok";
  std::vector<int64_t> seeks;
  std::string next(int64_t, pipeforge::MicroBatch& batch) override {
    if (mode == "message") return "shard unreadable";
    if (mode == "throw") throw std::runtime_error("thrown in the loader");
    batch.set_inputs(Inputs(2));
    if (mode != "no targets") batch.set_targets(Targets(2));
    return "";
  }
  std::string seek(int64_t position) override {
    seeks.push_back(position);
    return "";
  }
};

TEST(CoreTest, LoaderBridgeTurnsEveryFailureIntoACallbackError) {
  auto model = Mlp();
  auto trainer = MakeTrainer(*model);
  Loader loader;
  trainer->set_data_loader(&loader, nullptr);
  Status status;
  EXPECT_EQ(trainer->step_from_loader(&status).samples, 4);
  ASSERT_TRUE(status.ok()) << status.message();
  for (const std::string mode : {"message", "throw", "no targets"}) {
    loader.mode = mode;
    trainer->step_from_loader(&status);
    EXPECT_EQ(status.code(), PF_CALLBACK_ERROR) << mode;
    EXPECT_NE(status.message().find(mode == "message"  ? "shard unreadable"
                                     : mode == "throw" ? "thrown in the loader"
                                                       : "did not set both"),
              std::string::npos)
        << status.message();
  }
  loader.mode = "ok";
  trainer->step_from_loader(&status);
  EXPECT_TRUE(status.ok()) << status.message();
  EXPECT_FALSE(loader.seeks.empty()) << "a retry after a failure seeks back";
  EXPECT_EQ(trainer->metrics(nullptr).step, 2);
  trainer->set_data_loader(nullptr, nullptr);
  trainer->step_from_loader(&status);
  EXPECT_EQ(status.code(), PF_FAILED_PRECONDITION);
}

std::unique_ptr<pipeforge::Schedule> Generate(const std::string& name, int stages, int micro_batches) {
  pipeforge::ScheduleOptions options;
  options.stages = stages;
  options.micro_batches = micro_batches;
  return std::unique_ptr<pipeforge::Schedule>(pipeforge::Schedule::generate(name, options, nullptr));
}

TEST(CoreTest, ScheduleSimulatesAndRendersInBothErrorModes) {
  auto schedule = Generate("1f1b", 4, 8);
  EXPECT_EQ(schedule->num_ranks(nullptr), 4);
  EXPECT_EQ(schedule->num_stages(nullptr), 4);
  EXPECT_EQ(schedule->num_micro_batches(nullptr), 8);
  std::unique_ptr<pipeforge::Simulation> sim(schedule->simulate(pipeforge::CostModel(), nullptr));
  const pipeforge::SimulationSummary summary = sim->summary(nullptr);
  EXPECT_DOUBLE_EQ(summary.bubble_rate, 3.0 / 11.0);
  EXPECT_EQ(summary.num_ranks, 4);
  for (int32_t rank = 0; rank < 4; ++rank) EXPECT_EQ(sim->rank_stats(rank, nullptr).peak_activations, 4 - rank);

  // Text round trip; lowering keeps the makespan.
  const std::string text = schedule->to_text(nullptr);
  std::unique_ptr<pipeforge::Schedule> parsed(pipeforge::Schedule::parse(text, nullptr));
  EXPECT_EQ(parsed->to_text(nullptr), text);
  std::unique_ptr<pipeforge::Schedule> lowered(parsed->lower(nullptr));
  lowered->validate(nullptr);
  std::unique_ptr<pipeforge::Simulation> lowered_sim(lowered->simulate(pipeforge::CostModel(), nullptr));
  EXPECT_DOUBLE_EQ(lowered_sim->summary(nullptr).makespan, summary.makespan);

  // A simulation outlives its schedule.
  schedule->close();
  EXPECT_NE(sim->to_chrome_trace(nullptr).find("traceEvents"), std::string::npos);
  EXPECT_NE(sim->to_svg(nullptr).find("<svg"), std::string::npos);
  EXPECT_NE(sim->to_ascii(60, nullptr).find("rank 3"), std::string::npos);

  Status status;
  schedule->to_text(&status);
  EXPECT_EQ(status.code(), PF_FAILED_PRECONDITION);
  EXPECT_EQ(sim->to_ascii(3, &status), "");
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("width"), std::string::npos) << status.message();
  sim->close();
  sim->summary(&status);
  EXPECT_EQ(status.code(), PF_FAILED_PRECONDITION);

  pipeforge::ScheduleOptions options;
  options.stages = 4;
  options.micro_batches = 8;
  EXPECT_EQ(pipeforge::Schedule::generate("2f2b", options, &status), nullptr);
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("2f2b"), std::string::npos) << status.message();
  try {
    pipeforge::Schedule::parse("0F0 0QQ1", nullptr);
    FAIL() << "no exception";
  } catch (const pipeforge::Error& e) {
    EXPECT_EQ(e.code(), PF_INVALID_ARGUMENT);
    EXPECT_NE(e.message().find("0QQ1"), std::string::npos) << e.message();
  }
}

// Since 0.6: PyTorch's CSV and the send/recv semantics, in both error modes.
TEST(CoreTest, PytorchCsvAndPostedSemantics) {
  const std::string deferred =
      "0F0,0SEND_F0,0RECV_B0,0F1,0SEND_F1,0B0,0RECV_B1,0B1\n"
      "1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n";
  std::unique_ptr<pipeforge::Schedule> schedule(pipeforge::Schedule::parse_pytorch_csv(deferred, nullptr));
  EXPECT_EQ(schedule->to_pytorch_csv(true, nullptr), deferred);
  EXPECT_EQ(schedule->to_pytorch_csv(false, nullptr), "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
  Status status;
  schedule->validate(&status);
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
  schedule->validate_comm("posted", &status);
  EXPECT_TRUE(status.ok()) << status.message();
  schedule->validate_comm("buffered", &status);
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("'buffered'"), std::string::npos) << status.message();
  EXPECT_EQ(schedule->simulate(pipeforge::CostModel(), &status), nullptr);
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
  std::unique_ptr<pipeforge::Simulation> sim(schedule->simulate_comm(pipeforge::CostModel(), "posted", nullptr));
  EXPECT_DOUBLE_EQ(sim->summary(nullptr).makespan, 9.0);
  try {
    pipeforge::Schedule::parse_pytorch_csv("0F0,0QQ0\n", nullptr);
    FAIL() << "no exception";
  } catch (const pipeforge::Error& e) {
    EXPECT_EQ(e.code(), PF_INVALID_ARGUMENT);
    EXPECT_NE(e.message().find("0QQ0"), std::string::npos) << e.message();
  }
  schedule->close();
  EXPECT_EQ(schedule->to_pytorch_csv(false, &status), "");
  EXPECT_EQ(status.code(), PF_FAILED_PRECONDITION);
}

TEST(CoreTest, PerStageCostsOverrideTheScalarsAndMustAgreeInLength) {
  auto schedule = Generate("gpipe", 2, 2);
  pipeforge::CostModel costs;
  const double t_f[] = {1.0, 3.0};
  costs.set_stage_t_f(t_f, 2);
  std::unique_ptr<pipeforge::Simulation> sim(schedule->simulate(costs, nullptr));
  EXPECT_DOUBLE_EQ(sim->rank_stats(1, nullptr).busy, 2 * (3.0 + 1.0 + 1.0));

  Status status;
  const double one[] = {1.0};
  costs.set_stage_m_b(one, 1);
  EXPECT_EQ(schedule->simulate(costs, &status), nullptr);
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("stage_m_b has 1"), std::string::npos) << status.message();
  costs.clear_stage_costs();
  costs.set_stage_t_w(one, 0);  // set but empty: the C API says the schedule has 2 stages
  EXPECT_EQ(schedule->simulate(costs, &status), nullptr);
  EXPECT_NE(status.message().find("2 stages"), std::string::npos) << status.message();
  costs.clear_stage_costs();
  sim.reset(schedule->simulate(costs, &status));
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_DOUBLE_EQ(sim->rank_stats(1, nullptr).busy, 2 * 3.0);
}

TEST(CoreTest, PipelinedTrainerOptionsAndMeasurements) {
  pipeforge::TrainerOptions defaults;
  EXPECT_EQ(defaults.schedule, "");
  EXPECT_EQ(defaults.schedule_text, "");
  EXPECT_EQ(defaults.stages, 1);
  EXPECT_EQ(defaults.chunks, 0);  // the schedule's own (2 looped or V, else 1)
  EXPECT_GT(defaults.recv_timeout_seconds, 0.0);
  EXPECT_EQ(defaults.num_layers_per_stage(), 0u);

  // An MLP with 3 hidden layers: fc0 act0 fc1 act1 fc2 act2 head (7 top-level layers).
  pipeforge::MlpConfig config;
  config.input_dim = 4;
  const int64_t hidden[] = {8, 8, 8};
  config.set_hidden(hidden, 3);
  config.classes = 3;
  std::unique_ptr<pipeforge::Model> model(pipeforge::Model::mlp(config, nullptr));
  pipeforge::TrainerOptions options;
  options.micro_batches = 2;
  std::unique_ptr<pipeforge::Trainer> sequential(pipeforge::Trainer::create(*model, options, nullptr));
  sequential->step(Inputs(4), Targets(4), nullptr);
  const std::string expected = sequential->checksum(nullptr);
  Status status;
  EXPECT_EQ(sequential->num_ranks(&status), 1);
  sequential->rank_stats(0, &status);
  EXPECT_EQ(status.code(), PF_FAILED_PRECONDITION);
  EXPECT_NE(status.message().find("not pipelined"), std::string::npos) << status.message();
  EXPECT_EQ(sequential->timeline_to_svg(&status), "");
  EXPECT_EQ(status.code(), PF_FAILED_PRECONDITION);
  sequential.reset();

  options.schedule = "2f2b";
  options.stages = 2;
  EXPECT_EQ(pipeforge::Trainer::create(*model, options, &status), nullptr);
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("2f2b"), std::string::npos) << status.message();
  options.schedule = "1f1b";
  const int64_t too_wide[] = {3, int64_t{1} << 40};
  options.set_layers_per_stage(too_wide, 2);
  EXPECT_EQ(pipeforge::Trainer::create(*model, options, &status), nullptr);
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("layers_per_stage[1]"), std::string::npos) << status.message();
  const int64_t split[] = {3, 4};
  options.set_layers_per_stage(split, 2);
  EXPECT_EQ(options.layers_in_stage(1), 4);
  options.recv_timeout_seconds = 30;
  std::unique_ptr<pipeforge::Trainer> pipelined(pipeforge::Trainer::create(*model, options, &status));
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(pipelined->num_ranks(nullptr), 2);
  EXPECT_THROW(pipelined->bubble_rate(nullptr), pipeforge::Error);  // no step yet
  pipelined->step(Inputs(4), Targets(4), nullptr);
  EXPECT_EQ(pipelined->checksum(nullptr), expected);
  const pipeforge::RankStats r = pipelined->rank_stats(1, nullptr);
  EXPECT_GT(r.busy, 0.0);
  EXPECT_GE(r.finish, r.first_start);
  EXPECT_GE(r.peak_activations, 1);
  const double bubble = pipelined->bubble_rate(nullptr);
  EXPECT_GE(bubble, 0.0);
  EXPECT_LT(bubble, 1.0);
  EXPECT_NE(pipelined->timeline_to_chrome_trace(nullptr).find("traceEvents"), std::string::npos);
  EXPECT_NE(pipelined->timeline_to_svg(nullptr).find("<svg"), std::string::npos);
  pipelined->rank_stats(2, &status);
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
  pipelined->close();
  EXPECT_EQ(pipelined->num_ranks(&status), 0);
  EXPECT_EQ(status.code(), PF_FAILED_PRECONDITION);
}

// The asynchronous schedules' options in the runtime's terms (0 = none; the C API's -1 sentinels
// stay inside the layer) and drain().
TEST(CoreTest, AsynchronousScheduleOptionsAndDrain) {
  const pipeforge::TrainerOptions defaults;
  EXPECT_FALSE(defaults.vertical_sync);
  EXPECT_EQ(defaults.spectrain_version, 1);
  EXPECT_EQ(defaults.pipemare_anneal_updates, 100);
  EXPECT_FLOAT_EQ(defaults.pipemare_decay, 0.9f);

  auto model = Mlp();
  pipeforge::TrainerOptions options;
  options.micro_batches = 2;
  options.optimizer = "sgd";
  options.schedule = "pipemare";
  options.ranks = 2;
  Status status;
  options.pipemare_anneal_updates = -1;
  EXPECT_EQ(pipeforge::Trainer::create(*model, options, &status), nullptr);
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("pipemare_anneal_updates is -1"), std::string::npos) << status.message();
  options.pipemare_anneal_updates = 0;
  options.pipemare_decay = 1.0f;
  EXPECT_EQ(pipeforge::Trainer::create(*model, options, &status), nullptr);
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("pipemare_decay"), std::string::npos) << status.message();
  options.pipemare_decay = 0.0f;
  options.vertical_sync = true;
  EXPECT_EQ(pipeforge::Trainer::create(*model, options, &status), nullptr);
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("vertical_sync"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("pipemare"), std::string::npos) << status.message();
  options.vertical_sync = false;
  std::unique_ptr<pipeforge::Trainer> trainer(pipeforge::Trainer::create(*model, options, &status));
  ASSERT_TRUE(status.ok()) << status.message();
  trainer->step(Inputs(4), Targets(4), nullptr);
  const std::string in_flight = trainer->checksum(nullptr);
  trainer->drain(nullptr);
  EXPECT_NE(trainer->checksum(nullptr), in_flight);
  trainer->close();
  trainer->drain(&status);
  EXPECT_EQ(status.code(), PF_FAILED_PRECONDITION);
}

// Local learning: local_head reaches the runtime ("" = "auto"), a kind for another schedule or an
// unknown kind is refused naming it, and drain() finishes what a step left in flight.
TEST(CoreTest, LocalLearningHeadOptionAndDrain) {
  EXPECT_EQ(pipeforge::TrainerOptions().local_head, "auto");
  auto model = Mlp();
  pipeforge::TrainerOptions options;
  options.micro_batches = 2;
  options.schedule = "1f1b";
  options.ranks = 2;
  options.local_head = "mlp";
  Status status;
  EXPECT_EQ(pipeforge::Trainer::create(*model, options, &status), nullptr);
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("local_head"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("1f1b"), std::string::npos) << status.message();
  options.schedule = "ppll";
  options.local_head = "conv";
  EXPECT_EQ(pipeforge::Trainer::create(*model, options, &status), nullptr);
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("'conv'"), std::string::npos) << status.message();
  auto train = [&](const std::string& head) {
    options.local_head = head;
    std::unique_ptr<pipeforge::Trainer> trainer(pipeforge::Trainer::create(*model, options, &status));
    EXPECT_TRUE(status.ok()) << status.message();
    if (!trainer) return std::string();
    for (int step = 0; step < 2; ++step) trainer->step(Inputs(4), Targets(4), nullptr);
    const std::string in_flight = trainer->checksum(nullptr);
    trainer->drain(nullptr);
    const std::string drained = trainer->checksum(nullptr);
    EXPECT_NE(drained, in_flight) << head;
    return drained;
  };
  const std::string automatic = train("auto");
  EXPECT_EQ(train(""), automatic);
  EXPECT_NE(train("mlp"), automatic);
}

// Sequence-sliced 1F1B (C API 0.7): seq_slices reaches the runtime, both error modes name it.
TEST(CoreTest, SeqSlicesOption) {
  EXPECT_EQ(pipeforge::TrainerOptions().seq_slices, 1);
  auto model = Mlp();
  pipeforge::TrainerOptions options;
  options.micro_batches = 2;
  options.schedule = "seq1f1b";
  options.ranks = 2;
  options.seq_slices = 2;  // the MLP reads features: nothing to slice
  Status status;
  EXPECT_EQ(pipeforge::Trainer::create(*model, options, &status), nullptr);
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("seq_slices 2 slices token sequences"), std::string::npos) << status.message();
  EXPECT_THROW(pipeforge::Trainer::create(*model, options, nullptr), std::exception);
  options.seq_slices = 1;  // seq1f1b with one slice is 1f1b
  std::unique_ptr<pipeforge::Trainer> trainer(pipeforge::Trainer::create(*model, options, &status));
  EXPECT_TRUE(status.ok()) << status.message();
  ASSERT_NE(trainer, nullptr);
  trainer->step(Inputs(4), Targets(4), nullptr);
}

// Fail-slow adaptation (C API 0.9): the options reach the runtime (without a schedule it refuses
// naming adapt); a trainer without adaptation reports no moves.
TEST(CoreTest, AdaptOptions) {
  const pipeforge::TrainerOptions defaults;
  EXPECT_FALSE(defaults.adapt);
  EXPECT_EQ(defaults.adapt_threshold, 1.5);
  EXPECT_EQ(defaults.adapt_patience, 3);
  EXPECT_EQ(defaults.slow_rank, -1);
  EXPECT_EQ(defaults.slow_factor, 1.0);
  auto model = Mlp();
  pipeforge::TrainerOptions options;
  options.adapt = true;
  Status status;
  EXPECT_EQ(pipeforge::Trainer::create(*model, options, &status), nullptr);
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("options->adapt needs a synchronous schedule"), std::string::npos) << status.message();
  options.adapt = false;
  std::unique_ptr<pipeforge::Trainer> trainer(pipeforge::Trainer::create(*model, options, &status));
  ASSERT_NE(trainer, nullptr) << status.message();
  EXPECT_EQ(trainer->adaptations_json(nullptr), "[]");
}

double PeakOfRank0(const pipeforge::Schedule& schedule, const pipeforge::CostModel& costs) {
  std::unique_ptr<pipeforge::Simulation> sim(schedule.simulate(costs, nullptr));
  return sim->rank_stats(0, nullptr).peak_activation_bytes;
}

TEST(CoreTest, ActivationPoliciesAsASchedulePass) {
  pipeforge::CostModel costs;
  EXPECT_EQ(costs.m_in, 0.0);  // the C API's defaults
  EXPECT_EQ(costs.transfer_bandwidth, 0.0);
  costs.m_b = 100;
  costs.m_in = 10;
  costs.transfer_bandwidth = 200;
  auto schedule = Generate("1f1b", 4, 8);
  EXPECT_DOUBLE_EQ(PeakOfRank0(*schedule, costs), 400.0);
  const double budget = schedule->min_activation_budget(costs, nullptr);
  EXPECT_GT(budget, 0.0);
  EXPECT_LT(budget, 400.0);

  Status status;
  std::unique_ptr<pipeforge::Schedule> selective(
      schedule->apply_activation_policy("selective", costs, budget, &status));
  ASSERT_TRUE(status.ok()) << status.message();
  ASSERT_NE(selective, nullptr);
  EXPECT_LE(PeakOfRank0(*selective, costs), budget);
  EXPECT_LT(PeakOfRank0(*selective, costs), 400.0);
  std::unique_ptr<pipeforge::Simulation> sim(selective->simulate(costs, nullptr));
  EXPECT_GT(sim->rank_stats(0, nullptr).offloaded_bytes, 0.0);
  EXPECT_EQ(sim->rank_stats(0, nullptr).recomputes, 0);
  std::unique_ptr<pipeforge::Schedule> recompute(schedule->apply_activation_policy("recompute", costs, 0, nullptr));
  sim.reset(recompute->simulate(costs, nullptr));
  EXPECT_EQ(sim->rank_stats(0, nullptr).recomputes, 8);
  EXPECT_EQ(sim->rank_stats(0, nullptr).offloaded_bytes, 0.0);

  // m_in per stage, through the 6th per-stage array: the same as the scalar when equal, higher when
  // a recomputed micro-batch keeps more.
  const double peak_m_in = PeakOfRank0(*recompute, costs);
  pipeforge::CostModel per_stage = costs;
  const double m_in[] = {10, 10, 10, 10};
  per_stage.m_in = 0;
  per_stage.set_stage_m_in(m_in, 4);
  EXPECT_DOUBLE_EQ(PeakOfRank0(*recompute, per_stage), peak_m_in);
  const double more[] = {50, 10, 10, 10};
  per_stage.set_stage_m_in(more, 4);
  EXPECT_GT(PeakOfRank0(*recompute, per_stage), peak_m_in);
  const double m_b[] = {100, 100, 100};
  per_stage.set_stage_m_b(m_b, 3);  // 3 entries, stage_m_in 4: caught here
  EXPECT_EQ(schedule->min_activation_budget(per_stage, &status), 0.0);
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("stage_m_b has 3 entries but stage_m_in has 4"), std::string::npos)
      << status.message();

  EXPECT_EQ(schedule->apply_activation_policy("selective", costs, budget / 2, &status), nullptr);
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("smallest budget that works"), std::string::npos) << status.message();
  try {
    schedule->apply_activation_policy("swap", costs, 0, nullptr);
    FAIL() << "no exception";
  } catch (const pipeforge::Error& e) {
    EXPECT_EQ(e.code(), PF_INVALID_ARGUMENT);
    EXPECT_NE(e.message().find("unknown activation policy 'swap'"), std::string::npos) << e.message();
  }
  schedule->close();
  EXPECT_EQ(schedule->apply_activation_policy("none", costs, 0, &status), nullptr);
  EXPECT_EQ(status.code(), PF_FAILED_PRECONDITION);
  EXPECT_EQ(schedule->min_activation_budget(costs, &status), 0.0);
  EXPECT_EQ(status.code(), PF_FAILED_PRECONDITION);
}

TEST(CoreTest, PipelinedTrainerWithActivationPolicies) {
  pipeforge::TrainerOptions defaults;
  EXPECT_EQ(defaults.activation_policy, "");
  EXPECT_EQ(defaults.activation_budget_bytes, 0.0);
  EXPECT_EQ(defaults.offload_dir, "");

  pipeforge::MlpConfig config;
  config.input_dim = 4;
  const int64_t hidden[] = {8, 8, 8};
  config.set_hidden(hidden, 3);
  config.classes = 3;
  std::string expected;
  {
    std::unique_ptr<pipeforge::Model> model(pipeforge::Model::mlp(config, nullptr));
    pipeforge::TrainerOptions options;
    options.micro_batches = 4;
    std::unique_ptr<pipeforge::Trainer> sequential(pipeforge::Trainer::create(*model, options, nullptr));
    sequential->step(Inputs(8), Targets(8), nullptr);
    expected = sequential->checksum(nullptr);
  }
  for (const char* policy : {"recompute", "offload-host", "balance"}) {
    std::unique_ptr<pipeforge::Model> model(pipeforge::Model::mlp(config, nullptr));
    pipeforge::TrainerOptions options;
    options.micro_batches = 4;  // 4 ranks x 4 micro-batches: rank 0 holds 4, rank 3 one (balance pairs them)
    options.schedule = "1f1b";
    options.stages = 4;
    const int64_t even[] = {2, 2, 2, 1};  // the 7 layers split evenly (rank 0's are the heaviest)
    options.set_layers_per_stage(even, 4);
    options.activation_policy = policy;
    Status status;
    std::unique_ptr<pipeforge::Trainer> trainer(pipeforge::Trainer::create(*model, options, &status));
    ASSERT_TRUE(status.ok()) << policy << ": " << status.message();
    trainer->step(Inputs(8), Targets(8), nullptr);
    EXPECT_EQ(trainer->checksum(nullptr), expected) << policy;
    const pipeforge::RankStats r = trainer->rank_stats(0, nullptr);
    if (std::string(policy) == "recompute") {
      EXPECT_GT(r.recomputes, 0) << policy;
      EXPECT_EQ(r.offloaded_bytes, 0.0) << policy;
    } else {
      EXPECT_GT(r.offloaded_bytes, 0.0) << policy;
      EXPECT_EQ(r.recomputes, 0) << policy;
    }
  }
  std::unique_ptr<pipeforge::Model> model(pipeforge::Model::mlp(config, nullptr));
  pipeforge::TrainerOptions options;
  options.micro_batches = 2;
  options.schedule = "1f1b";
  options.stages = 2;
  options.activation_policy = "offload-gpu";
  Status status;
  EXPECT_EQ(pipeforge::Trainer::create(*model, options, &status), nullptr);
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("offload-gpu"), std::string::npos) << status.message();
  options.activation_policy = "selective";  // without a budget
  EXPECT_EQ(pipeforge::Trainer::create(*model, options, &status), nullptr);
  EXPECT_NE(status.message().find("activation_budget_bytes"), std::string::npos) << status.message();
  options.schedule = "";
  options.stages = 1;
  options.activation_policy = "recompute";
  EXPECT_EQ(pipeforge::Trainer::create(*model, options, &status), nullptr);
  EXPECT_NE(status.message().find("no schedule"), std::string::npos) << status.message();
}

TEST(CoreTest, TrainerDevices) {
  pipeforge::TrainerOptions defaults;
  EXPECT_EQ(defaults.devices, "");
  std::string expected;
  {
    std::unique_ptr<pipeforge::Model> reference = Mlp();
    std::unique_ptr<pipeforge::Trainer> trainer = MakeTrainer(*reference);
    trainer->step(Inputs(8), Targets(8), nullptr);
    expected = trainer->checksum(nullptr);
  }
  pipeforge::TrainerOptions options;
  options.micro_batches = 2;
  options.devices = "cpu";
  std::unique_ptr<pipeforge::Model> model = Mlp();
  Status status;
  std::unique_ptr<pipeforge::Trainer> cpu(pipeforge::Trainer::create(*model, options, &status));
  ASSERT_TRUE(status.ok()) << status.message();
  cpu->step(Inputs(8), Targets(8), nullptr);
  EXPECT_EQ(cpu->checksum(nullptr), expected);
  options.devices = "gpu0";
  std::unique_ptr<pipeforge::Model> other = Mlp();  // a model serves one trainer at a time
  EXPECT_EQ(pipeforge::Trainer::create(*other, options, &status), nullptr);
  EXPECT_EQ(status.code(), PF_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("gpu0"), std::string::npos) << status.message();
}

TEST(CoreTest, AbiMatches) {
  Status status;
  pipeforge::check_abi(&status);
  EXPECT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(pipeforge::library_abi_version(), pipeforge::header_abi_version());
}

}  // namespace

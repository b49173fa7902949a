// The 0.3 trainer options in one process (no mpirun: tests/c_api/process_api_test.cc runs the same
// options over real mpirun processes): `processes`, `data_parallel`, `gradient_reduction`, the
// `ranks` alias of `stages`, pf_trainer_process and pf_rank_stats.local; older (0.2-sized) structs
// still accepted; every refusal names its option.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/c_api/test_util.h"

namespace {

using pftest::Checksum;
using pftest::MakeDeepMlp;
using pftest::MakeRows;
using pftest::MakeTrainer;
using pftest::Options;
using pftest::Views;

// Creation fails with `code` and a message holding every one of `parts`; *out stays untouched.
void ExpectCreateFails(const pf_trainer_options& options, pf_code code, std::initializer_list<const char*> parts) {
  pf_model* model = MakeDeepMlp();
  pf_trainer* const sentinel = reinterpret_cast<pf_trainer*>(0x1);
  pf_trainer* out = sentinel;
  pftest::ExpectError(pf_trainer_create(model, &options, &out), code, parts);
  EXPECT_EQ(out, sentinel);
  pf_model_destroy(model);
}

void Train(pf_trainer* trainer, int steps, int64_t rows = 16) {
  for (int step = 0; step < steps; ++step) {
    const pftest::Rows data = MakeRows(step, rows);
    Views views(data);
    ASSERT_PF_OK(pf_trainer_step(trainer, &views.inputs, &views.targets, nullptr));
  }
}

std::vector<float> Parameter(const pf_trainer* trainer, const char* name) {
  int64_t shape[8];
  size_t ndim = 0;
  EXPECT_PF_OK(pf_trainer_parameter_shape(trainer, name, shape, 8, &ndim));
  size_t n = 1;
  for (size_t i = 0; i < ndim; ++i) n *= static_cast<size_t>(shape[i]);
  std::vector<float> values(n);
  EXPECT_PF_OK(pf_trainer_get_parameter(trainer, name, values.data(), values.size()));
  return values;
}

class ProcessOptions : public ::testing::Test {
 protected:
  void SetUp() override {
    // These tests are about a process that mpirun did not start.
    ASSERT_EQ(std::getenv("OMPI_COMM_WORLD_SIZE"), nullptr) << "run this test without mpirun";
  }
};

TEST_F(ProcessOptions, RanksIsStagesUnderItsOwnName) {
  pf_trainer* reference = MakeTrainer(Options(4));
  Train(reference, 2);
  const std::string expected = Checksum(reference);
  pf_trainer_destroy(reference);
  struct Case {
    int32_t stages, ranks, expected_ranks;
  } cases[] = {{1, 3, 3}, {3, 0, 3}, {2, 2, 2}};
  for (const Case& c : cases) {
    pf_trainer_options options = Options(4);
    options.schedule = "1f1b";
    options.stages = c.stages;
    options.ranks = c.ranks;
    pf_trainer* t = MakeTrainer(options);
    ASSERT_NE(t, nullptr);
    int32_t ranks = 0;
    EXPECT_PF_OK(pf_trainer_num_ranks(t, &ranks));
    EXPECT_EQ(ranks, c.expected_ranks) << "stages " << c.stages << ", ranks " << c.ranks;
    Train(t, 2);
    EXPECT_EQ(Checksum(t), expected);
    pf_trainer_destroy(t);
  }
  pf_trainer_options options = Options(4);
  options.schedule = "1f1b";
  options.stages = 3;
  options.ranks = 2;
  ExpectCreateFails(options, PF_INVALID_ARGUMENT, {"options->ranks is 2", "options->stages is 3"});
  options.stages = 1;
  options.ranks = -1;
  ExpectCreateFails(options, PF_INVALID_ARGUMENT, {"options->ranks is -1"});
}

TEST_F(ProcessOptions, ThreadsReportProcessZeroOfOneAndEveryRankLocal) {
  for (int32_t processes : {PF_PROCESSES_AUTO, PF_PROCESSES_THREADS}) {
    pf_trainer_options options = Options(2);
    options.schedule = "1f1b";
    options.ranks = 2;
    options.processes = processes;
    pf_trainer* t = MakeTrainer(options);
    ASSERT_NE(t, nullptr);
    int32_t rank = -1, size = -1;
    ASSERT_PF_OK(pf_trainer_process(t, &rank, &size));
    EXPECT_EQ(rank, 0);
    EXPECT_EQ(size, 1);
    Train(t, 1);
    for (int32_t r = 0; r < 2; ++r) {
      pf_rank_stats stats;
      std::memset(&stats, 0, sizeof(stats));
      stats.struct_size = sizeof(stats);
      ASSERT_PF_OK(pf_trainer_get_rank_stats(t, r, &stats));
      EXPECT_EQ(stats.local, 1) << "rank " << r;
    }
    // A 0.2 caller's pf_rank_stats ends before `local`: nothing is written there.
    struct {
      pf_rank_stats stats;
    } old;
    std::memset(&old, 0, sizeof(old));
    old.stats.struct_size = static_cast<uint32_t>(offsetof(pf_rank_stats, local));
    old.stats.local = 7;
    ASSERT_PF_OK(pf_trainer_get_rank_stats(t, 0, &old.stats));
    EXPECT_EQ(old.stats.local, 7);
    EXPECT_GT(old.stats.busy, 0.0);
    // Bad arguments leave the out-parameters alone.
    rank = size = -5;
    EXPECT_PF_ERROR(pf_trainer_process(nullptr, &rank, &size), PF_INVALID_ARGUMENT, "'trainer'");
    EXPECT_PF_ERROR(pf_trainer_process(t, nullptr, &size), PF_INVALID_ARGUMENT, "'rank'");
    EXPECT_PF_ERROR(pf_trainer_process(t, &rank, nullptr), PF_INVALID_ARGUMENT, "'size'");
    EXPECT_EQ(rank, -5);
    EXPECT_EQ(size, -5);
    pf_trainer_destroy(t);
  }
  // The sequential trainer is one process too.
  pf_trainer* sequential = MakeTrainer(Options(2));
  int32_t rank = -1, size = -1;
  ASSERT_PF_OK(pf_trainer_process(sequential, &rank, &size));
  EXPECT_EQ(rank, 0);
  EXPECT_EQ(size, 1);
  pf_trainer_destroy(sequential);
}

TEST_F(ProcessOptions, SimulationsRunNothingLocally) {
  pf_schedule_options so;
  pf_schedule_options_init(&so);
  so.stages = 2;
  so.micro_batches = 2;
  pf_schedule* schedule = nullptr;
  ASSERT_PF_OK(pf_schedule_generate("1f1b", &so, &schedule));
  pf_simulation* simulation = nullptr;
  ASSERT_PF_OK(pf_schedule_simulate(schedule, nullptr, &simulation));
  pf_rank_stats stats;
  std::memset(&stats, 0xff, sizeof(stats));
  stats.struct_size = sizeof(stats);
  ASSERT_PF_OK(pf_simulation_get_rank_stats(simulation, 1, &stats));
  EXPECT_EQ(stats.local, 0);
  pf_simulation_destroy(simulation);
  pf_schedule_destroy(schedule);
}

TEST_F(ProcessOptions, OnePerRankWithoutMpirunIsRefusedClearly) {
  pf_trainer_options options = Options(2);
  options.schedule = "1f1b";
  options.ranks = 2;
  options.processes = PF_PROCESSES_MPI;
  ExpectCreateFails(options, PF_FAILED_PRECONDITION, {"PF_PROCESSES_MPI", "not launched by mpirun", "mpirun -np 2"});
  options.data_parallel = 3;
  ExpectCreateFails(options, PF_FAILED_PRECONDITION, {"mpirun -np 6"});
  pf_trainer_options sequential = Options(2);
  sequential.processes = PF_PROCESSES_MPI;
  ExpectCreateFails(sequential, PF_INVALID_ARGUMENT, {"PF_PROCESSES_MPI", "no schedule"});
  options = Options(2);
  options.processes = 3;
  ExpectCreateFails(options, PF_INVALID_ARGUMENT, {"options->processes is 3", "pf_processes"});
  options.processes = -1;
  ExpectCreateFails(options, PF_INVALID_ARGUMENT, {"options->processes is -1"});
}

TEST_F(ProcessOptions, DataParallelWithAScheduleNamesTheLaunchItNeeds) {
  pf_trainer_options options = Options(2);
  options.schedule = "1f1b";
  options.stages = 2;
  options.data_parallel = 2;
  ExpectCreateFails(options, PF_FAILED_PRECONDITION, {"options->data_parallel is 2", "mpirun -np 4",
                                                       "not launched by mpirun"});
  options.processes = PF_PROCESSES_THREADS;
  ExpectCreateFails(options, PF_INVALID_ARGUMENT, {"options->data_parallel is 2", "mpirun -np 4",
                                                    "PF_PROCESSES_THREADS"});
  // P comes from the schedule text when there is one.
  options = Options(2);
  options.schedule_text = "0F0 0F1 0BW0 0BW1\n1F0 1F1 1BW0 1BW1\n2F0 2F1 2BW0 2BW1\n";
  options.data_parallel = 2;
  ExpectCreateFails(options, PF_FAILED_PRECONDITION, {"mpirun -np 6"});
  options = Options(2);
  options.data_parallel = 0;
  ExpectCreateFails(options, PF_INVALID_ARGUMENT, {"options->data_parallel is 0"});
  options.data_parallel = 1;
  options.gradient_reduction = "average";
  ExpectCreateFails(options, PF_INVALID_ARGUMENT, {"options->gradient_reduction is 'average'", "deterministic"});
  options.schedule = "1f1b";
  ExpectCreateFails(options, PF_INVALID_ARGUMENT, {"options->gradient_reduction is 'average'"});
}

// Without a schedule, data_parallel D makes the sequential trainer compute what D replicas of m
// micro-batches would: the same batch of D x m micro-batches, the replicas' gradients added in
// replica order. That is the arithmetic of one trainer with D x m micro-batches up to float rounding.
TEST_F(ProcessOptions, SequentialDataParallelReproducesDReplicas) {
  pf_trainer_options plain_options = Options(4);
  plain_options.optimizer = PF_OPTIMIZER_SGD;
  plain_options.lr = 0.1f;
  pf_trainer* plain = MakeTrainer(plain_options);
  pf_trainer_options dp_options = plain_options;
  dp_options.micro_batches = 2;  // per replica
  dp_options.data_parallel = 2;
  dp_options.gradient_reduction = "deterministic";
  pf_trainer* dp = MakeTrainer(dp_options);
  ASSERT_NE(dp, nullptr);
  pf_step_result a{}, b{};
  a.struct_size = b.struct_size = sizeof(pf_step_result);
  for (int step = 0; step < 3; ++step) {
    const pftest::Rows data = MakeRows(step, 16);
    Views views(data);
    ASSERT_PF_OK(pf_trainer_step(plain, &views.inputs, &views.targets, &a));
    ASSERT_PF_OK(pf_trainer_step(dp, &views.inputs, &views.targets, &b));
    EXPECT_EQ(b.samples, 16);
    EXPECT_NEAR(b.loss, a.loss, 1e-5 * std::abs(a.loss));
    EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-4 * std::abs(a.grad_norm));
  }
  for (const char* name : {"fc0.weight", "head.bias"}) {
    const std::vector<float> x = Parameter(plain, name), y = Parameter(dp, name);
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-5f) << name << "[" << i << "]";
  }
  pf_trainer_destroy(plain);
  pf_trainer_destroy(dp);
}

// A loader step takes D x m micro-batches: the data position moves by D x m, and an error names the
// micro-batch out of D x m.
TEST_F(ProcessOptions, LoaderStepsTakeEveryReplicasMicroBatches) {
  pf_trainer_options options = Options(2);
  options.data_parallel = 3;
  pf_trainer* t = MakeTrainer(options);
  ASSERT_NE(t, nullptr);
  pftest::PositionLoader loader;
  const pf_data_loader vtable = loader.vtable();
  ASSERT_PF_OK(pf_trainer_set_data_loader(t, &vtable));
  pf_step_result result{};
  result.struct_size = sizeof(result);
  ASSERT_PF_OK(pf_trainer_step_from_loader(t, &result));
  EXPECT_EQ(result.samples, 3 * 2 * loader.rows);
  pf_metrics metrics{};
  metrics.struct_size = sizeof(metrics);
  ASSERT_PF_OK(pf_trainer_get_metrics(t, &metrics));
  EXPECT_EQ(metrics.data_position, 6);
  loader.fail_at = 6 + 4;
  EXPECT_PF_ERROR(pf_trainer_step_from_loader(t, nullptr), PF_CALLBACK_ERROR, "micro-batch 4 of 6",
                  "asked to fail");
  ASSERT_PF_OK(pf_trainer_get_metrics(t, &metrics));
  EXPECT_EQ(metrics.data_position, 6);  // the failed step took nothing
  pf_trainer_destroy(t);
}

// A caller built against the 0.2 header passes a struct that ends at `devices`: it is accepted and
// the 0.3 fields take their defaults, whatever lies beyond the caller's struct.
TEST_F(ProcessOptions, VersionTwoOptionsStructStillAccepted) {
  pf_trainer* reference = MakeTrainer(Options(2));
  Train(reference, 1);
  const std::string expected = Checksum(reference);
  pf_trainer_destroy(reference);
  pf_trainer_options options = Options(2);
  options.schedule = "1f1b";
  options.stages = 2;
  options.processes = 99;        // beyond the 0.2 size: must be ignored
  options.data_parallel = -4;
  options.gradient_reduction = "bogus";
  options.ranks = 5;
  options.struct_size = static_cast<uint32_t>(offsetof(pf_trainer_options, processes));
  pf_trainer* t = MakeTrainer(options);
  ASSERT_NE(t, nullptr);
  int32_t ranks = 0;
  EXPECT_PF_OK(pf_trainer_num_ranks(t, &ranks));
  EXPECT_EQ(ranks, 2);
  Train(t, 1);
  EXPECT_EQ(Checksum(t), expected);
  pf_trainer_destroy(t);
}

// Parameter reads, writes and shapes on the threads trainer are unchanged by the process checks.
TEST_F(ProcessOptions, ParametersOfAThreadsPipelineAreAllHere) {
  pf_trainer_options options = Options(2);
  options.schedule = "gpipe";
  options.ranks = 2;
  pf_trainer* t = MakeTrainer(options);
  ASSERT_NE(t, nullptr);
  pf_trainer* s = MakeTrainer(Options(2));
  for (const char* name : {"fc0.weight", "head.weight"}) {
    std::vector<float> values = Parameter(s, name);
    for (float& v : values) v *= 0.5f;
    ASSERT_PF_OK(pf_trainer_set_parameter(t, name, values.data(), values.size()));
    ASSERT_PF_OK(pf_trainer_set_parameter(s, name, values.data(), values.size()));
    EXPECT_EQ(Parameter(t, name), values);
  }
  Train(t, 2);
  Train(s, 2);
  EXPECT_EQ(Checksum(t), Checksum(s));
  pf_trainer_destroy(t);
  pf_trainer_destroy(s);
}

}  // namespace

// One process per rank through the C API, under real mpirun processes (mpirun_gtest.sh N): every
// process runs these tests in the same order, since most calls are collective. Each process also
// trains the single-process sequential reference itself, so that "bitwise equal" needs no
// communication in the test. Runs on 2 processes (1F1B over 2 ranks; data parallel 2 x 1) and on 4
// (1F1B over 4 ranks; data parallel 2 x 2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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
using pftest::Views;

int EnvInt(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? -1 : std::atoi(v);
}

int LaunchSize() { return EnvInt("OMPI_COMM_WORLD_SIZE"); }
int LaunchRank() { return EnvInt("OMPI_COMM_WORLD_RANK"); }

pf_trainer_options Options(int micro_batches) {
  pf_trainer_options o = pftest::Options(micro_batches);
  o.clip_norm = 0.5f;             // the norm is reduced over the processes
  o.recv_timeout_seconds = 60;    // 4 processes share 2 cores
  return o;
}

pf_trainer* Create(pf_model* model, const pf_trainer_options& options) {
  pf_trainer* trainer = nullptr;
  EXPECT_PF_OK(pf_trainer_create(model, &options, &trainer));
  return trainer;
}

std::vector<pf_step_result> Train(pf_trainer* trainer, int steps) {
  std::vector<pf_step_result> results;
  for (int step = 0; step < steps; ++step) {
    const pftest::Rows rows = MakeRows(step, 16);
    Views views(rows);
    pf_step_result r{};
    r.struct_size = sizeof(r);
    EXPECT_PF_OK(pf_trainer_step(trainer, &views.inputs, &views.targets, &r));
    results.push_back(r);
  }
  return results;
}

// Step results within float rounding (1e-5 relative) of the reference's: a split model's sums.
void ExpectWithinRounding(const std::vector<pf_step_result>& got, const std::vector<pf_step_result>& expected) {
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i].loss, expected[i].loss, 1e-5 * std::max(1.0, std::fabs(expected[i].loss))) << "step " << i;
    EXPECT_NEAR(got[i].grad_norm, expected[i].grad_norm, 1e-5 * std::max(1.0, expected[i].grad_norm)) << "step " << i;
  }
}

size_t Count(const pf_trainer* trainer, const std::string& name) {
  int64_t shape[8];
  size_t ndim = 0;
  EXPECT_PF_OK(pf_trainer_parameter_shape(trainer, name.c_str(), shape, 8, &ndim));  // any process
  size_t n = 1;
  for (size_t i = 0; i < ndim; ++i) n *= static_cast<size_t>(shape[i]);
  return n;
}

class ProcessApi : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GT(LaunchSize(), 1) << "run under mpirun with 2 or more processes (tests/c_api/mpirun_gtest.sh)";
  }
};

// 1F1B with one process per rank (P = the launch size): the same step results and parameters as
// the sequential trainer, by pf_trainer_step and by a data loader; every process reads every rank's
// stats and knows which it ran.
TEST_F(ProcessApi, OneProcessPerRankMatchesTheSequentialTrainerBitwise) {
  const int size = LaunchSize(), me = LaunchRank();
  pf_trainer* reference = MakeTrainer(Options(4));
  const std::vector<pf_step_result> expected = Train(reference, 3);
  const std::string expected_checksum = Checksum(reference);
  pf_trainer_destroy(reference);

  pf_trainer_options options = Options(4);
  options.schedule = "1f1b";
  options.ranks = size;  // processes: PF_PROCESSES_AUTO
  pf_trainer* t = MakeTrainer(options);
  ASSERT_NE(t, nullptr);
  int32_t rank = -1, launch = -1, ranks = -1;
  ASSERT_PF_OK(pf_trainer_process(t, &rank, &launch));
  EXPECT_EQ(rank, me);
  EXPECT_EQ(launch, size);
  ASSERT_PF_OK(pf_trainer_num_ranks(t, &ranks));
  EXPECT_EQ(ranks, size);
  const std::vector<pf_step_result> got = Train(t, 3);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].loss, expected[i].loss) << "step " << i;
    EXPECT_EQ(got[i].grad_norm, expected[i].grad_norm) << "step " << i;
    EXPECT_EQ(got[i].samples, expected[i].samples);
  }
  for (int32_t r = 0; r < size; ++r) {
    pf_rank_stats stats;
    std::memset(&stats, 0, sizeof(stats));
    stats.struct_size = sizeof(stats);
    ASSERT_PF_OK(pf_trainer_get_rank_stats(t, r, &stats));
    EXPECT_EQ(stats.local, r == me ? 1 : 0) << "rank " << r;
    EXPECT_GT(stats.busy, 0.0) << "rank " << r << ": every rank's stats reach every process";
  }
  EXPECT_EQ(Checksum(t), expected_checksum);  // collective
  pf_trainer_destroy(t);

  // The same through a data loader (every process pulls the step's micro-batches).
  pf_trainer* ref_loader = MakeTrainer(Options(4));
  pftest::PositionLoader ref_source;
  const pf_data_loader ref_vtable = ref_source.vtable();
  ASSERT_PF_OK(pf_trainer_set_data_loader(ref_loader, &ref_vtable));
  t = MakeTrainer(options);
  pftest::PositionLoader source;
  const pf_data_loader vtable = source.vtable();
  ASSERT_PF_OK(pf_trainer_set_data_loader(t, &vtable));
  for (int step = 0; step < 2; ++step) {
    pf_step_result a{}, b{};
    a.struct_size = b.struct_size = sizeof(pf_step_result);
    ASSERT_PF_OK(pf_trainer_step_from_loader(ref_loader, &a));
    ASSERT_PF_OK(pf_trainer_step_from_loader(t, &b));
    EXPECT_EQ(b.loss, a.loss) << "step " << step;
  }
  pf_metrics metrics{};
  metrics.struct_size = sizeof(metrics);
  ASSERT_PF_OK(pf_trainer_get_metrics(t, &metrics));
  EXPECT_EQ(metrics.data_position, 8);
  EXPECT_EQ(Checksum(t), Checksum(ref_loader));
  pf_trainer_destroy(t);
  pf_trainer_destroy(ref_loader);
}

// Tensor parallelism through config entries (no struct field needed): every process is a member
// of one group of T = the launch size, the step results within float rounding of the sequential
// trainer's, and each process holds its slice of a split parameter.
TEST_F(ProcessApi, TensorParallelThroughConfigEntries) {
  const int size = LaunchSize();
  pf_trainer* reference = MakeTrainer(Options(4));
  const std::vector<pf_step_result> expected = Train(reference, 3);
  pf_trainer_destroy(reference);

  pf_trainer_options options = Options(4);
  const std::string t = std::to_string(size);
  const pf_config_entry entries[] = {{"tensor_parallel", t.c_str()}, {"tensor_reduction", "deterministic"}};
  options.config_entries = entries;
  options.num_config_entries = 2;
  pf_trainer* trainer = MakeTrainer(options);
  ASSERT_NE(trainer, nullptr);
  const std::vector<pf_step_result> got = Train(trainer, 3);
  ExpectWithinRounding(got, expected);
  // MakeDeepMlp: fc0 (features -> 16) is column-parallel: 16 / T of its rows here.
  EXPECT_EQ(Count(trainer, "fc0.weight"), static_cast<size_t>(16 / size * pftest::kFeatures));
  pf_trainer_destroy(trainer);
}

// Tensor x pipeline parallelism through the C API: T = 2 members for each of P = size / 2 pipeline
// ranks (1F1B), within float rounding of the sequential trainer; stages of 4 and 3 layers make fc0 /
// fc1 and fc2 / head column / row pairs, so fc0's weight and the head's are split on every process.
TEST_F(ProcessApi, TensorAndPipelineParallelThroughConfigEntries) {
  const int size = LaunchSize();
  if (size != 4) GTEST_SKIP() << "T 2 x P 2 needs 4 processes; this launch has " << size;
  pf_trainer* reference = MakeTrainer(Options(4));
  const std::vector<pf_step_result> expected = Train(reference, 3);
  pf_trainer_destroy(reference);

  pf_trainer_options options = Options(4);
  options.schedule = "1f1b";
  options.ranks = 2;
  const int32_t counts[] = {4, 3};
  options.layers_per_stage = counts;
  options.num_layers_per_stage = 2;
  const pf_config_entry entries[] = {{"tensor_parallel", "2"}};
  options.config_entries = entries;
  options.num_config_entries = 1;
  pf_trainer* trainer = MakeTrainer(options);
  ASSERT_NE(trainer, nullptr);
  const std::vector<pf_step_result> got = Train(trainer, 3);
  ExpectWithinRounding(got, expected);
  EXPECT_EQ(Count(trainer, "fc0.weight"), static_cast<size_t>(16 / 2 * pftest::kFeatures));
  EXPECT_EQ(Count(trainer, "head.weight"), static_cast<size_t>(pftest::kClasses * 16 / 2));
  pf_trainer_destroy(trainer);
}

// Fail-slow adaptation with one process per rank: rank 1 emulated 4x slow, every process moves
// the same layers off it at the same step (parameters and optimizer state over the launch), and
// every step stays bitwise equal to the sequential trainer.
TEST_F(ProcessApi, AdaptationMovesLayersBetweenProcessesBitwise) {
  const int size = LaunchSize();
  pf_model* model = MakeDeepMlp(256);
  pf_trainer* reference = Create(model, Options(4));
  pf_model_destroy(model);
  const std::vector<pf_step_result> expected = Train(reference, 8);
  const std::string expected_checksum = Checksum(reference);
  pf_trainer_destroy(reference);

  pf_trainer_options options = Options(4);
  options.schedule = "1f1b";
  options.ranks = size;
  options.adapt = 1;
  options.slow_rank = 1;
  options.slow_factor = 4;
  model = MakeDeepMlp(256);
  pf_trainer* t = Create(model, options);
  pf_model_destroy(model);
  ASSERT_NE(t, nullptr);
  const std::vector<pf_step_result> got = Train(t, 8);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].loss, expected[i].loss) << "step " << i;
    EXPECT_EQ(got[i].grad_norm, expected[i].grad_norm) << "step " << i;
  }
  const char* moves = nullptr;
  ASSERT_PF_OK(pf_trainer_adaptations_json(t, &moves));
  ASSERT_NE(moves, nullptr);
  EXPECT_NE(std::string(moves).find("\"to\""), std::string::npos) << "no re-partition: " << moves;
  EXPECT_EQ(Checksum(t), expected_checksum);  // collective
  pf_trainer_destroy(t);
}

// Each process reads and writes the parameters of its own stages; another process's are refused,
// naming the parameter and the rank that holds them. Writing every parameter in its own process
// gives the parameters the sequential trainer has after the same writes.
TEST_F(ProcessApi, ParametersLiveInTheProcessOfTheirStage) {
  const int size = LaunchSize();
  pf_model* ref_model = MakeDeepMlp();
  pf_trainer* reference = Create(ref_model, Options(2));
  Train(reference, 1);
  pf_model* model = MakeDeepMlp();
  pf_trainer_options options = Options(2);
  options.schedule = "gpipe";
  options.ranks = size;
  options.processes = PF_PROCESSES_MPI;
  pf_trainer* t = Create(model, options);
  ASSERT_NE(t, nullptr);
  Train(t, 1);
  int local = 0, remote = 0;
  for (const std::string& name : pftest::ParameterNames(model)) {
    const size_t n = Count(t, name);
    std::vector<float> expected(n), got(n, -7.0f);
    ASSERT_PF_OK(pf_trainer_get_parameter(reference, name.c_str(), expected.data(), n));
    pf_status* status = pf_trainer_get_parameter(t, name.c_str(), got.data(), n);
    std::vector<float> halved = expected;
    for (float& v : halved) v *= 0.5f;
    ASSERT_PF_OK(pf_trainer_set_parameter(reference, name.c_str(), halved.data(), n));
    if (status == nullptr) {
      local += 1;
      EXPECT_EQ(got, expected) << name;
      EXPECT_PF_OK(pf_trainer_set_parameter(t, name.c_str(), halved.data(), n));
      continue;
    }
    remote += 1;
    const std::string message = pf_status_message(status);
    EXPECT_EQ(pf_status_code(status), PF_FAILED_PRECONDITION) << message;
    EXPECT_NE(message.find("'" + name + "'"), std::string::npos) << message;
    EXPECT_NE(message.find("held by pipeline rank "), std::string::npos) << message;
    pf_status_destroy(status);
    EXPECT_EQ(got, std::vector<float>(n, -7.0f)) << "untouched on error";
    EXPECT_PF_ERROR(pf_trainer_set_parameter(t, name.c_str(), halved.data(), n), PF_FAILED_PRECONDITION,
                    "held by pipeline rank");
  }
  EXPECT_GT(local, 0);
  EXPECT_GT(remote, 0);
  // Every parameter was written exactly where it lives: the whole model equals the reference.
  EXPECT_EQ(Checksum(t), Checksum(reference));
  Train(t, 1);
  Train(reference, 1);
  EXPECT_EQ(Checksum(t), Checksum(reference));

  // A checkpoint across processes (a folder of shards, TMPDIR being the launch's own): it loads into
  // a trainer of one process, and resuming from it is bitwise the run that went on.
  const char* tmp = std::getenv("TMPDIR");
  const std::string folder = std::string(tmp != nullptr ? tmp : "/tmp") + "/process_api_checkpoint";
  EXPECT_PF_OK(pf_trainer_save_checkpoint(t, folder.c_str()));
  const std::string saved = Checksum(t);
  pf_trainer* single = MakeTrainer(Options(2));
  EXPECT_PF_OK(pf_trainer_load_checkpoint(single, folder.c_str()));
  EXPECT_EQ(Checksum(single), saved);
  pf_trainer_destroy(single);
  Train(t, 1);
  const std::string went_on = Checksum(t);
  EXPECT_PF_OK(pf_trainer_load_checkpoint(t, folder.c_str()));
  EXPECT_EQ(Checksum(t), saved);
  Train(t, 1);
  EXPECT_EQ(Checksum(t), went_on);
  pf_memory_stats memory;
  std::memset(&memory, 0, sizeof(memory));
  memory.struct_size = sizeof(memory);
  EXPECT_PF_OK(pf_trainer_memory_stats(t, &memory));
  EXPECT_GT(memory.parameters_current, 0);
  pf_trainer_destroy(t);

  // The model lives on after its trainer; a trainer of one process gets every parameter back.
  pf_trainer* again = Create(model, Options(2));
  pf_trainer* fresh = MakeTrainer(Options(2));
  Train(again, 2);
  Train(fresh, 2);
  EXPECT_EQ(Checksum(again), Checksum(fresh));
  pf_trainer_destroy(again);
  pf_trainer_destroy(fresh);
  pf_model_destroy(model);
  pf_trainer_destroy(reference);
  pf_model_destroy(ref_model);
}

// Data parallel: D = 2 replicas of P = size / 2 ranks. "deterministic" is bitwise the sequential
// trainer with data_parallel 2; "allreduce" agrees within float rounding.
TEST_F(ProcessApi, DataParallelReplicas) {
  const int size = LaunchSize(), me = LaunchRank();
  ASSERT_EQ(size % 2, 0);
  const int p = size / 2;
  pf_trainer_options seq = Options(2);
  seq.data_parallel = 2;
  pf_trainer* reference = MakeTrainer(seq);
  const std::vector<pf_step_result> expected = Train(reference, 2);
  const std::string expected_checksum = Checksum(reference);
  pf_trainer_destroy(reference);
  for (const char* reduction : {"deterministic", "allreduce"}) {
    SCOPED_TRACE(reduction);
    pf_trainer_options options = Options(2);  // per replica
    options.schedule = "1f1b";
    options.ranks = p;
    options.data_parallel = 2;
    options.gradient_reduction = reduction;
    pf_trainer* t = MakeTrainer(options);
    ASSERT_NE(t, nullptr);
    int32_t rank = -1, launch = -1;
    ASSERT_PF_OK(pf_trainer_process(t, &rank, &launch));
    EXPECT_EQ(rank, me);
    EXPECT_EQ(launch, size);
    const std::vector<pf_step_result> got = Train(t, 2);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].samples, 16);
      EXPECT_NEAR(got[i].loss, expected[i].loss, 1e-6 * std::abs(expected[i].loss));
    }
    for (int32_t r = 0; r < p; ++r) {
      pf_rank_stats stats;
      std::memset(&stats, 0, sizeof(stats));
      stats.struct_size = sizeof(stats);
      ASSERT_PF_OK(pf_trainer_get_rank_stats(t, r, &stats));
      // Launch rank = replica + 2 x pipeline rank (comm::make_process_grid: T = 1, D = 2).
      EXPECT_EQ(stats.local, r == me / 2 ? 1 : 0) << "rank " << r;
    }
    const std::string checksum = Checksum(t);
    if (std::string(reduction) == "deterministic") {
      EXPECT_EQ(checksum, expected_checksum);
      for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].loss, expected[i].loss) << "step " << i;
    }
    // The loader path takes D x m micro-batches per step.
    pftest::PositionLoader source;
    const pf_data_loader vtable = source.vtable();
    ASSERT_PF_OK(pf_trainer_set_data_loader(t, &vtable));
    pf_step_result r{};
    r.struct_size = sizeof(r);
    ASSERT_PF_OK(pf_trainer_step_from_loader(t, &r));
    EXPECT_EQ(r.samples, 2 * 2 * source.rows);
    pf_metrics metrics{};
    metrics.struct_size = sizeof(metrics);
    ASSERT_PF_OK(pf_trainer_get_metrics(t, &metrics));
    EXPECT_EQ(metrics.data_position, 4);
    pf_trainer_destroy(t);
  }
}

// PF_PROCESSES_THREADS under mpirun: each process trains a whole pipeline of its own. No schedule:
// the sequential trainer in each process, whatever `processes` says under PF_PROCESSES_AUTO.
TEST_F(ProcessApi, ThreadsAndSequentialStayInTheirProcess) {
  pf_trainer* reference = MakeTrainer(Options(2));
  Train(reference, 2);
  const std::string expected = Checksum(reference);
  pf_trainer_destroy(reference);
  pf_trainer_options options = Options(2);
  options.schedule = "1f1b";
  options.ranks = 3;  // any P: the launch is not split
  options.processes = PF_PROCESSES_THREADS;
  pf_trainer* threads = MakeTrainer(options);
  pf_trainer* sequential = MakeTrainer(Options(2));
  ASSERT_NE(threads, nullptr);
  for (pf_trainer* t : {threads, sequential}) {
    int32_t rank = -1, size = -1;
    ASSERT_PF_OK(pf_trainer_process(t, &rank, &size));
    EXPECT_EQ(rank, 0);
    EXPECT_EQ(size, 1);
    Train(t, 2);
    EXPECT_EQ(Checksum(t), expected);
  }
  pf_trainer_destroy(threads);
  pf_trainer_destroy(sequential);
}

// What one process per rank refuses, the same way in every process (so none waits for the others).
TEST_F(ProcessApi, RefusalsNameTheFix) {
  const int size = LaunchSize();
  pf_model* model = MakeDeepMlp();
  pf_trainer* const sentinel = reinterpret_cast<pf_trainer*>(0x1);
  pf_trainer* out = sentinel;
  pf_trainer_options options = Options(2);
  options.schedule = "1f1b";
  options.ranks = size + 1;
  const std::string np = "mpirun -np " + std::to_string(size + 1);
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &out), PF_INVALID_ARGUMENT, np.c_str());
  options.ranks = size;
  options.data_parallel = 2;
  const std::string np2 = "mpirun -np " + std::to_string(2 * size);
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &out), PF_INVALID_ARGUMENT, np2.c_str());
  options.data_parallel = 1;
  // A CUDA device per process (GPU ranks in separate processes): here, without a GPU, or with the
  // two processes on one GPU, each process refuses naming the option.
  options.devices = "cuda:0";
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &out), PF_INVALID_ARGUMENT, "options->devices");
  EXPECT_EQ(out, sentinel);
  // The model is still usable: none of the refusals left a trainer on it.
  options.devices = nullptr;
  pf_trainer* t = Create(model, options);
  ASSERT_NE(t, nullptr);
  Train(t, 1);
  Checksum(t);
  pf_trainer_destroy(t);
  pf_model_destroy(model);
}

}  // namespace

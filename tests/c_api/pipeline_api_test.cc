// Pipelined training through the C API: options->schedule makes the trainer run one worker per rank;
// its parameters stay bitwise equal to the sequential trainer's, and the last step's measurements
// (rank stats, bubble rate, timeline) are readable. Bad input for the new options and functions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <fstream>
#include <string>

#include "runtime/backend/cuda_backend.h"
#include "tests/c_api/test_util.h"

namespace {

using pftest::Checksum;
using pftest::MakeDeepMlp;
using pftest::MakeRows;
using pftest::MakeTrainer;
using pftest::Options;
using pftest::Rows;
using pftest::Views;
using pftest::Views;

void Train(pf_trainer* trainer, int steps) {
  for (int step = 0; step < steps; ++step) {
    const pftest::Rows rows = MakeRows(step, 16);
    Views views(rows);
    ASSERT_PF_OK(pf_trainer_step(trainer, &views.inputs, &views.targets, nullptr));
  }
}

TEST(PipelineApi, EverySynchronousScheduleMatchesTheSequentialTrainerBitwise) {
  pf_trainer* reference = MakeTrainer(Options(4));
  Train(reference, 3);
  const std::string expected = Checksum(reference);
  pf_trainer_destroy(reference);

  struct Case {
    const char* schedule;
    int stages, chunks;
  } cases[] = {{"gpipe", 2, 1}, {"1f1b", 3, 1}, {"interleaved-1f1b", 2, 2}, {"bfs", 2, 2},
               {"zb-h1", 4, 1}, {"zb-h2", 2, 1}, {"zb-v", 2, 1},        {"zb-auto", 3, 1}};
  for (const Case& c : cases) {
    pf_trainer_options options = Options(4);
    options.schedule = c.schedule;
    options.stages = c.stages;
    options.chunks = c.chunks;
    pf_trainer* pipelined = MakeTrainer(options);
    ASSERT_NE(pipelined, nullptr) << c.schedule;
    Train(pipelined, 3);
    EXPECT_EQ(Checksum(pipelined), expected) << c.schedule;
    int32_t ranks = 0;
    EXPECT_PF_OK(pf_trainer_num_ranks(pipelined, &ranks));
    EXPECT_EQ(ranks, c.stages) << c.schedule;
    pf_trainer_destroy(pipelined);
  }
}

// micro_batches left at its default (0, what pf_trainer_options_init sets) takes 2 x the pipeline
// ranks with a schedule, so that the ranks overlap (bitwise the sequential trainer given that
// count; a batch it does not divide is refused naming the count), and 1 without one.
TEST(PipelineApi, TheDefaultMicroBatchesOverlapTheRanks) {
  pf_trainer_options defaults;
  pf_trainer_options_init(&defaults);
  EXPECT_EQ(defaults.micro_batches, 0);
  const auto checksum_after_two_steps = [](const pf_trainer_options& options) {
    pf_trainer* trainer = MakeTrainer(options);
    if (trainer == nullptr) return std::string("(no trainer)");
    Train(trainer, 2);
    const std::string sum = Checksum(trainer);
    pf_trainer_destroy(trainer);
    return sum;
  };
  pf_trainer_options pipelined = Options(0);
  pipelined.schedule = "1f1b";
  pipelined.stages = 2;
  EXPECT_EQ(checksum_after_two_steps(pipelined), checksum_after_two_steps(Options(4)));
  EXPECT_NE(checksum_after_two_steps(Options(4)), checksum_after_two_steps(Options(1)));
  EXPECT_EQ(checksum_after_two_steps(Options(0)), checksum_after_two_steps(Options(1)));

  pf_trainer* trainer = MakeTrainer(pipelined);
  ASSERT_NE(trainer, nullptr);
  const Rows six = MakeRows(0, 6);
  Views views(six);
  EXPECT_PF_ERROR(pf_trainer_step(trainer, &views.inputs, &views.targets, nullptr), PF_INVALID_ARGUMENT,
                  "batch of 6 rows cannot be split into 4 equal micro-batches");
  pf_trainer_destroy(trainer);
}

TEST(PipelineApi, ScheduleTextAndExplicitPartition) {
  pf_trainer* reference = MakeTrainer(Options(2));
  Train(reference, 2);
  // Two ranks, the MLP's 7 top-level layers split 3 + 4, GPipe order written by hand.
  pf_trainer_options options = Options(2);
  options.schedule_text = "0F0 0F1 0BW0 0BW1\n1F0 1F1 1BW0 1BW1\n";
  const int32_t layers[] = {3, 4};
  options.layers_per_stage = layers;
  options.num_layers_per_stage = 2;
  pf_trainer* pipelined = MakeTrainer(options);
  ASSERT_NE(pipelined, nullptr);
  Train(pipelined, 2);
  EXPECT_EQ(Checksum(pipelined), Checksum(reference));

  pf_rank_stats stats;
  stats.struct_size = sizeof(stats);
  ASSERT_PF_OK(pf_trainer_get_rank_stats(pipelined, 1, &stats));
  EXPECT_GT(stats.busy, 0.0);
  EXPECT_GE(stats.finish, stats.first_start);
  EXPECT_EQ(stats.peak_activations, 2);  // GPipe: both micro-batches alive before the backwards
  EXPECT_GT(stats.peak_activation_bytes, 0.0);
  double bubble = -1;
  ASSERT_PF_OK(pf_trainer_get_bubble_rate(pipelined, &bubble));
  EXPECT_GE(bubble, 0.0);
  EXPECT_LT(bubble, 1.0);
  const char* trace = nullptr;
  ASSERT_PF_OK(pf_trainer_timeline_to_chrome_trace(pipelined, &trace));
  EXPECT_NE(std::string(trace).find("1BW0"), std::string::npos);
  const char* svg = nullptr;
  ASSERT_PF_OK(pf_trainer_timeline_to_svg(pipelined, &svg));
  EXPECT_NE(std::string(svg).find("<svg"), std::string::npos);
  pf_trainer_destroy(pipelined);
  pf_trainer_destroy(reference);
}

// Activation memory through the C API (since 0.2): every policy keeps the parameters bitwise equal
// to the sequential trainer's; the rank stats report what moved and the peaks drop.
TEST(PipelineApi, ActivationPoliciesKeepResultsBitwiseAndReportWhatMoved) {
  pf_trainer* reference = MakeTrainer(Options(4));
  Train(reference, 2);
  const std::string expected = Checksum(reference);
  pf_trainer_destroy(reference);
  const std::string dir = ::testing::TempDir() + "/capi_offload";
  double plain_peak0 = 0;
  for (const char* policy : {"none", "recompute", "offload-host", "offload-file", "selective", "balance"}) {
    pf_trainer_options options = Options(4);
    options.schedule = "1f1b";
    options.stages = 4;
    options.activation_policy = policy;
    options.offload_dir = dir.c_str();
    // The even split: rank 0 holds 4 micro-batches of its 2 layers, rank 3 one of its 1 (balance pairs them).
    const int32_t even[] = {2, 2, 2, 1};
    options.layers_per_stage = even;
    options.num_layers_per_stage = 4;
    if (std::string(policy) == "selective") options.activation_budget_bytes = 1e12;  // nothing needs to move
    pf_trainer* t = MakeTrainer(options);
    ASSERT_NE(t, nullptr) << policy;
    Train(t, 2);
    EXPECT_EQ(Checksum(t), expected) << policy;
    pf_rank_stats first;
    first.struct_size = sizeof(first);
    ASSERT_PF_OK(pf_trainer_get_rank_stats(t, 0, &first));
    const std::string p = policy;
    if (p == "none") plain_peak0 = first.peak_activation_bytes;
    if (p == "offload-host" || p == "offload-file" || p == "balance") {
      EXPECT_GT(first.offloaded_bytes, 0.0) << policy;
      EXPECT_LT(first.peak_activation_bytes, plain_peak0) << policy;
    } else {
      EXPECT_EQ(first.offloaded_bytes, 0.0) << policy;
    }
    if (p == "recompute") {
      EXPECT_GT(first.recomputes, 0) << policy;
    } else {
      EXPECT_EQ(first.recomputes, 0) << policy;
    }
    pf_trainer_destroy(t);
  }
}

// options->devices: "cpu" is the default path (bitwise the same); "cuda:0" trains on the GPU (losses
// within a tolerance of the CPU's) or, without one, fails at creation naming the device.
TEST(PipelineApi, DevicesOption) {
  pf_trainer* reference = MakeTrainer(Options(2));
  Train(reference, 2);
  const std::string expected = Checksum(reference);
  pf_metrics ref_metrics;
  ref_metrics.struct_size = sizeof(ref_metrics);
  ASSERT_PF_OK(pf_trainer_get_metrics(reference, &ref_metrics));
  pf_trainer_destroy(reference);
  for (const char* schedule : {static_cast<const char*>(nullptr), "1f1b"}) {
    pf_trainer_options options = Options(2);
    options.schedule = schedule;
    options.stages = schedule ? 2 : 1;
    options.devices = "cpu";
    pf_trainer* t = MakeTrainer(options);
    ASSERT_NE(t, nullptr);
    Train(t, 2);
    EXPECT_EQ(Checksum(t), expected) << (schedule ? schedule : "sequential");
    pf_trainer_destroy(t);

    options.devices = "cuda:0";
    pf_model* model = MakeDeepMlp();
    pf_trainer* gpu = nullptr;
    pf_status* status = pf_trainer_create(model, &options, &gpu);
    pf_model_destroy(model);
    if (pf::probe_cuda().device_count == 0) {
      ASSERT_NE(status, nullptr) << "cuda:0 accepted without a GPU";
      EXPECT_NE(std::string(pf_status_message(status)).find("cuda:0"), std::string::npos)
          << pf_status_message(status);
      EXPECT_EQ(gpu, nullptr);
      pf_status_destroy(status);
      continue;
    }
    ASSERT_EQ(status, nullptr) << pf_status_message(status);
    Train(gpu, 2);
    pf_metrics m;
    m.struct_size = sizeof(m);
    ASSERT_PF_OK(pf_trainer_get_metrics(gpu, &m));
    EXPECT_NEAR(m.last_loss, ref_metrics.last_loss, 1e-4 * std::abs(ref_metrics.last_loss) + 1e-6);
    pf_trainer_destroy(gpu);
  }
}

// A caller built against the 0.1 header passes the shorter options struct: it still works, with
// the activation fields at their defaults.
TEST(PipelineApi, VersionOneOptionsStructStillAccepted) {
  pf_trainer_options options = Options(2);
  options.schedule = "1f1b";
  options.stages = 2;
  options.activation_policy = "bogus";  // beyond the v1 size: must be ignored
  options.struct_size = static_cast<uint32_t>(offsetof(pf_trainer_options, activation_policy));
  pf_trainer* t = MakeTrainer(options);
  ASSERT_NE(t, nullptr);
  Train(t, 1);
  pf_rank_stats v1;
  v1.struct_size = static_cast<uint32_t>(offsetof(pf_rank_stats, offloaded_bytes));
  v1.offloaded_bytes = -7;
  ASSERT_PF_OK(pf_trainer_get_rank_stats(t, 0, &v1));
  EXPECT_EQ(v1.offloaded_bytes, -7);  // not written: beyond the caller's struct
  pf_trainer_destroy(t);
}

TEST(PipelineApiBadInput, OptionsAndMeasurementsReportTheProblem) {
  pf_model* model = MakeDeepMlp();
  pf_trainer* const sentinel = reinterpret_cast<pf_trainer*>(0x1);
  pf_trainer* out = sentinel;
  pf_trainer_options options = Options(2);
  options.schedule = "2f2b";
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &out), PF_INVALID_ARGUMENT, "2f2b");
  options.schedule = "1f1b";
  options.schedule_text = "0F0 0BW0";
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &out), PF_INVALID_ARGUMENT, "both set");
  options.schedule_text = nullptr;
  options.stages = 0;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &out), PF_INVALID_ARGUMENT, "ranks");
  options.stages = 2;
  options.num_layers_per_stage = 2;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &out), PF_INVALID_ARGUMENT, "layers_per_stage");
  const int32_t too_many[] = {6, 6};
  options.layers_per_stage = too_many;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &out), PF_INVALID_ARGUMENT, "layers");
  options.stages = 16;  // more stages than the model has layers
  options.layers_per_stage = nullptr;
  options.num_layers_per_stage = 0;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &out), PF_INVALID_ARGUMENT, "stage");
  options.stages = 2;
  options.activation_policy = "offload-gpu";
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &out), PF_INVALID_ARGUMENT, "offload-gpu");
  options.activation_policy = "selective";  // without a budget
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &out), PF_INVALID_ARGUMENT, "activation_budget_bytes");
  options.activation_policy = nullptr;
  EXPECT_EQ(out, sentinel);
  options.devices = "tpu:0";
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &out), PF_INVALID_ARGUMENT, "tpu:0");
  options.devices = "cuda:0,cuda:0,cuda:0";  // three devices for two ranks
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &out), PF_INVALID_ARGUMENT, "rank");
  options.devices = nullptr;
  EXPECT_EQ(out, sentinel);
  {
    pf_trainer_options seq = Options(2);
    seq.devices = "cuda:0,cuda:1";
    EXPECT_PF_ERROR(pf_trainer_create(model, &seq, &out), PF_INVALID_ARGUMENT, "one device");
    EXPECT_EQ(out, sentinel);
  }
  {
    pf_trainer_options seq = Options(2);
    seq.activation_policy = "recompute";  // no schedule: nothing to apply it to
    EXPECT_PF_ERROR(pf_trainer_create(model, &seq, &out), PF_INVALID_ARGUMENT, "no schedule");
    EXPECT_EQ(out, sentinel);
  }

  pf_trainer* sequential = nullptr;
  pf_trainer_options plain = Options(2);
  ASSERT_PF_OK(pf_trainer_create(model, &plain, &sequential));
  int32_t ranks = -1;
  EXPECT_PF_OK(pf_trainer_num_ranks(sequential, &ranks));
  EXPECT_EQ(ranks, 1);
  EXPECT_PF_ERROR(pf_trainer_num_ranks(nullptr, &ranks), PF_INVALID_ARGUMENT, "'trainer'");
  EXPECT_PF_ERROR(pf_trainer_num_ranks(sequential, nullptr), PF_INVALID_ARGUMENT, "'out'");
  pf_rank_stats stats;
  stats.struct_size = sizeof(stats);
  stats.busy = -3;
  EXPECT_PF_ERROR(pf_trainer_get_rank_stats(sequential, 0, &stats), PF_FAILED_PRECONDITION, "not pipelined");
  EXPECT_PF_ERROR(pf_trainer_get_rank_stats(nullptr, 0, &stats), PF_INVALID_ARGUMENT, "'trainer'");
  double bubble = -3;
  EXPECT_PF_ERROR(pf_trainer_get_bubble_rate(sequential, &bubble), PF_FAILED_PRECONDITION, "not pipelined");
  const char* text = "untouched";
  EXPECT_PF_ERROR(pf_trainer_timeline_to_chrome_trace(sequential, &text), PF_FAILED_PRECONDITION,
                  "not pipelined");
  EXPECT_PF_ERROR(pf_trainer_timeline_to_svg(nullptr, &text), PF_INVALID_ARGUMENT, "'trainer'");
  pf_trainer_destroy(sequential);

  pf_model* second = MakeDeepMlp();
  options = Options(2);
  options.schedule = "1f1b";
  options.stages = 2;
  pf_trainer* pipelined = nullptr;
  ASSERT_PF_OK(pf_trainer_create(second, &options, &pipelined));
  EXPECT_PF_ERROR(pf_trainer_get_rank_stats(pipelined, 0, &stats), PF_FAILED_PRECONDITION, "no step");
  Train(pipelined, 1);
  EXPECT_PF_ERROR(pf_trainer_get_rank_stats(pipelined, 2, &stats), PF_INVALID_ARGUMENT, "rank 2");
  EXPECT_EQ(stats.busy, -3);
  EXPECT_EQ(bubble, -3);
  EXPECT_STREQ(text, "untouched");
  pf_trainer_destroy(pipelined);
  pf_model_destroy(second);
  pf_model_destroy(model);
}

// Options as key/value entries (since 0.11): they win over the struct's fields, reach the runtime
// ("partition" has no field), and a bad key or value names the entry, the key and the value.
TEST(PipelineApi, ConfigEntriesSetOptionsByKey) {
  auto partition_of = [](const pf_trainer_options& options) {
    pf_trainer* t = MakeTrainer(options);
    std::vector<int32_t> counts(2, 0);
    size_t stages = 0;
    if (t != nullptr) EXPECT_PF_OK(pf_trainer_partition(t, counts.data(), counts.size(), &stages));
    pf_trainer_destroy(t);
    return counts;
  };
  pf_trainer_options options = Options(4);
  options.schedule = "1f1b";
  options.stages = 2;
  EXPECT_EQ(partition_of(options), (std::vector<int32_t>{3, 4})) << "the default balances parameters";
  const pf_config_entry even[] = {{"partition", "even"}};
  options.config_entries = even;
  options.num_config_entries = 1;
  EXPECT_EQ(partition_of(options), (std::vector<int32_t>{4, 3}));
  // An entry wins over its field.
  const pf_config_entry schedule[] = {{"schedule", "gpipe"}, {"micro_batches", "2"}};
  options.config_entries = schedule;
  options.num_config_entries = 2;
  pf_trainer* t = MakeTrainer(options);
  ASSERT_NE(t, nullptr);
  const Rows batch = MakeRows(0, 8);
  Views views(batch);
  pf_step_result r;
  r.struct_size = sizeof(r);
  ASSERT_PF_OK(pf_trainer_step(t, &views.inputs, &views.targets, &r));
  pf_trainer_destroy(t);

  pf_model* model = pftest::MakeDeepMlp();
  pf_trainer* out = nullptr;
  const pf_config_entry typo[] = {{"partiton", "even"}};
  options.config_entries = typo;
  options.num_config_entries = 1;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &out), PF_INVALID_ARGUMENT, "options->config_entries[0]",
                  "unknown config key 'partiton'", "did you mean 'partition'");
  const pf_config_entry bad[] = {{"partition", "even"}, {"ranks", "two"}};
  options.config_entries = bad;
  options.num_config_entries = 2;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &out), PF_INVALID_ARGUMENT, "options->config_entries[1]",
                  "'ranks'", "'two'");
  const pf_config_entry null_value[] = {{"partition", nullptr}};
  options.config_entries = null_value;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &out), PF_INVALID_ARGUMENT, "must not be NULL");
  // Tensor parallelism needs a process per member (tests/c_api/process_api_test.cc runs it).
  pf_trainer_options sequential = Options(4);
  const pf_config_entry split[] = {{"tensor_parallel", "2"}};
  sequential.config_entries = split;
  sequential.num_config_entries = 1;
  EXPECT_PF_ERROR(pf_trainer_create(model, &sequential, &out), PF_INVALID_ARGUMENT,
                  "config entry tensor_parallel 2 needs its group of 2 members: one process each, e.g. mpirun -np 2");
  options.config_entries = nullptr;
  options.num_config_entries = 3;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &out), PF_INVALID_ARGUMENT, "num_config_entries");
  EXPECT_EQ(out, nullptr);
  pf_model_destroy(model);
}

// A packed MLP sweep in the pipeline's bubbles (the "fill" entry, since 0.14): the steps are those
// of the run without it, and pf_trainer_fill_report_json says what the sweep did.
TEST(PipelineApi, AFillEntryRunsASweepInTheBubbles) {
  const std::string spec = ::testing::TempDir() + "/capi_fill_grid.json";
  std::ofstream(spec) << R"({"hidden": [4, 8], "repeats": 2, "samples": 200, "features": 6, "classes": 3})";
  const std::string fill = "sweep:" + spec;
  pf_trainer_options options = Options(4);
  options.schedule = "1f1b";
  options.stages = 2;
  pf_trainer* plain = MakeTrainer(options);
  const pf_config_entry entries[] = {{"fill", fill.c_str()}};
  options.config_entries = entries;
  options.num_config_entries = 1;
  pf_trainer* filled = MakeTrainer(options);
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(filled, nullptr);
  const char* report = nullptr;
  ASSERT_PF_OK(pf_trainer_fill_report_json(plain, &report));
  EXPECT_STREQ(report, "null");
  for (int step = 0; step < 4; ++step) {
    const Rows batch = MakeRows(step, 8);
    Views views(batch);
    pf_step_result a, b;
    a.struct_size = b.struct_size = sizeof(a);
    ASSERT_PF_OK(pf_trainer_step(plain, &views.inputs, &views.targets, &a));
    ASSERT_PF_OK(pf_trainer_step(filled, &views.inputs, &views.targets, &b));
    EXPECT_EQ(a.loss, b.loss) << "step " << step << ": the fill job changed the main job";
  }
  ASSERT_PF_OK(pf_trainer_fill_report_json(filled, &report));
  const std::string text = report;
  EXPECT_NE(text.find("\"kind\":\"sweep\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"model_count\":4"), std::string::npos) << text;
  EXPECT_EQ(text.find("\"steps_taken\":0,"), std::string::npos) << "no bubble was filled: " << text;
  EXPECT_PF_ERROR(pf_trainer_fill_report_json(filled, nullptr), PF_INVALID_ARGUMENT, "out");
  pf_trainer_destroy(plain);
  pf_trainer_destroy(filled);

  const pf_config_entry missing[] = {{"fill", "sweep:/nonexistent/grid.json"}};
  options.config_entries = missing;
  pf_model* model = pftest::MakeDeepMlp();
  pf_trainer* out = nullptr;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &out), PF_NOT_FOUND, "fill sweep:/nonexistent/grid.json");
  EXPECT_EQ(out, nullptr);
  pf_model_destroy(model);
}

// Neuron groups through the config entries: ppll's first stage split into width groups (3 ranks),
// deterministic, drained, and its checkpoints refused as ppll's are.
TEST(PipelineApi, NeuronGroupEntriesSplitPpllsStagesByWidth) {
  pf_trainer_options options = Options(4);
  options.schedule = "ppll";
  options.stages = 2;
  pf_trainer* depth_only = MakeTrainer(options);
  const pf_config_entry entries[] = {{"neuron_groups", "2"}, {"group_diversity", "0.5"}};
  options.config_entries = entries;
  options.num_config_entries = 2;
  pf_trainer* a = MakeTrainer(options);
  pf_trainer* b = MakeTrainer(options);
  ASSERT_NE(depth_only, nullptr);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  bool differs = false;
  for (int step = 0; step < 4; ++step) {
    const Rows batch = MakeRows(step, 8);
    Views views(batch);
    pf_step_result ra, rb, rd;
    ra.struct_size = rb.struct_size = rd.struct_size = sizeof(ra);
    ASSERT_PF_OK(pf_trainer_step(a, &views.inputs, &views.targets, &ra));
    ASSERT_PF_OK(pf_trainer_step(b, &views.inputs, &views.targets, &rb));
    ASSERT_PF_OK(pf_trainer_step(depth_only, &views.inputs, &views.targets, &rd));
    EXPECT_EQ(ra.loss, rb.loss) << "step " << step;
    EXPECT_TRUE(std::isfinite(ra.loss));
    differs = differs || (step > 0 && ra.loss != rd.loss);
  }
  EXPECT_TRUE(differs) << "splitting the stage by width trained the same network";
  ASSERT_PF_OK(pf_trainer_drain(a));
  EXPECT_PF_ERROR(pf_trainer_save_checkpoint(a, (::testing::TempDir() + "/ng.ckpt").c_str()), PF_FAILED_PRECONDITION,
                  "auxiliary heads");
  pf_trainer_destroy(depth_only);
  pf_trainer_destroy(a);
  pf_trainer_destroy(b);

  const pf_config_entry odd[] = {{"neuron_groups", "3"}};
  options.config_entries = odd;
  options.num_config_entries = 1;
  pf_model* model = pftest::MakeDeepMlp();
  pf_trainer* out = nullptr;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &out), PF_INVALID_ARGUMENT,
                  "has 16 outputs, which do not split into 3 groups");
  EXPECT_EQ(out, nullptr);
  pf_model_destroy(model);
}

}  // namespace

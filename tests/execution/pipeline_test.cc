// Measurement (timeline, busy/idle, live activations) and robustness (timeouts, failures, reuse).
#include <gtest/gtest.h>

#include "runtime/execution/pipeline_trainer.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/timeline.h"
#include "tests/execution/test_util.h"

namespace pf::exec {
namespace {

PipelineOptions options(const std::string& schedule, int p, int m, int v = 1) {
  PipelineOptions o;
  o.schedule = schedule;
  o.ranks = p;
  o.chunks = v;
  o.base.micro_batches = m;
  o.base.seed = 11;
  o.base.optimizer.lr = 1e-2f;
  return o;
}

TEST(Measurement, TimelineHasEveryActionInListOrder) {
  PipelineTrainer t(testing::tiny_gpt(), options("1f1b", 3, 4));
  t.step(testing::data_for(t.model(), 4, 0));
  const sched::Timeline& tl = t.last_timeline();
  EXPECT_EQ(tl.time_unit, "us");
  ASSERT_EQ(tl.num_ranks(), 3);
  const auto& stats = t.last_stats();
  ASSERT_EQ(stats.ranks.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    const auto& actions = t.schedule().ranks[r];
    ASSERT_EQ(tl.ranks[r].size(), actions.size());
    double prev_end = 0;
    for (size_t i = 0; i < actions.size(); ++i) {
      EXPECT_EQ(tl.ranks[r][i].action, actions[i]);
      EXPECT_GE(tl.ranks[r][i].start, prev_end - 1e-9);
      EXPECT_GE(tl.ranks[r][i].end, tl.ranks[r][i].start);
      prev_end = tl.ranks[r][i].end;
    }
    EXPECT_GT(stats.ranks[r].busy_us, 0);
    EXPECT_NEAR(stats.ranks[r].busy_us + stats.ranks[r].idle_us, stats.makespan_us, 1e-6);
    EXPECT_GE(stats.ranks[r].bubble_rate, 0);
    EXPECT_LT(stats.ranks[r].bubble_rate, 1);
    EXPECT_EQ(stats.ranks[r].actions, static_cast<int>(actions.size()));
    EXPECT_GT(stats.ranks[r].peak_activation_bytes, 0u);
  }
  EXPECT_NEAR(stats.makespan_us, tl.end_time(), 1e-6);
  EXPECT_GE(stats.step_us, stats.makespan_us);
  // The renderers take the measured timeline.
  EXPECT_NE(sched::to_chrome_trace(tl).find("\"ph\""), std::string::npos);
  EXPECT_FALSE(sched::to_ascii_grid(tl, 60).empty());
}

// Without a timeline (record_timeline off, for speed) the step's busy, communication and finish
// times are still measured: fail-slow adaptation and the bubble rate read them (they were all 0,
// so an adaptive trainer never saw a slow rank).
TEST(Measurement, BusyTimesAreMeasuredWithoutATimeline) {
  PipelineOptions o = options("1f1b", 3, 4);
  o.record_timeline = false;
  PipelineTrainer t(testing::tiny_gpt(), o);
  t.step(testing::data_for(t.model(), 4, 0));
  EXPECT_EQ(t.last_timeline().num_ranks(), 3);
  const auto& stats = t.last_stats();
  ASSERT_EQ(stats.ranks.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(t.last_timeline().ranks[r].empty()) << "rank " << r;
    EXPECT_GT(stats.ranks[r].busy_us, 0) << "rank " << r;
    EXPECT_GT(stats.ranks[r].comm_us, 0) << "rank " << r;
    EXPECT_GE(stats.ranks[r].finish_us, stats.ranks[r].busy_us + stats.ranks[r].comm_us - 1e-6) << "rank " << r;
    EXPECT_NEAR(stats.ranks[r].busy_us + stats.ranks[r].idle_us, stats.makespan_us, 1e-6);
  }
  EXPECT_GT(stats.makespan_us, 0);
}

TEST(Measurement, PeakLiveMicroBatchesEqualTheSimulator) {
  struct C {
    const char* name;
    int p, m, v;
  };
  for (const C& c : {C{"gpipe", 4, 6, 1}, C{"1f1b", 4, 6, 1}, C{"1f1b", 3, 2, 1}, C{"interleaved-1f1b", 2, 4, 2},
                     C{"bfs", 2, 3, 2}, C{"zb-h1", 4, 8, 1}, C{"zb-h2", 3, 6, 1}, C{"zb-v", 2, 4, 2},
                     C{"zb-auto", 3, 5, 1}}) {
    PipelineTrainer t(testing::tiny_mlp(), options(c.name, c.p, c.m, c.v));
    t.step(testing::data_for(t.model(), c.m, 0));
    const auto sim = sched::simulate(t.schedule(), sched::CostModel::uniform(t.schedule().num_stages()));
    ASSERT_EQ(sim.peak_activations.size(), t.last_stats().ranks.size());
    for (size_t r = 0; r < sim.peak_activations.size(); ++r)
      EXPECT_EQ(t.last_stats().ranks[r].peak_live_micro_batches, sim.peak_activations[r])
          << c.name << " p=" << c.p << " m=" << c.m << " rank " << r;
  }
}

TEST(Measurement, ActivationBytesFollowLiveContexts) {
  // GPipe keeps all m micro-batches of a stage alive, 1F1B at most p - rank on rank `rank`.
  const int m = 8;
  PipelineTrainer g(testing::tiny_mlp(), options("gpipe", 2, m));
  PipelineTrainer f(testing::tiny_mlp(), options("1f1b", 2, m));
  const Batch b = testing::data_for(g.model(), m, 0);
  g.step(b);
  f.step(b);
  EXPECT_EQ(g.last_stats().ranks[0].peak_live_micro_batches, m);
  EXPECT_EQ(f.last_stats().ranks[0].peak_live_micro_batches, 2);
  EXPECT_EQ(f.last_stats().ranks[1].peak_live_micro_batches, 1);
  EXPECT_GT(g.last_stats().ranks[0].peak_activation_bytes, 3 * f.last_stats().ranks[0].peak_activation_bytes);
}

TEST(Robustness, RecvTimeoutNamesRankActionMicroBatchAndPeerAndTrainerRecovers) {
  testing::ProbeLayer *probe0 = nullptr, *probe1 = nullptr;
  auto model = testing::probe_model(&probe0, &probe1);
  PipelineOptions o = options("1f1b", 2, 2);
  o.layers_per_stage = {2, 3};  // fc0 probe0 | fc1 probe1 head
  o.recv_timeout_seconds = 0.1;
  PipelineTrainer t(model, o);
  probe0->forward_sleep_ms = 1000;  // rank 0 is slow to produce micro-batch 0
  const Batch b0 = testing::teacher_batch(4, 8, 4, 1);
  try {
    t.step(b0);
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1RECV_F0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("micro-batch 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("for rank 0"), std::string::npos) << msg;
  }
  EXPECT_EQ(t.metrics().step, 0);
  probe0->forward_sleep_ms = 0;
  t.set_recv_timeout_seconds(60);
  // Still usable, and the failed step changed nothing: two steps equal the reference's two steps.
  testing::ProbeLayer *r0 = nullptr, *r1 = nullptr;
  SequentialTrainer ref(testing::probe_model(&r0, &r1), o.base);
  for (int s = 0; s < 2; ++s) {
    const Batch b = testing::teacher_batch(4, 8, 4, 10 + s);
    EXPECT_EQ(t.step(b).loss, ref.step(b).loss);
  }
  std::string diff;
  EXPECT_TRUE(testing::parameters_bitwise_equal(t.model(), ref.model(), &diff)) << diff;
}

TEST(Robustness, LayerFailureOnOneRankStopsAllAndTheStepThrowsIt) {
  for (bool in_backward : {false, true}) {
    testing::ProbeLayer *probe0 = nullptr, *probe1 = nullptr;
    auto model = testing::probe_model(&probe0, &probe1);
    PipelineOptions o = options("zb-h1", 3, 4);
    o.layers_per_stage = {1, 2, 2};  // fc0 | probe0 fc1 | probe1 head
    o.recv_timeout_seconds = 20;     // every rank must stop through the cancel, not a timeout
    PipelineTrainer t(model, o);
    (in_backward ? probe1->fail_backward : probe0->fail_forward) = true;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      t.step(testing::teacher_batch(8, 8, 4, 1));
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kCallbackError);
      EXPECT_NE(std::string(e.what()).find(in_backward ? "injected backward failure" : "injected forward failure"),
                std::string::npos)
          << e.what();
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
    (in_backward ? probe1->fail_backward : probe0->fail_forward) = false;
    testing::ProbeLayer *r0 = nullptr, *r1 = nullptr;
    SequentialTrainer ref(testing::probe_model(&r0, &r1), o.base);
    for (int s = 0; s < 2; ++s) {
      const Batch b = testing::teacher_batch(8, 8, 4, 20 + s);
      EXPECT_EQ(t.step(b).loss, ref.step(b).loss);
    }
    std::string diff;
    EXPECT_TRUE(testing::parameters_bitwise_equal(t.model(), ref.model(), &diff)) << diff;
    EXPECT_EQ(t.metrics().step, 2);
  }
}

TEST(Robustness, DataSourceFailureRewindsAndALaterStepWorks) {
  PipelineOptions o = options("1f1b", 2, 4);
  PipelineTrainer t(testing::tiny_mlp(), o);
  SequentialTrainer ref(testing::tiny_mlp(), o.base);
  testing::TeacherSource src(2, 12, 4), ref_src(2, 12, 4);
  t.step(src);
  ref.step(ref_src);
  src.fail_at = 6;
  try {
    t.step(src);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCallbackError);
    EXPECT_NE(std::string(e.what()).find("injected failure at position 6"), std::string::npos);
  }
  EXPECT_EQ(src.position(), 4);
  src.fail_at = -1;
  t.step(src);
  ref.step(ref_src);
  EXPECT_EQ(t.metrics().data_position, 8);
  std::string diff;
  EXPECT_TRUE(testing::parameters_bitwise_equal(t.model(), ref.model(), &diff)) << diff;
}

TEST(Measurement, BalancedPartitionFromMeasuredLayerTimesAndPinnedWorkers) {
  auto model = testing::tiny_gpt(3);
  const Batch b = testing::data_for(*model, 2, 0);
  const auto times = measure_layer_times(*model, b.micro_batch(0, 2), 2);
  ASSERT_EQ(times.size(), model->layers().size());
  for (double t : times) EXPECT_GE(t, 0.0);
  PipelineOptions o = options("1f1b", 2, 2);
  o.layers_per_stage = layer_counts(partition_balanced(times, 2));
  o.cpu_affinity = {0};  // every worker on CPU 0
  PipelineTrainer t(testing::tiny_gpt(3), o);
  SequentialTrainer ref(testing::tiny_gpt(3), o.base);
  EXPECT_EQ(t.step(b).loss, ref.step(b).loss);
  std::string diff;
  EXPECT_TRUE(testing::parameters_bitwise_equal(t.model(), ref.model(), &diff)) << diff;
}

TEST(Robustness, BadOptionsAreRejected) {
  PipelineOptions o = options("1f1b", 2, 2);
  o.recv_timeout_seconds = 0;
  EXPECT_THROW(PipelineTrainer(testing::tiny_mlp(), o), Error);
  o = options("no-such-schedule", 2, 2);
  EXPECT_THROW(PipelineTrainer(testing::tiny_mlp(), o), Error);
  o = options("1f1b", 2, 2);
  o.layers_per_stage = {1, 2};  // the MLP has 17 layers
  EXPECT_THROW(PipelineTrainer(testing::tiny_mlp(), o), Error);
  o = options("1f1b", 8, 2);
  EXPECT_THROW(PipelineTrainer(testing::tiny_mlp(2), o), Error);  // 5 layers, 8 stages
  o = options("1f1b", 2, 3);
  o.schedule_text = "0F0 0BW0\n1F0 1BW0\n";  // 1 micro-batch, options say 3
  EXPECT_THROW(PipelineTrainer(testing::tiny_mlp(), o), Error);
}

}  // namespace
}  // namespace pf::exec

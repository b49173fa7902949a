// Activation memory policies in the executor (docs/MEMORY.md): with every policy and the synchronous
// schedules, parameters after N steps are bitwise equal to SequentialTrainer's; the file tier leaves
// no file behind (also when a step fails); measured peaks match the policy pass's prediction in
// micro-batch units and never exceed a selective budget.

#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "runtime/execution/pipeline_trainer.h"
#include "runtime/schedules/activation_policy.h"
#include "runtime/schedules/schedule_request.h"
#include "runtime/schedules/simulator.h"
#include "tests/execution/test_util.h"
#include "tests/util/temp_files.h"

namespace pf::exec {
namespace {

using testing::data_for;

std::string fresh_dir(const std::string& tag) { return pftest::fresh_temp_dir("offload_" + tag); }

int files_in(const std::string& dir) { return pftest::count_files(dir); }


bool schedule_exists(const std::string& name, int p, int m, int v) {
  try {
    sched::ScheduleRequest req;
    req.name = name;
    req.ranks = p;
    req.micro_batches = m;
    req.chunks = v;
    sched::make_schedule(req);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// "" when equal; also checks the measured peaks against the prediction.
std::string run_and_compare(bool gpt, const PipelineOptions& o, int steps, PipelineTrainer** keep = nullptr) {
  auto make = [&] { return gpt ? testing::tiny_gpt() : testing::tiny_mlp(); };
  SequentialTrainer ref(make(), o.base);
  PipelineTrainer pipe(make(), o);
  for (int step = 0; step < steps; ++step) {
    const Batch batch = data_for(ref.model(), o.base.micro_batches, step);
    const StepResult a = ref.step(batch);
    const StepResult b = pipe.step(batch);
    if (a.loss != b.loss) return "loss differs at step " + std::to_string(step);
    if (a.grad_norm != b.grad_norm) return "grad norm differs at step " + std::to_string(step);
  }
  std::string diff;
  if (!testing::parameters_bitwise_equal(ref.model(), pipe.model(), &diff)) return "parameter " + diff + " differs";
  // Micro-batch units: measured == the pass's accounting == the simulator's.
  const auto units = sched::activation_peak_units(pipe.schedule());
  const auto sim = sched::simulate(pipe.schedule(), sched::CostModel::uniform(pipe.schedule().num_stages()));
  for (int r = 0; r < pipe.schedule().num_ranks(); ++r) {
    if (pipe.last_stats().ranks[r].peak_live_micro_batches != units[r])
      return "rank " + std::to_string(r) + " measured peak " +
             std::to_string(pipe.last_stats().ranks[r].peak_live_micro_batches) + " units, predicted " +
             std::to_string(units[r]);
    if (sim.peak_activations[r] != units[r]) return "simulator disagrees on rank " + std::to_string(r);
  }
  // Bytes: measured == the prediction from the measured per-stage costs (every policy plans them).
  if (pipe.parts().memory.planned()) {
    const auto& pred = pipe.parts().memory.predicted_peak_bytes();
    for (int r = 0; r < pipe.schedule().num_ranks(); ++r)
      if (static_cast<double>(pipe.last_stats().ranks[r].peak_activation_bytes) != pred[r])
        return "rank " + std::to_string(r) + " measured peak " +
               std::to_string(pipe.last_stats().ranks[r].peak_activation_bytes) + " bytes, predicted " +
               std::to_string(pred[r]);
  }
  if (keep) *keep = nullptr;
  return "";
}

using Case = testing::ScheduleCase;

class OffloadEquivalence : public ::testing::TestWithParam<std::tuple<Case, std::string>> {};

TEST_P(OffloadEquivalence, BitwiseEqualAndNoFilesLeft) {
  const Case c = std::get<0>(GetParam());
  const std::string policy = std::get<1>(GetParam());
  const std::string dir = fresh_dir(c.schedule + "_" + policy);
  int ran = 0, variant = 0;
  for (int p : {2, 4}) {
    for (int m : {4, 8}) {
      if (!schedule_exists(c.schedule, p, m, c.chunks)) continue;
      for (bool gpt : {false, true}) {
        PipelineOptions o;
        o.schedule = c.schedule;
        o.ranks = p;
        o.chunks = c.chunks;
        o.base = testing::varied_options(m, variant++);
        o.activation_policy = policy;
        o.offload_dir = dir;
        if (policy == "selective") o.activation_budget_bytes = 1;  // replaced below by a feasible one
        if (policy == "selective") {
          // Half-way between the smallest feasible budget and the no-offload peak.
          PipelineOptions probe = o;
          probe.activation_policy = "none";
          PipelineTrainer t(gpt ? testing::tiny_gpt() : testing::tiny_mlp(), probe);
          t.plan_activation_memory(data_for(t.model(), m, 0).micro_batch(0, m));
          const double lo = sched::min_activation_budget(t.schedule(), t.parts().memory.costs());
          double hi = 0;
          for (double v : sched::activation_peak_bytes(t.schedule(), t.parts().memory.costs())) hi = std::max(hi, v);
          o.activation_budget_bytes = std::floor((lo + hi) / 2);
        }
        ++ran;
        EXPECT_EQ(run_and_compare(gpt, o, 2), "")
            << c.schedule << " p=" << p << " m=" << m << " policy " << policy << (gpt ? " gpt" : " mlp");
        EXPECT_EQ(files_in(dir), 0) << "files left in " << dir;
      }
    }
  }
  EXPECT_GE(ran, 4);
}

INSTANTIATE_TEST_SUITE_P(
    Policies, OffloadEquivalence,
    ::testing::Combine(::testing::ValuesIn(testing::synchronous_schedules()),
                       ::testing::Values("recompute", "offload-host", "offload-file", "selective", "balance")),
    [](const ::testing::TestParamInfo<std::tuple<Case, std::string>>& info) {
      return testing::test_name(std::get<0>(info.param).schedule, std::get<1>(info.param));
    });

TEST(OffloadExecutor, SelectiveStaysWithinBudgetAndMatchesPrediction) {
  for (const char* schedule : {"1f1b", "gpipe", "zb-v"}) {
    PipelineOptions o;
    o.schedule = schedule;
    o.ranks = 4;
    o.chunks = std::string(schedule) == "zb-v" ? 2 : 1;
    o.base = testing::varied_options(8, 0);
    PipelineTrainer plain(testing::tiny_gpt(), o);
    plain.step(data_for(plain.model(), 8, 0));
    o.activation_policy = "selective";
    o.activation_budget_bytes = 1e12;  // planned below
    PipelineTrainer probe(testing::tiny_gpt(), o);
    probe.plan_activation_memory(data_for(probe.model(), 8, 0).micro_batch(0, 8));
    const double lo = sched::min_activation_budget(plain.schedule(), probe.parts().memory.costs());
    double none_peak = 0;  // predicted without offload
    for (double v : sched::activation_peak_bytes(plain.schedule(), probe.parts().memory.costs()))
      none_peak = std::max(none_peak, v);
    ASSERT_LE(lo, none_peak) << schedule;
    for (double budget : {lo, std::floor((lo + none_peak) / 2), none_peak}) {
      o.activation_budget_bytes = budget;
      PipelineTrainer t(testing::tiny_gpt(), o);
      for (int step = 0; step < 2; ++step) t.step(data_for(t.model(), 8, step));
      const auto& pred = t.parts().memory.predicted_peak_bytes();
      ASSERT_EQ(pred.size(), 4u);
      for (int r = 0; r < 4; ++r) {
        EXPECT_LE(t.last_stats().ranks[r].peak_activation_bytes, budget) << schedule << " rank " << r;
        EXPECT_LE(pred[r], budget);
        EXPECT_EQ(static_cast<double>(t.last_stats().ranks[r].peak_activation_bytes), pred[r])
            << schedule << " rank " << r;
      }
      if (budget >= none_peak) {
        EXPECT_EQ(t.last_stats().offloaded_bytes, 0u) << schedule;
      }
      if (budget == lo && lo < none_peak) {
        EXPECT_GT(t.last_stats().offloaded_bytes, 0u) << schedule;
      }
    }
  }
}

TEST(OffloadExecutor, ImpossibleBudgetRefusedBeforeTraining) {
  PipelineOptions o;
  o.schedule = "1f1b";
  o.ranks = 4;
  o.base = testing::varied_options(8, 0);
  o.activation_policy = "selective";
  o.activation_budget_bytes = 1;
  PipelineTrainer t(testing::tiny_gpt(), o);
  std::vector<float> before;
  for (Parameter* p : t.model().parameters()) {
    auto v = p->value.to_vector();
    before.insert(before.end(), v.begin(), v.end());
  }
  try {
    t.step(data_for(t.model(), 8, 0));
    FAIL() << "expected kInvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("smallest budget that works: "), std::string::npos) << e.what();
  }
  EXPECT_EQ(t.metrics().step, 0);
  std::vector<float> after;
  for (Parameter* p : t.model().parameters()) {
    auto v = p->value.to_vector();
    after.insert(after.end(), v.begin(), v.end());
  }
  EXPECT_EQ(before, after);
  PipelineOptions bad = o;
  bad.activation_budget_bytes = 0;
  EXPECT_THROW(PipelineTrainer(testing::tiny_gpt(), bad), Error);
  bad.activation_policy = "nonsense";
  EXPECT_THROW(PipelineTrainer(testing::tiny_gpt(), bad), Error);
}

TEST(OffloadExecutor, PolicyReducesMeasuredPeakOnFirstRank) {
  PipelineOptions o;
  o.schedule = "1f1b";
  o.ranks = 4;
  o.base = testing::varied_options(8, 0);
  PipelineTrainer plain(testing::tiny_gpt(), o);
  plain.step(data_for(plain.model(), 8, 0));
  for (const char* policy : {"recompute", "offload-host", "offload-file"}) {
    o.activation_policy = policy;
    o.offload_dir = fresh_dir("peak");
    PipelineTrainer t(testing::tiny_gpt(), o);
    t.step(data_for(t.model(), 8, 0));
    EXPECT_LT(t.last_stats().ranks[0].peak_activation_bytes, plain.last_stats().ranks[0].peak_activation_bytes)
        << policy;
    EXPECT_LE(t.last_stats().ranks[0].peak_live_micro_batches, plain.last_stats().ranks[0].peak_live_micro_batches);
    if (std::string(policy) != "recompute") {
      EXPECT_GT(t.last_stats().offloaded_bytes, 0u) << policy;
    } else {
      EXPECT_GT(t.last_stats().ranks[0].recomputes, 0) << policy;
    }
    if (std::string(policy) == "offload-file") {
      EXPECT_GT(t.last_stats().ranks[0].file_peak_bytes, 0u);
    }
    if (std::string(policy) == "offload-host") {
      EXPECT_GT(t.last_stats().ranks[0].host_peak_bytes, 0u);
    }
  }
}

// BPipe: the measured per-rank peak (partner-held contexts included) equals the prediction, the
// largest peak drops, and the bytes sent to partners are reported.
TEST(OffloadExecutor, BalanceEvensOutMeasuredPeaks) {
  for (int p : {4, 6}) {
    PipelineOptions o;
    o.schedule = "1f1b";
    o.ranks = p;
    o.base = testing::varied_options(2 * p, 0);
    o.partition = PartitionKind::kEven;  // rank 0's stage holds the larger contexts, so balance has work
    PipelineTrainer plain(testing::tiny_mlp(), o);
    plain.step(data_for(plain.model(), 2 * p, 0));
    o.activation_policy = "balance";
    PipelineTrainer t(testing::tiny_mlp(), o);
    for (int step = 0; step < 2; ++step) t.step(data_for(t.model(), 2 * p, step));
    const auto& pred = t.parts().memory.predicted_peak_bytes();
    ASSERT_EQ(static_cast<int>(pred.size()), p);
    size_t max_plain = 0, max_bal = 0;
    const auto units = sched::activation_peak_units(t.schedule());
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(static_cast<double>(t.last_stats().ranks[r].peak_activation_bytes), pred[r]) << "rank " << r;
      EXPECT_EQ(t.last_stats().ranks[r].peak_live_micro_batches, units[r]) << "rank " << r;
      max_plain = std::max(max_plain, plain.last_stats().ranks[r].peak_activation_bytes);
      max_bal = std::max(max_bal, t.last_stats().ranks[r].peak_activation_bytes);
    }
    EXPECT_LT(max_bal, max_plain) << "p=" << p;
    EXPECT_GT(t.last_stats().ranks[0].offloaded_bytes, 0u);
    EXPECT_EQ(t.last_stats().ranks[p - 1].offloaded_bytes, 0u);
  }
}

TEST(OffloadExecutor, FailingStepLeavesNoFilesAndTrainerStaysUsable) {
  for (bool in_backward : {false, true}) {
    testing::ProbeLayer *probe0 = nullptr, *probe1 = nullptr;
    auto model = testing::probe_model(&probe0, &probe1);
    PipelineOptions o;
    o.schedule = "1f1b";
    o.ranks = 2;
    o.base = testing::varied_options(6, 1);
    o.layers_per_stage = {2, 3};
    o.activation_policy = "offload-file";
    o.offload_dir = fresh_dir(in_backward ? "failb" : "failf");
    o.recv_timeout_seconds = 10;
    PipelineTrainer t(model, o);
    const Batch batch = testing::teacher_batch(12, 8, 4, 3);
    t.step(batch);
    EXPECT_EQ(files_in(o.offload_dir), 0);
    (in_backward ? probe1->fail_backward : probe0->fail_forward) = true;
    EXPECT_THROW(t.step(batch), Error);
    EXPECT_EQ(files_in(o.offload_dir), 0) << (in_backward ? "backward" : "forward") << " failure left files";
    (in_backward ? probe1->fail_backward : probe0->fail_forward) = false;
    t.step(batch);
    EXPECT_EQ(t.metrics().step, 2);
    EXPECT_EQ(files_in(o.offload_dir), 0);
  }
}

TEST(OffloadExecutor, UserScheduleWithOffloadAndRecompute) {
  const std::string text =
      "# pipeforge schedule v1\n"
      "name: handmade\n"
      "ranks: 2\n"
      "stages: 2\n"
      "microbatches: 3\n"
      "placement: one-per-rank\n"
      "rank 0: 0F0 0OFFLOAD0 0F1 0F2 0RECOMPUTE2 0B2 0RELOAD0 0B1 0B0 0W0 0W1 0W2 0STEP\n"
      "rank 1: 1F0 1B0 1W0 1F1 1B1 1W1 1F2 1B2 1W2 1STEP\n";
  // (Stage 0's weight gradients run in micro-batch order: W0 W1 W2 after B2 B1 B0.)
  PipelineOptions o;
  o.schedule_text = text;
  o.base = testing::varied_options(3, 0);
  EXPECT_EQ(run_and_compare(false, o, 2), "");
}

}  // namespace
}  // namespace pf::exec

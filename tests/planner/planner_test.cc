#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/planner/calibration.h"
#include "runtime/planner/candidates.h"
#include "runtime/planner/cluster.h"
#include "runtime/planner/model_profile.h"
#include "runtime/planner/overhead_fit.h"
#include "runtime/planner/plan_report.h"
#include "runtime/planner/stage_partition.h"
#include "runtime/schedules/generators.h"
#include "runtime/schedules/simulator.h"

namespace pf::plan {
namespace {

// Layers with the given F times (B = 2F, W = F), parameters and activation bytes.
MicroBatchCosts layers_with(const std::vector<double>& forward, int64_t parameters = 100, int64_t bytes = 1000) {
  MicroBatchCosts m;
  m.rows = 4;
  m.tokens = 4;
  for (size_t i = 0; i < forward.size(); ++i) {
    LayerCosts l;
    l.name = "layer" + std::to_string(i);
    l.forward_s = forward[i];
    l.backward_input_s = 2 * forward[i];
    l.backward_weight_s = forward[i];
    l.parameters = parameters;
    l.activation_bytes = bytes;
    l.input_bytes = i == 0 ? 0 : 64;
    m.layers.push_back(l);
  }
  return m;
}

ModelProfile profile_of(const MicroBatchCosts& costs, double update_seconds_per_parameter = 0) {
  ModelProfile p;
  p.sizes = {costs};
  p.update_seconds_per_parameter = update_seconds_per_parameter;
  return p;
}

Cluster free_links(int devices) {
  Cluster c;
  c.devices_per_node = devices;
  c.intra_node.latency_s = 0;
  c.intra_node.bandwidth_bytes_per_s = 1e300;
  c.inter_node = c.intra_node;
  c.device_memory_bytes = int64_t{1} << 40;
  return c;
}

// Every split of n layers into s non-empty stages.
void compositions(int n, int s, std::vector<int>& prefix, const std::function<void(const std::vector<int>&)>& fn) {
  if (s == 1) {
    prefix.push_back(n);
    fn(prefix);
    prefix.pop_back();
    return;
  }
  for (int k = 1; k <= n - s + 1; ++k) {
    prefix.push_back(k);
    compositions(n - k, s - 1, prefix, fn);
    prefix.pop_back();
  }
}

double slowest_stage(const MicroBatchCosts& costs, const std::vector<int>& counts) {
  double worst = 0;
  int begin = 0;
  for (int c : counts) {
    worst = std::max(worst, stage_costs(costs, begin, begin + c).seconds());
    begin += c;
  }
  return worst;
}

TEST(PartitionForPlan, FindsTheBruteForceOptimum) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> time(0.1, 3.0);
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<double> f(7);
    for (double& x : f) x = time(rng);
    const MicroBatchCosts costs = layers_with(f);
    for (int s = 1; s <= 5; ++s) {
      double best = std::numeric_limits<double>::infinity();
      std::vector<int> prefix;
      compositions(7, s, prefix, [&](const std::vector<int>& c) { best = std::min(best, slowest_stage(costs, c)); });
      const std::vector<int> got = partition_for_plan(costs, s, PartitionLimits());
      ASSERT_EQ(static_cast<int>(got.size()), s);
      EXPECT_DOUBLE_EQ(slowest_stage(costs, got), best) << "trial " << trial << ", " << s << " stages";
    }
  }
}

TEST(PartitionForPlan, KeepsEveryStageUnderTheMemoryLimitOrReturnsNothing) {
  // One slow layer at the end: time alone puts it on a stage of its own; memory then limits how
  // many layers the first stage may take.
  const MicroBatchCosts costs = layers_with({1, 1, 1, 1, 1, 6}, 100, 1000);
  const std::vector<int> by_time = partition_for_plan(costs, 2, PartitionLimits());
  EXPECT_EQ(by_time, (std::vector<int>{5, 1}));
  PartitionLimits limits;
  limits.contexts = {2, 1};          // the first stage holds two micro-batches, the second one
  limits.bytes_per_parameter = 16;   // 1600 bytes per layer of parameters and state
  limits.stage_limit_bytes = 3 * (1600 + 2 * 1000);  // three layers on the first stage at most
  const std::vector<int> limited = partition_for_plan(costs, 2, limits);
  EXPECT_EQ(limited, (std::vector<int>{3, 3}));
  limits.stage_limit_bytes = 1000;  // not even one layer fits
  EXPECT_TRUE(partition_for_plan(costs, 2, limits).empty());
  EXPECT_TRUE(partition_for_plan(costs, 7, PartitionLimits()).empty());  // more stages than layers
}

TEST(StageCosts, CountsATensorTwoLayersShareOnce) {
  MicroBatchCosts costs = layers_with({1, 1, 1});
  costs.layers[1].shared_with_previous_bytes = 300;
  costs.layers[2].shared_with_previous_bytes = 200;
  EXPECT_DOUBLE_EQ(stage_costs(costs, 0, 3).activation_bytes, 3000 - 300 - 200);
  EXPECT_DOUBLE_EQ(stage_costs(costs, 1, 3).activation_bytes, 2000 - 200);  // layer 1's input is its own here
  EXPECT_DOUBLE_EQ(stage_costs(costs, 1, 3).input_bytes, 64);
  EXPECT_THROW(stage_costs(costs, 2, 2), Error);
}

PlanRequest request_for(const MicroBatchCosts& costs, int devices, int64_t batch_rows) {
  PlanRequest r;
  r.profile = profile_of(costs);
  r.cluster = free_links(devices);
  r.batch_rows = batch_rows;
  r.overlap_steps = false;  // a barrier after every step (OverlappingSteps below: with overlap)
  return r;
}

TEST(Predict, OneFOneBOnEqualStagesTakesTheClosedForm) {
  // 4 equal layers on 2 ranks: stages of F = 2, B = 4, W = 2; fused BW. 1F1B without
  // communication time takes (m + p - 1)(F + B + W).
  const MicroBatchCosts costs = layers_with({1, 1, 1, 1});
  PlanRequest r = request_for(costs, 2, 16);  // m = 4 micro-batches of 4 rows
  r.profile.update_seconds_per_parameter = 0.01;
  Candidate c;
  c.schedule = "1f1b";
  c.ranks = 2;
  c.micro_batches = 4;
  const Prediction p = predict(r, c);
  EXPECT_EQ(p.candidate.layers_per_stage, (std::vector<int>{2, 2}));
  EXPECT_NEAR(p.pipeline_seconds, (4 + 2 - 1) * 8.0, 1e-9);
  EXPECT_NEAR(p.update_seconds, 200 * 0.01, 1e-12);  // each rank steps its own 200 parameters
  EXPECT_NEAR(p.step_seconds, p.pipeline_seconds + p.update_seconds, 1e-12);
  EXPECT_NEAR(p.tokens_per_second, 16 / p.step_seconds, 1e-9);
  // Rank 0 holds p = 2 micro-batches' contexts of its 2 layers at its peak, rank 1 one.
  ASSERT_EQ(p.memory_bytes.size(), 2u);
  const double statics = 200 * 4.0 * 4;  // value, gradient and AdamW's two moments
  EXPECT_DOUBLE_EQ(p.memory_bytes[0], statics + 2 * 2000);
  EXPECT_DOUBLE_EQ(p.memory_bytes[1], statics + 1 * 2000);
  EXPECT_DOUBLE_EQ(p.peak_memory_bytes, p.memory_bytes[0]);
  // GPipe keeps all m.
  c.schedule = "gpipe";
  EXPECT_DOUBLE_EQ(predict(r, c).memory_bytes[0], statics + 4 * 2000);
}

// With overlapping steps a candidate that can overlap (one replica, no policy, one pipeline) costs
// the steady-state time per step with every rank's update inside it, where that is faster than the
// barrier: ZB-H2 on 4 ranks with F = B = W loses its start-up bubble (27 s -> 24 s, the ranks'
// passes back to back); 1F1B (rank 0 starts first and ends last) gains nothing and keeps the
// barrier, as does what the trainer cannot overlap.
TEST(Predict, OverlappingStepsCostTheSteadyState) {
  MicroBatchCosts costs = layers_with({1, 1, 1, 1});
  for (LayerCosts& l : costs.layers) l.backward_input_s = l.forward_s;  // F = B = W = 1 s
  PlanRequest r = request_for(costs, 4, 32);
  Candidate c;
  c.ranks = 4;
  c.micro_batches = 8;
  c.schedule = "zb-h2";
  r.overlap_steps = true;
  const Prediction zb = predict(r, c);
  EXPECT_TRUE(zb.candidate.overlap_steps);
  EXPECT_NEAR(zb.step_seconds, 8 * 3.0, 1e-9);
  EXPECT_NEAR(zb.pipeline_seconds, zb.step_seconds, 1e-12);  // the updates are inside
  EXPECT_NEAR(zb.bubble_rate, 0.0, 1e-12);
  EXPECT_NE(zb.candidate.describe().find(" overlap"), std::string::npos);
  r.overlap_steps = false;
  const Prediction zb_barrier = predict(r, c);
  EXPECT_FALSE(zb_barrier.candidate.overlap_steps);
  EXPECT_NEAR(zb_barrier.step_seconds, 27.0, 1e-9);
  r.overlap_steps = true;
  r.profile.update_seconds_per_parameter = 0.01;  // 1 s per rank
  const Prediction with_update = predict(r, c);
  EXPECT_TRUE(with_update.candidate.overlap_steps);
  EXPECT_NEAR(with_update.step_seconds, 8 * 3.0 + 1.0, 1e-9);
  c.schedule = "1f1b";
  const Prediction f = predict(r, c);
  EXPECT_FALSE(f.candidate.overlap_steps);
  EXPECT_NEAR(f.step_seconds, f.pipeline_seconds + f.update_seconds, 1e-12);
  c.activation_policy = "recompute";
  c.schedule = "zb-h2";
  EXPECT_FALSE(predict(r, c).candidate.overlap_steps);
}

TEST(Predict, CommunicationAddsItsLatencyOnEveryCrossing) {
  const MicroBatchCosts costs = layers_with({1, 1});
  PlanRequest r = request_for(costs, 2, 4);
  r.cluster.intra_node.latency_s = 0.5;
  r.cluster.intra_node.bandwidth_bytes_per_s = 64;  // the 64-byte boundary: 1 s more
  Candidate c;
  c.schedule = "1f1b";
  c.ranks = 2;
  c.micro_batches = 1;
  // One micro-batch: F0, (comm), F1 BW1, (comm), BW0 = 1 + 1.5 + 4 + 1.5 + 3 - wait for BW0 = 3.
  EXPECT_NEAR(predict(r, c).pipeline_seconds, 1 + 1.5 + 4 + 1.5 + 3, 1e-9);
}

TEST(Predict, DataParallelWaitsForTheRingAllReduce) {
  const MicroBatchCosts costs = layers_with({1, 1}, 1000);
  PlanRequest r = request_for(costs, 2, 8);
  r.cluster.intra_node.latency_s = 0.25;
  r.cluster.intra_node.bandwidth_bytes_per_s = 4000;  // 8000 gradient bytes: 2 s
  Candidate c;
  c.schedule = "1f1b";
  c.data_parallel = 2;
  c.micro_batches = 2;  // per replica, of 2 rows: half the profiled 4, so F + B + W = 2 x 2 s
  const Prediction p = predict(r, c);
  const double ring = sched::ring_allreduce_time(8000, 2, 4000, 0.25);
  EXPECT_NEAR(ring, 2 * 0.5 * 8000 / 4000 + 2 * 0.25, 1e-12);
  EXPECT_NEAR(p.pipeline_seconds, 2 * 4.0 + ring, 1e-9);
  EXPECT_NEAR(p.tokens_per_second, 8 / p.step_seconds, 1e-9);
}

TEST(Predict, RefusesWhatCannotRunNamingWhy) {
  const MicroBatchCosts costs = layers_with({1, 1, 1});
  PlanRequest r = request_for(costs, 2, 8);
  Candidate c;
  c.schedule = "zb-v";  // 4 stages on 2 ranks, but 3 layers
  c.ranks = 2;
  c.micro_batches = 2;
  try {
    predict(r, c);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 top-level layers"), std::string::npos) << e.what();
  }
  c.schedule = "1f1b";
  c.ranks = 4;  // more than the 2 devices
  EXPECT_THROW(predict(r, c), Error);
  c.ranks = 2;
  c.micro_batches = 3;  // 8 rows do not split into 3
  EXPECT_THROW(predict(r, c), Error);
}

TEST(MakePlan, RanksFitsFastestFirstAndSaysWhatNothingFitsNeeds) {
  const MicroBatchCosts costs = layers_with({1, 2, 1, 3, 1, 1});
  PlanRequest r = request_for(costs, 2, 8);
  const Plan plan = make_plan(r);
  ASSERT_FALSE(plan.ranked.empty());
  for (size_t i = 1; i < plan.ranked.size(); ++i)
    EXPECT_LE(plan.ranked[i - 1].step_seconds, plan.ranked[i].step_seconds);
  for (const Prediction& p : plan.ranked) EXPECT_TRUE(p.fits);
  // Every candidate searched is a real one: re-predicting it with its partition gives the same.
  for (size_t i = 0; i < plan.ranked.size() && i < 10; ++i)
    EXPECT_DOUBLE_EQ(predict(r, plan.ranked[i].candidate).step_seconds, plan.ranked[i].step_seconds);
  // A pipeline beats the sequential trainer on two devices with no communication cost.
  EXPECT_NE(plan.ranked[0].candidate.schedule, "sequential");

  r.memory_limit_bytes = 100;  // nothing fits
  const Plan none = make_plan(r);
  EXPECT_TRUE(none.ranked.empty());
  ASSERT_FALSE(none.too_big.empty());
  for (size_t i = 1; i < none.too_big.size(); ++i)
    EXPECT_LE(none.too_big[i - 1].peak_memory_bytes, none.too_big[i].peak_memory_bytes);
  const std::string table = ranked_table(none, r.limit(), 10);
  EXPECT_NE(table.find("smallest memory that works"), std::string::npos) << table;

  r.memory_limit_bytes = none.too_big[0].peak_memory_bytes;  // exactly the smallest: one fits
  EXPECT_FALSE(make_plan(r).ranked.empty());

  r.schedules = {"pipedream"};
  EXPECT_THROW(make_plan(r), Error);  // asynchronous: not searched
}

TEST(MakePlan, DropsAPolicyThatChangesNothing) {
  const MicroBatchCosts costs = layers_with({1, 1});
  PlanRequest r = request_for(costs, 1, 4);
  r.schedules = {"sequential"};
  const Plan plan = make_plan(r);
  for (const Prediction& p : plan.ranked) EXPECT_EQ(p.candidate.activation_policy, "none");
}

TEST(ParetoFront, NoPredictionBeatsAPointOfTheFrontInBoth) {
  const MicroBatchCosts costs = layers_with({1, 2, 1, 3, 1, 1});
  const Plan plan = make_plan(request_for(costs, 2, 8));
  const std::vector<size_t> front = pareto_front(plan.ranked);
  ASSERT_FALSE(front.empty());
  for (size_t f : front) {
    for (const Prediction& p : plan.ranked) {
      const Prediction& q = plan.ranked[f];
      EXPECT_FALSE(p.step_seconds < q.step_seconds && p.peak_memory_bytes < q.peak_memory_bytes)
          << p.candidate.describe() << " beats " << q.candidate.describe();
    }
  }
  // The fastest is on it.
  EXPECT_NE(std::find(front.begin(), front.end(), size_t{0}), front.end());
  const std::string svg = plan_svg(plan, 1e6, "test <chart>");
  EXPECT_NE(svg.find("class=\"front\""), std::string::npos);
  EXPECT_NE(svg.find("test &lt;chart&gt;"), std::string::npos);
}

nlohmann::json example_cluster() {
  return nlohmann::json::parse(R"({"nodes": 2, "devices_per_node": 4,
    "device": {"kind": "cuda", "memory_gib": 80},
    "intra_node": {"bandwidth_gb_per_s": 300, "latency_us": 3},
    "inter_node": {"bandwidth_gb_per_s": 25, "latency_us": 10}})");
}

std::string error_of(const nlohmann::json& value) {
  try {
    cluster_from_json(value, "c.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Cluster, ReadsADescriptionAndNamesTheFieldAtFault) {
  const Cluster c = cluster_from_json(example_cluster(), "c.json");
  EXPECT_EQ(c.devices(), 8);
  EXPECT_EQ(c.device_memory_bytes, int64_t{80} << 30);
  EXPECT_DOUBLE_EQ(c.intra_node.bandwidth_bytes_per_s, 300e9);
  EXPECT_DOUBLE_EQ(c.inter_node.latency_s, 10e-6);
  EXPECT_EQ(&c.link(0, 3), &c.intra_node);
  EXPECT_EQ(&c.link(3, 4), &c.inter_node);
  EXPECT_EQ(cluster_from_json(cluster_to_json(c), "again").devices(), 8);

  nlohmann::json j = example_cluster();
  j["device"]["kind"] = "tpu";
  EXPECT_NE(error_of(j).find("c.json: device.kind: unknown device kind 'tpu'"), std::string::npos) << error_of(j);
  j = example_cluster();
  j["intra_node"]["latency"] = 3;
  EXPECT_NE(error_of(j).find("intra_node.latency: unknown field"), std::string::npos) << error_of(j);
  j = example_cluster();
  j["inter_node"]["bandwidth_gb_per_s"] = -1;
  EXPECT_NE(error_of(j).find("inter_node.bandwidth_gb_per_s"), std::string::npos) << error_of(j);
  j = example_cluster();
  j.erase("inter_node");
  EXPECT_NE(error_of(j).find("inter_node: missing (2 nodes"), std::string::npos) << error_of(j);
  j = example_cluster();
  j["device"]["memory_gib"] = "lots";
  EXPECT_NE(error_of(j).find("device.memory_gib: expected a number"), std::string::npos) << error_of(j);
  EXPECT_NE(error_of(nlohmann::json::array()).find("c.json: expected a JSON object"), std::string::npos);
}

TEST(Cluster, MeasuresThisMachine) {
  const Cluster c = measure_this_machine(2);
  EXPECT_EQ(c.devices(), 2);
  EXPECT_GT(c.device_memory_bytes, 0);
  EXPECT_GT(c.intra_node.bandwidth_bytes_per_s, 1e8);  // any machine copies faster than 100 MB/s
  EXPECT_GT(c.intra_node.latency_s, 0);
  EXPECT_LT(c.intra_node.latency_s, 0.1);
}

TEST(ModelProfile, RoundTripsAndNamesTheFieldAtFault) {
  ModelProfile p = profile_of(layers_with({1, 2}), 1e-9);
  p.sizes.push_back(layers_with({2, 4}));
  p.sizes[1].rows = 8;
  const ModelProfile back = profile_from_json(profile_to_json(p), "p.json");
  ASSERT_EQ(back.sizes.size(), 2u);
  EXPECT_DOUBLE_EQ(back.sizes[1].layers[1].forward_s, 4);
  EXPECT_EQ(back.sizes[0].layers[0].activation_bytes, 1000);
  EXPECT_DOUBLE_EQ(back.update_seconds_per_parameter, 1e-9);
  // A size between two measured ones scales the nearest.
  EXPECT_DOUBLE_EQ(back.at_rows(6).layers[0].forward_s, 1.0 * 6 / 4);
  EXPECT_DOUBLE_EQ(back.at_rows(8).layers[0].forward_s, 2);

  nlohmann::json j = profile_to_json(p);
  j["micro_batch_sizes"][1]["layers"][0]["forward_s"] = -3;
  try {
    profile_from_json(j, "p.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("p.json: micro_batch_sizes[1].layers[0].forward_s"), std::string::npos)
        << e.what();
  }
  j = profile_to_json(p);
  j["micro_batch_sizes"][0]["layers"][1]["colour"] = "red";
  EXPECT_THROW(profile_from_json(j, "p.json"), Error);
  j = profile_to_json(p);
  j["micro_batch_sizes"][1]["layers"].erase(1);  // sizes disagree on the layers
  EXPECT_THROW(profile_from_json(j, "p.json"), Error);
  j = profile_to_json(p);
  j["format"] = "something/2";
  EXPECT_THROW(profile_from_json(j, "p.json"), Error);
}

TEST(NonnegativeLeastSquares, SolvesExactSystemsAndClampsAtZero) {
  // y = 2 x0 + 3 x1 exactly.
  const std::vector<std::vector<double>> a = {{1, 0}, {0, 1}, {1, 1}, {2, 1}};
  std::vector<double> x = nonnegative_least_squares(a, {2, 3, 5, 7});
  EXPECT_NEAR(x[0], 2, 1e-9);
  EXPECT_NEAR(x[1], 3, 1e-9);
  // The unconstrained optimum has x1 < 0: the constrained one sets it to 0 and refits x0.
  x = nonnegative_least_squares(a, {2, -1, 1, 3});
  EXPECT_EQ(x[1], 0);
  EXPECT_NEAR(x[0], (2 * 1 + 1 * 1 + 2 * 3) / 6.0, 1e-9);  // sum a0 y / sum a0^2 over the rows
  EXPECT_THROW(nonnegative_least_squares({}, {}), Error);
}

TEST(NonnegativeLeastSquares, ColumnsOfVeryDifferentUnitsAndCollinearColumns) {
  // process_probe's all-reduce fit: t = latency + bytes * seconds_per_byte (20 us, 2 GB/s).
  std::vector<std::vector<double>> a;
  std::vector<double> y;
  for (double bytes : {65536.0, 1048576.0, 4194304.0}) {
    a.push_back({1.0, bytes});
    y.push_back(20e-6 + bytes / 2e9);
  }
  std::vector<double> x = nonnegative_least_squares(a, y);
  EXPECT_NEAR(x[0], 20e-6, 1e-12);
  EXPECT_NEAR(x[1], 0.5e-9, 1e-18);
  // Two proportional columns explain y equally: the fit keeps one of them, not a mix.
  x = nonnegative_least_squares({{1, 2}, {2, 4}, {3, 6}}, {2, 4, 6});
  EXPECT_TRUE((x[0] == 0) != (x[1] == 0)) << x[0] << " " << x[1];
  EXPECT_NEAR(x[0] + 2 * x[1], 2, 1e-12);
  // Fewer observations than columns: at most one term per observation.
  x = nonnegative_least_squares({{1, 1, 1}}, {3});
  EXPECT_EQ((x[0] > 0) + (x[1] > 0) + (x[2] > 0), 1);
  EXPECT_NEAR(x[0] + x[1] + x[2], 3, 1e-12);
}

// A makespan model the fit does not see inside: each run has its own number of actions and of
// cross-rank transfers on the critical path, and (run 3) the path switches once the transfers
// get dear: max of two linear pieces, as in the simulator.
double synthetic_makespan(int run, double a, double c) {
  const double base[] = {10e-3, 18e-3, 12e-3, 20e-3};
  const double actions[] = {12, 24, 24, 48};
  const double transfers[] = {6, 10, 4, 6};
  const double t = base[run] + a * actions[run] + c * transfers[run];
  return run == 3 ? std::max(t, 15e-3 + a * 40 + c * 12) : t;
}

TEST(FitOverheads, RecoversKnownOverheadsFromSyntheticRuns) {
  const double a = 0.1e-3, c = 0.4e-3, s = 1e-3;
  std::vector<double> measured;
  for (int i = 0; i < 4; ++i) measured.push_back(synthetic_makespan(i, a, c) + s);
  const OverheadFit fit = fit_overheads(measured, synthetic_makespan);
  EXPECT_NEAR(fit.per_action_s, a, 1e-7);
  EXPECT_NEAR(fit.per_transfer_s, c, 1e-7);
  EXPECT_NEAR(fit.per_step_s, s, 1e-7);
  EXPECT_LT(fit.rms_residual_s, 1e-8);

  // Noise of 0.2 ms on each run: the fit stays near, every term >= 0, and it beats the one
  // difference of two runs (the bisection this fit replaced) on the same numbers.
  const double noise[] = {0.2e-3, -0.2e-3, -0.2e-3, 0.2e-3};
  for (int i = 0; i < 4; ++i) measured[static_cast<size_t>(i)] += noise[i];
  const OverheadFit noisy = fit_overheads(measured, synthetic_makespan);
  EXPECT_GE(noisy.per_action_s, 0);
  EXPECT_GE(noisy.per_transfer_s, 0);
  EXPECT_NEAR(noisy.per_action_s, a, 0.05e-3);
  EXPECT_NEAR(noisy.per_transfer_s, c, 0.2e-3);

  // Measured faster than the simulation with no overheads: nothing negative comes out.
  std::vector<double> fast;
  for (int i = 0; i < 4; ++i) fast.push_back(0.5 * synthetic_makespan(i, 0, 0));
  const OverheadFit none = fit_overheads(fast, synthetic_makespan);
  EXPECT_EQ(none.per_action_s, 0);
  EXPECT_EQ(none.per_transfer_s, 0);
  EXPECT_EQ(none.per_step_s, 0);
}

TEST(FitOverheads, KeepsOverheadsOnlyWhenTheyExplainMoreThanNoise) {
  // No overheads, 1 ms of noise on each run: least squares alone turns the noise into overheads.
  const double noise[] = {1e-3, -1e-3, -1e-3, 1e-3};
  std::vector<double> measured;
  for (int i = 0; i < 4; ++i) measured.push_back(synthetic_makespan(i, 0, 0) + 2e-3 + noise[i]);
  const OverheadFit fitted = fit_overheads(measured, synthetic_makespan);
  EXPECT_GT(fitted.per_action_s + fitted.per_transfer_s, 0);
  EXPECT_FALSE(fitted.noise_only);
  // Told that each run's makespan varies by that much, the fit keeps none and the per-step
  // constant takes the mean.
  const OverheadFit honest = fit_overheads(measured, synthetic_makespan, 1e-3 * 1e-3);
  EXPECT_TRUE(honest.noise_only);
  EXPECT_EQ(honest.per_action_s, 0);
  EXPECT_EQ(honest.per_transfer_s, 0);
  EXPECT_NEAR(honest.per_step_s, 2e-3, 1e-12);
  EXPECT_NEAR(honest.rms_residual_s, 1e-3, 1e-12);
  // Overheads far above the noise (0.1 ms per action: 1.2 to 4.8 ms per run) are kept.
  std::vector<double> dear;
  for (int i = 0; i < 4; ++i) dear.push_back(synthetic_makespan(i, 0.1e-3, 0.4e-3) + 1e-3 + 0.1 * noise[i]);
  const OverheadFit kept = fit_overheads(dear, synthetic_makespan, 0.1e-3 * 0.1e-3);
  EXPECT_FALSE(kept.noise_only);
  EXPECT_NEAR(kept.per_action_s, 0.1e-3, 0.02e-3);
  EXPECT_NEAR(kept.per_transfer_s, 0.4e-3, 0.1e-3);
}

TEST(FitOverheads, MedianVarianceIsPiOverTwoTimesTheMeansVariance) {
  EXPECT_EQ(median_variance({}), 0);
  EXPECT_EQ(median_variance({3}), 0);
  // Sample variance of {1, 2, 3, 4}: 5/3; over 4 samples, times pi / 2.
  EXPECT_NEAR(median_variance({1, 2, 3, 4}), 3.14159265358979 / 2 * (5.0 / 3) / 4, 1e-12);
}

TEST(Predict, TransferOverheadCostsCrossRankHandOffsOnly) {
  const MicroBatchCosts costs = layers_with({1, 1, 1, 1});
  PlanRequest r = request_for(costs, 2, 4);
  Candidate one_f_one_b;
  one_f_one_b.schedule = "1f1b";
  one_f_one_b.ranks = 2;
  one_f_one_b.micro_batches = 1;
  one_f_one_b.layers_per_stage = {2, 2};
  Candidate v = one_f_one_b;
  v.schedule = "zb-v";
  v.layers_per_stage = {1, 1, 1, 1};
  const double plain_1f1b = predict(r, one_f_one_b).pipeline_seconds, plain_v = predict(r, v).pipeline_seconds;
  r.profile.calibration.measured = true;
  r.profile.calibration.transfer_overhead_s = 0.5;
  // 1F1B, one micro-batch: F0 -> F1 and B1 -> B0 cross: 2 transfers on the path.
  EXPECT_NEAR(predict(r, one_f_one_b).pipeline_seconds - plain_1f1b, 2 * 0.5, 1e-9);
  // ZB-V: stages 0, 3 on rank 0 and 1, 2 on rank 1: F0->F1 and F2->F3 cross, F1->F2 does not, and
  // so for the gradients: 4 on the path, not 6.
  EXPECT_NEAR(predict(r, v).pipeline_seconds - plain_v, 4 * 0.5, 1e-9);
}

TEST(Predict, ProcessCandidatesUseTheProcessesLinksAndScale) {
  const MicroBatchCosts costs = layers_with({1, 1}, 1000);
  PlanRequest r = request_for(costs, 2, 8);
  r.cluster.intra_node.latency_s = 0;
  r.cluster.intra_node.bandwidth_bytes_per_s = 1e300;
  Candidate c;
  c.schedule = "1f1b";
  c.data_parallel = 2;
  c.micro_batches = 2;
  const double threads = predict(r, c).pipeline_seconds;  // 2 x 4 s of compute, a free all-reduce
  EXPECT_NEAR(threads, 8, 1e-9);
  r.cluster.has_process_links = true;
  r.cluster.process_allreduce.latency_s = 0.25;
  r.cluster.process_allreduce.bandwidth_bytes_per_s = 4000;  // 8000 bytes: 2 s + 2 x 0.25
  EXPECT_NEAR(predict(r, c).pipeline_seconds, 8 + 2.5, 1e-9);
  r.profile.calibration.measured = true;
  r.profile.calibration.process_compute_scale = 1.5;
  EXPECT_NEAR(predict(r, c).pipeline_seconds, 1.5 * 8 + 2.5, 1e-9);
  // A candidate of threads (D = 1) keeps compute_scale and the threads' link.
  Candidate t;
  t.schedule = "1f1b";
  t.ranks = 2;
  t.micro_batches = 2;
  r.profile.calibration.compute_scale = 1;
  EXPECT_NEAR(predict(r, t).pipeline_seconds, predict(r, t).pipeline_seconds, 0);
  PlanRequest no_processes = r;
  no_processes.cluster.has_process_links = false;
  EXPECT_DOUBLE_EQ(predict(r, t).pipeline_seconds, predict(no_processes, t).pipeline_seconds);
  // The scale that makes the prediction a measured step.
  r.profile.calibration.process_compute_scale = 0;
  const double fitted = fit_process_compute_scale(r, c, 2.0 * 8 + 2.5 + r.profile.update_seconds_per_parameter * 2000);
  EXPECT_NEAR(fitted, 2.0, 1e-6);
  EXPECT_THROW(fit_process_compute_scale(r, t, 1.0), Error);
}

TEST(Calibration, RelativeScaleIsLinearInLogRowsAndFlatOutside) {
  Calibration k;
  EXPECT_EQ(k.relative_scale(3), 1);  // nothing calibrated
  k.relative_scale_by_rows = {{2, 0.5}, {8, 1.0}, {32, 2.0}};
  EXPECT_DOUBLE_EQ(k.relative_scale(8), 1.0);
  EXPECT_DOUBLE_EQ(k.relative_scale(4), 0.75);   // halfway between 2 and 8 in log(rows)
  EXPECT_DOUBLE_EQ(k.relative_scale(16), 1.5);
  EXPECT_DOUBLE_EQ(k.relative_scale(1), 0.5);    // below the smallest: its value
  EXPECT_DOUBLE_EQ(k.relative_scale(64), 2.0);   // above the largest: its value
}

TEST(Predict, ComputeScaleFollowsTheMicroBatchSize) {
  const MicroBatchCosts costs = layers_with({1, 1, 1, 1});  // 4 rows
  PlanRequest r = request_for(costs, 2, 16);
  Candidate c;
  c.schedule = "1f1b";
  c.ranks = 2;
  c.micro_batches = 4;  // 4 rows per micro-batch
  const double plain = predict(r, c).pipeline_seconds;
  EXPECT_NEAR(plain, (4 + 2 - 1) * 8.0, 1e-9);
  r.profile.calibration.measured = true;
  r.profile.calibration.compute_scale = 2;
  r.profile.calibration.relative_scale_by_rows = {{1, 3.0}, {4, 0.75}};
  EXPECT_NEAR(predict(r, c).pipeline_seconds, 2 * 0.75 * plain, 1e-9);
  // 16 micro-batches of 1 row: the profile scaled to 1 row (a quarter), times 2 x 3.
  c.micro_batches = 16;
  r.profile.calibration.relative_scale_by_rows.clear();
  const double one_row = predict(r, c).pipeline_seconds;
  r.profile.calibration.relative_scale_by_rows = {{1, 3.0}, {4, 0.75}};
  EXPECT_NEAR(predict(r, c).pipeline_seconds, 3 * one_row, 1e-9);
  // Processes (D > 1) take it too, on their own scale.
  r.cluster.has_process_links = true;
  r.cluster.process_allreduce.latency_s = 0;
  r.cluster.process_allreduce.bandwidth_bytes_per_s = 1e300;
  r.profile.calibration.process_compute_scale = 1;
  Candidate d;
  d.schedule = "1f1b";
  d.data_parallel = 2;
  d.micro_batches = 2;  // 4 rows per micro-batch
  const double relative = predict(r, d).pipeline_seconds;
  r.profile.calibration.relative_scale_by_rows.clear();
  EXPECT_NEAR(relative, 0.75 * predict(r, d).pipeline_seconds, 1e-9);
}

TEST(Cluster, ReadsTheProcessesLinks) {
  nlohmann::json j = example_cluster();
  EXPECT_FALSE(cluster_from_json(j, "c.json").has_process_links);
  j["processes"] = {{"p2p", {{"bandwidth_gb_per_s", 3}, {"latency_us", 2}}},
                    {"allreduce", {{"bandwidth_gb_per_s", 1.5}, {"latency_us", 30}}}};
  const Cluster c = cluster_from_json(j, "c.json");
  ASSERT_TRUE(c.has_process_links);
  EXPECT_DOUBLE_EQ(c.process_p2p.bandwidth_bytes_per_s, 3e9);
  EXPECT_DOUBLE_EQ(c.process_allreduce.latency_s, 30e-6);
  EXPECT_EQ(&c.link(0, 3, true), &c.process_p2p);
  EXPECT_EQ(&c.link(0, 3, false), &c.intra_node);
  EXPECT_EQ(&c.link(3, 4, true), &c.inter_node);  // between nodes: the cluster's inter-node link
  EXPECT_EQ(&c.allreduce_link(0, 3, true), &c.process_allreduce);
  EXPECT_TRUE(cluster_from_json(cluster_to_json(c), "again").has_process_links);
  j["processes"].erase("allreduce");
  EXPECT_NE(error_of(j).find("processes.allreduce"), std::string::npos) << error_of(j);
  j["processes"]["allreduce"] = {{"bandwidth_gb_per_s", 1}, {"latency_us", 1}};
  j["processes"]["shm"] = true;
  EXPECT_NE(error_of(j).find("processes.shm: unknown field"), std::string::npos) << error_of(j);
}

TEST(ModelProfile, RoundTripsTheCalibration) {
  ModelProfile p = profile_of(layers_with({1, 2}), 1e-9);
  p.calibration.measured = true;
  p.calibration.compute_scale = 1.25;
  p.calibration.action_overhead_s = 1e-4;
  p.calibration.transfer_overhead_s = 2e-4;
  p.calibration.sequential_compute_scale = 1.1;
  p.calibration.process_compute_scale = 1.5;
  p.calibration.relative_scale_by_rows = {{1, 0.8}, {4, 1.2}};
  const Calibration back = profile_from_json(profile_to_json(p), "p.json").calibration;
  EXPECT_TRUE(back.measured);
  EXPECT_DOUBLE_EQ(back.transfer_overhead_s, 2e-4);
  EXPECT_DOUBLE_EQ(back.sequential_compute_scale, 1.1);
  EXPECT_DOUBLE_EQ(back.process_compute_scale, 1.5);
  ASSERT_EQ(back.relative_scale_by_rows.size(), 2u);
  EXPECT_EQ(back.relative_scale_by_rows[1].rows, 4);
  EXPECT_DOUBLE_EQ(back.relative_scale_by_rows[1].relative, 1.2);
  // A profile saved before these fields reads with their defaults.
  nlohmann::json j = profile_to_json(p);
  for (const char* key :
       {"transfer_overhead_s", "sequential_compute_scale", "process_compute_scale", "relative_scale_by_rows"})
    j["calibration"].erase(key);
  const Calibration old = profile_from_json(j, "p.json").calibration;
  EXPECT_EQ(old.transfer_overhead_s, 0);
  EXPECT_EQ(old.sequential_compute_scale, 1);
  EXPECT_EQ(old.process_compute_scale, 0);
  EXPECT_TRUE(old.relative_scale_by_rows.empty());
  // The sizes in ascending rows, each scale in [0.1, 100], no other field.
  auto error_of_scales = [&](const nlohmann::json& scales) {
    nlohmann::json bad = profile_to_json(p);
    bad["calibration"]["relative_scale_by_rows"] = scales;
    try {
      profile_from_json(bad, "p.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of_scales({{{"rows", 4}, {"relative", 1}}, {{"rows", 2}, {"relative", 1}}})
                .find("p.json: calibration.relative_scale_by_rows[1].rows: sizes must be in ascending rows"),
            std::string::npos);
  EXPECT_NE(error_of_scales({{{"rows", 4}, {"relative", 200}}})
                .find("calibration.relative_scale_by_rows[0].relative: 200 is not in [0.1, 100]"),
            std::string::npos);
  EXPECT_NE(error_of_scales({{{"rows", 4}, {"relative", 1}, {"seconds", 1}}})
                .find("calibration.relative_scale_by_rows[0].seconds: unknown field"),
            std::string::npos);
}

}  // namespace
}  // namespace pf::plan

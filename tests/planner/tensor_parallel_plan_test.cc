// The planner's tensor parallelism: the degrees and per-layer splits it reads off a model (checked
// against the formulas of docs/EXECUTION.md, "Tensor parallelism"), a layer's costs at T, the
// profile's JSON, and a plan that offers T — where it is the only way to fit the memory limit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/models/builders.h"
#include "runtime/planner/candidates.h"
#include "runtime/planner/model_profile.h"
#include "runtime/planner/plan_report.h"
#include "runtime/planner/tensor_parallel_profile.h"
#include "runtime/schedules/simulator.h"

namespace pf::plan {
namespace {

TEST(TensorParallelProfile, ReadsTheGptBlocksSplitsAndTheDegreesThatDivideTheHeads) {
  GptConfig g;  // d_model 64, 4 heads, mlp 256, 2 blocks
  const auto model = build_gpt(g);
  const TensorParallelProfile t = profile_tensor_parallel(*model, 8);
  EXPECT_EQ(t.degrees, (std::vector<int>{2, 4}));  // 3 and 8 do not divide 4 heads
  ASSERT_EQ(t.split_parameters.size(), model->layers().size());
  const int64_t d = g.d_model, h = 4 * d, V = g.vocab;
  int blocks = 0;
  for (size_t i = 0; i < model->layers().size(); ++i) {
    const std::string name = model->layers()[i]->name();
    if (name == "embed") {  // vocabulary-parallel: the token rows; its output all-reduced forward
      EXPECT_EQ(t.split_parameters[i], V * d);
      EXPECT_EQ(t.forward_floats[i], d);
      EXPECT_EQ(t.backward_floats[i], 0);
      continue;
    }
    if (name == "head") {  // vocabulary-parallel: weight and bias rows; its input gradient all-reduced
      EXPECT_EQ(t.split_parameters[i], V * d + V);
      EXPECT_EQ(t.forward_floats[i], 0);
      EXPECT_EQ(t.backward_floats[i], d);
      continue;
    }
    if (name.rfind("blocks.", 0) != 0) {  // ln_f
      EXPECT_EQ(t.split_parameters[i], 0) << name;
      EXPECT_EQ(t.forward_floats[i] + t.backward_floats[i], 0) << name;
      continue;
    }
    ++blocks;
    // qkv (weight and bias), attention's projection weight, fc (weight and bias), the MLP's
    // projection weight; two all-reduces of d_model per token forward and two backward.
    EXPECT_EQ(t.split_parameters[i], 3 * d * d + 3 * d + d * d + h * d + h + d * h);
    EXPECT_EQ(t.forward_floats[i], 2 * d);
    EXPECT_EQ(t.backward_floats[i], 2 * d);
  }
  EXPECT_EQ(blocks, 2);
}

TEST(TensorParallelProfile, ReadsAnMlpsColumnRowPairs) {
  MlpConfig m;
  m.input_dim = 12;
  m.hidden = {32, 16};  // fc0 12 -> 32 column, fc1 32 -> 16 row; head 16 -> 10 whole
  const auto model = build_mlp(m);
  const TensorParallelProfile t = profile_tensor_parallel(*model, 16);
  EXPECT_EQ(t.degrees, (std::vector<int>{2, 4, 8, 16}));  // the divisors of 32 (fc0's rows, fc1's columns)
  std::vector<int64_t> split(model->layers().size(), 0), forward(split), backward(split);
  split[0] = 12 * 32 + 32;  // fc0's weight and bias
  backward[0] = 12;         // the input gradient of fc0 (12 features per row)
  split[2] = 16 * 32;       // fc1's weight (its bias is whole)
  forward[2] = 16;          // fc1's partial outputs
  EXPECT_EQ(t.split_parameters, split);
  EXPECT_EQ(t.forward_floats, forward);
  EXPECT_EQ(t.backward_floats, backward);
}

TEST(TensorParallelCosts, ScaleTheSplitShareAndAddTheAllReduces) {
  TensorParallelProfile t;
  t.degrees = {2};
  t.split_parameters = {100, 0, 50};
  t.forward_floats = {0, 0, 8};
  t.backward_floats = {8, 0, 0};
  MicroBatchCosts c;
  c.rows = 4;
  c.tokens = 16;
  for (int i = 0; i < 3; ++i) {
    LayerCosts l;
    l.parameters = 100;
    l.forward_s = 1;
    l.backward_input_s = 2;
    l.backward_weight_s = 3;
    c.layers.push_back(l);
  }
  const double bandwidth = 1e6, latency = 1e-3;
  const MicroBatchCosts at2 = tensor_parallel_costs(t, c, 2, bandwidth, latency);
  const double allreduce = sched::ring_allreduce_time(4.0 * 16 * 8, 2, bandwidth, latency);
  // Layer 0 splits whole: half of each pass, its input gradient all-reduced in B.
  EXPECT_DOUBLE_EQ(at2.layers[0].forward_s, 0.5);
  EXPECT_DOUBLE_EQ(at2.layers[0].backward_input_s, 1);
  EXPECT_DOUBLE_EQ(at2.layers[0].tensor_parallel_forward_s, 0);
  EXPECT_DOUBLE_EQ(at2.layers[0].tensor_parallel_backward_s, allreduce);
  EXPECT_DOUBLE_EQ(at2.layers[0].backward_weight_s, 1.5);
  EXPECT_EQ(at2.layers[0].parameters, 50);
  // Layer 1 does not split: unchanged.
  EXPECT_DOUBLE_EQ(at2.layers[1].forward_s, 1);
  EXPECT_EQ(at2.layers[1].parameters, 100);
  // Layer 2 splits half: 3/4 of each pass, its outputs all-reduced in F.
  EXPECT_DOUBLE_EQ(at2.layers[2].forward_s, 0.75);
  EXPECT_DOUBLE_EQ(at2.layers[2].tensor_parallel_forward_s, allreduce);
  EXPECT_DOUBLE_EQ(at2.layers[2].backward_input_s, 1.5);
  EXPECT_DOUBLE_EQ(at2.layers[2].tensor_parallel_backward_s, 0);
  EXPECT_EQ(at2.layers[2].parameters, 75);
  EXPECT_EQ(tensor_parallel_costs(t, c, 1, bandwidth, latency).layers[0].forward_s, 1);
  try {
    tensor_parallel_costs(t, c, 4, bandwidth, latency);
    FAIL() << "T = 4 is not a degree of the profile";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("does not split at tensor_parallel 4"), std::string::npos) << e.what();
  }
}

// A GPT's profile (synthetic times, the real splits) on 4 devices of one node.
PlanRequest gpt_request() {
  GptConfig g;
  const auto model = build_gpt(g);
  PlanRequest r;
  MicroBatchCosts c;
  c.rows = 2;
  c.tokens = 2 * g.seq_len;
  for (const auto& layer : model->layers()) {
    LayerCosts l;
    l.name = layer->name();
    for (const Parameter* p : layer->parameters()) l.parameters += shape_numel(p->shape);
    l.forward_s = 1e-3 + 1e-8 * static_cast<double>(l.parameters);
    l.backward_input_s = 2 * l.forward_s;
    l.backward_weight_s = l.forward_s;
    l.activation_bytes = 1 << 16;
    l.input_bytes = 1 << 14;
    c.layers.push_back(l);
  }
  r.profile.sizes = {c};
  r.profile.tensor_parallel = profile_tensor_parallel(*model, 8);
  r.cluster.devices_per_node = 4;
  r.cluster.device_memory_bytes = int64_t{1} << 40;
  r.batch_rows = 8;
  return r;
}

TEST(MakePlan, OffersTensorParallelDegreesAndFitsWhatOnlyTheyFit) {
  PlanRequest r = gpt_request();
  const Plan all = make_plan(r);
  std::vector<int> degrees;
  for (const Prediction& p : all.ranked) {
    const Candidate& c = p.candidate;
    EXPECT_LE(c.tensor_parallel * c.data_parallel * c.ranks, 4) << c.describe();
    degrees.push_back(c.tensor_parallel);
    if (c.tensor_parallel > 1) {
      EXPECT_NE(c.describe().find(" T=" + std::to_string(c.tensor_parallel)), std::string::npos);
      EXPECT_FALSE(c.overlap_steps) << c.describe();  // the trainer does not overlap split steps
    }
  }
  for (int T : {1, 2, 4}) EXPECT_NE(std::find(degrees.begin(), degrees.end(), T), degrees.end()) << "T " << T;
  EXPECT_EQ(std::find(degrees.begin(), degrees.end(), 3), degrees.end());

  // The sequential trainer at T = 2 holds each block's split half: less memory than at T = 1.
  Candidate one, two;
  two.tensor_parallel = 2;
  const Prediction whole = predict(r, one), split = predict(r, two);
  EXPECT_LT(split.peak_memory_bytes, whole.peak_memory_bytes);
  EXPECT_EQ(prediction_to_json(split)["tensor_parallel"], 2);

  // A limit below every unsplit candidate's peak: only split ones fit.
  double smallest_unsplit = 1e300;
  for (const auto* list : {&all.ranked, &all.too_big})
    for (const Prediction& p : *list)
      if (p.candidate.tensor_parallel == 1) smallest_unsplit = std::min(smallest_unsplit, p.peak_memory_bytes);
  r.memory_limit_bytes = smallest_unsplit - 1;
  const Plan tight = make_plan(r);
  ASSERT_FALSE(tight.ranked.empty()) << "nothing fits below " << smallest_unsplit << " bytes";
  for (const Prediction& p : tight.ranked) EXPECT_GT(p.candidate.tensor_parallel, 1) << p.candidate.describe();

  // Only the degrees asked for.
  r.memory_limit_bytes = 0;
  r.tensor_parallel = {1};
  for (const Prediction& p : make_plan(r).ranked) EXPECT_EQ(p.candidate.tensor_parallel, 1);
}

TEST(ModelProfile, RoundTripsTheTensorParallelSplitsAndNamesAFieldAtFault) {
  ModelProfile p = gpt_request().profile;
  const ModelProfile back = profile_from_json(profile_to_json(p), "profile.json");
  EXPECT_EQ(back.tensor_parallel.degrees, p.tensor_parallel.degrees);
  EXPECT_EQ(back.tensor_parallel.split_parameters, p.tensor_parallel.split_parameters);
  EXPECT_EQ(back.tensor_parallel.forward_floats, p.tensor_parallel.forward_floats);
  EXPECT_EQ(back.tensor_parallel.backward_floats, p.tensor_parallel.backward_floats);
  nlohmann::json bad = profile_to_json(p);
  bad["tensor_parallel"]["degrees"] = {4, 2};
  try {
    profile_from_json(bad, "profile.json");
    FAIL() << "descending degrees accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor_parallel.degrees"), std::string::npos) << e.what();
  }
  bad = profile_to_json(p);
  bad["tensor_parallel"]["layers"].erase(0);
  EXPECT_THROW(profile_from_json(bad, "profile.json"), Error);
  // A profile saved before tensor parallelism: no degrees, T = 1 only.
  nlohmann::json old = profile_to_json(p);
  old.erase("tensor_parallel");
  EXPECT_TRUE(profile_from_json(old, "profile.json").tensor_parallel.degrees.empty());
}

}  // namespace
}  // namespace pf::plan

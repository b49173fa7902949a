// The planner's tensor parallelism: the degrees and per-layer splits it reads off a model (checked
// against the formulas of docs/EXECUTION.md, "Tensor parallelism"), a layer's costs at T, the
// profile's JSON, and a plan that offers T — where it is the only way to fit the memory limit; what
// a member keeps (with and without sequence parallelism) against the split model's own contexts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/comm/thread_world.h"
#include "runtime/core/error.h"
#include "runtime/layers/parameter.h"
#include "runtime/layers/saved_context.h"
#include "runtime/models/builders.h"
#include "runtime/planner/candidates.h"
#include "runtime/planner/model_profile.h"
#include "runtime/planner/plan_report.h"
#include "runtime/planner/tensor_parallel_profile.h"
#include "runtime/schedules/simulator.h"
#include "runtime/tensor_parallel/split_model.h"

namespace pf::plan {
namespace {

// A language-model micro-batch of `rows` sequences of `steps` token ids below `vocab` (its own storage).
Batch token_batch(int64_t rows, int64_t steps, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(rows * steps)), next(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>((7 * i + 3) % static_cast<size_t>(vocab));
    next[i] = static_cast<int32_t>((7 * i + 10) % static_cast<size_t>(vocab));
  }
  return Batch{Tensor::from_ints({rows, steps}, ids), Tensor::from_ints({rows, steps}, next)};
}

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
  {
    GptConfig g;
    const Batch sample = token_batch(1, g.seq_len, g.vocab);
    ModelProfile q = p;
    q.tensor_parallel = profile_tensor_parallel(*build_gpt(g), 2, &sample);
    const ModelProfile again = profile_from_json(profile_to_json(q), "profile.json");
    ASSERT_EQ(again.tensor_parallel.member_bytes.size(), 2u);  // T = 2 without and with sequence parallelism
    EXPECT_EQ(again.tensor_parallel.member_bytes_rows, 1);
    EXPECT_EQ(again.tensor_parallel.member(2, true)->activation_bytes, q.tensor_parallel.member(2, true)->activation_bytes);
    EXPECT_EQ(again.tensor_parallel.member(2, false)->input_bytes, q.tensor_parallel.member(2, false)->input_bytes);
    nlohmann::json wrong = profile_to_json(q);
    wrong["tensor_parallel"]["member_bytes"]["members"][0]["activation_bytes"].erase(0);
    try {
      profile_from_json(wrong, "profile.json");
      FAIL() << "a layer short accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("member_bytes.members[0].activation_bytes"), std::string::npos) << e.what();
    }
  }
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

// What the split model's members keep after one micro-batch's forward, written here apart from the
// planner: T copies of `model` split over a ThreadWorld (T = 1: the whole model), each member a thread
// running its top-level layers' forwards on `sample`. Per member, per layer: SavedContext::bytes(),
// and last, the bytes of all the member's contexts together (a tensor two layers keep counts once).
std::vector<std::vector<int64_t>> kept_by_members(const Model& model, int T, bool sequence_parallel, const Batch& sample) {
  comm::ThreadWorld world(T);
  std::vector<std::unique_ptr<Model>> members;
  for (int r = 0; r < T; ++r) {
    members.push_back(build_model_from_json(model.to_json()));
    if (T > 1)
      split_model_for_tensor_parallel(
          *members.back(), std::make_shared<TensorParallelGroup>(std::shared_ptr<comm::World>(&world.member(r), [](comm::World*) {}),
                                                                 TensorReduction::kAllReduce, 20.0, sequence_parallel));
  }
  std::vector<std::vector<int64_t>> kept(static_cast<size_t>(T));
  std::vector<std::thread> threads;
  for (int r = 0; r < T; ++r) {
    threads.emplace_back([&, r] {
      Model& m = *members[static_cast<size_t>(r)];
      std::vector<SavedContext> contexts(m.layers().size());
      Tensor x = sample.inputs;
      for (size_t i = 0; i < m.layers().size(); ++i) {
        x = m.layers()[i]->forward(x, contexts[i]);
        kept[static_cast<size_t>(r)].push_back(static_cast<int64_t>(contexts[i].bytes()));
      }
      kept[static_cast<size_t>(r)].push_back(static_cast<int64_t>(context_bytes(contexts)));
    });
  }
  for (std::thread& t : threads) t.join();
  return kept;
}

int64_t sum_of(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

// A plan request on 4 devices of one node (1 TiB each) with `model`'s whole bytes measured on
// `sample` (one step of it) and the tensor-parallel profile `t`.
PlanRequest measured_request(const Model& model, const Batch& sample, const TensorParallelProfile& t) {
  PlanRequest r;
  r.profile.sizes = {measure_micro_batch_bytes(*build_model_from_json(model.to_json()), sample)};
  r.profile.tensor_parallel = t;
  r.cluster.devices_per_node = 4;
  r.cluster.device_memory_bytes = int64_t{1} << 40;
  r.batch_rows = sample.rows();
  return r;
}

TEST(TensorParallelMemberBytes, TheGptsMembersKeepWhatTheSplitModelKeepsAndSequenceParallelismLess) {
  GptConfig g;  // 4 heads: T = 2 and 4
  const auto model = build_gpt(g);
  const Batch sample = token_batch(2, g.seq_len, g.vocab);
  const TensorParallelProfile t = profile_tensor_parallel(*model, 4, &sample);
  EXPECT_EQ(t.member_bytes_rows, 2);
  const std::vector<int64_t> whole = kept_by_members(*model, 1, false, sample)[0];
  const size_t n = model->layers().size();
  int64_t previous_total = sum_of(std::vector<int64_t>(whole.begin(), whole.begin() + static_cast<long>(n)));
  for (int T : {2, 4}) {
    int64_t without_total = 0;
    for (bool sequence_parallel : {false, true}) {
      const TensorParallelProfile::MemberBytes* m = t.member(T, sequence_parallel);
      ASSERT_NE(m, nullptr) << "T " << T << " sp " << sequence_parallel;
      const std::vector<std::vector<int64_t>> kept = kept_by_members(*model, T, sequence_parallel, sample);
      for (size_t i = 0; i < n; ++i) {
        int64_t most = 0;
        for (const auto& member : kept) most = std::max(most, member[i]);
        EXPECT_EQ(m->activation_bytes[i], most) << "T " << T << " sp " << sequence_parallel << " layer " << i;
      }
      const int64_t total = sum_of(m->activation_bytes);
      if (!sequence_parallel) {
        EXPECT_LT(total, previous_total) << "T " << T;  // below T = 1's (T = 4: below T = 2's)
        without_total = total;
      } else {
        EXPECT_LT(total, without_total) << "T " << T;  // sequence parallelism keeps less again
      }

      // The planner's prediction for the sequential trainer at T: what a member's contexts take together.
      const PlanRequest r = measured_request(*model, sample, t);
      Candidate c;
      c.tensor_parallel = T;
      c.sequence_parallel = sequence_parallel;
      int64_t most = 0;
      for (const auto& member : kept) most = std::max(most, member.back());
      EXPECT_EQ(predict(r, c).activation_bytes[0], static_cast<double>(most)) << "T " << T << " sp " << sequence_parallel;
    }
    previous_total = without_total;
  }
  // Twice the rows: twice the bytes.
  const PlanRequest r = measured_request(*model, token_batch(4, g.seq_len, g.vocab), t);
  const MicroBatchCosts at4 = tensor_parallel_costs(t, r.profile.sizes[0], 2, 1e9, 0, true);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(at4.layers[i].activation_bytes, 2 * t.member(2, true)->activation_bytes[i]);
}

TEST(TensorParallelMemberBytes, NoSequenceParallelismWhereTheModelCannotSplitByStepsOrTDoesNotDivideThem) {
  MlpConfig mc;
  mc.input_dim = 12;
  mc.hidden = {32, 16};
  const auto mlp = build_mlp(mc);
  Batch rows = {Tensor::from_vector({4, 12}, std::vector<float>(48, 0.5f)), Tensor::from_ints({4}, {0, 1, 2, 3})};
  const TensorParallelProfile t = profile_tensor_parallel(*mlp, 4, &rows);
  EXPECT_EQ(t.degrees, (std::vector<int>{2, 4}));
  for (int T : {2, 4}) {
    EXPECT_NE(t.member(T, false), nullptr) << T;
    EXPECT_EQ(t.member(T, true), nullptr) << T;  // no token embedding: split_model refuses sequence parallelism
  }
  // 6 steps per sequence: T = 2 divides them, T = 4 does not.
  GptConfig g;
  g.seq_len = 6;
  const auto gpt = build_gpt(g);
  const Batch sample = token_batch(2, 6, g.vocab);
  const TensorParallelProfile six = profile_tensor_parallel(*gpt, 4, &sample);
  EXPECT_NE(six.member(2, true), nullptr);
  EXPECT_EQ(six.member(4, true), nullptr);
  EXPECT_NE(six.member(4, false), nullptr);

  // The plans: the MLP's candidates never use sequence parallelism; the GPT's do, at T = 2 only.
  for (const auto* profile : {&t, &six}) {
    PlanRequest r = profile == &t ? measured_request(*mlp, rows, t) : measured_request(*gpt, sample, six);
    r.schedules = {"sequential", "1f1b"};
    const Plan plan = make_plan(r);
    int with = 0;
    for (const auto* list : {&plan.ranked, &plan.too_big})
      for (const Prediction& p : *list) {
        if (!p.candidate.sequence_parallel) continue;
        ++with;
        EXPECT_EQ(p.candidate.tensor_parallel, 2) << p.candidate.describe();
        EXPECT_EQ(prediction_to_json(p)["sequence_parallel"], true);
      }
    if (profile == &t) EXPECT_EQ(with, 0);
    else EXPECT_GT(with, 0);
    r.sequence_parallel = false;  // plan --no-sequence-parallel
    for (const Prediction& p : make_plan(r).ranked) EXPECT_FALSE(p.candidate.sequence_parallel);
  }
  Candidate c;
  c.tensor_parallel = 4;
  c.sequence_parallel = true;
  EXPECT_THROW(predict(measured_request(*gpt, sample, six), c), Error);  // not measured at T = 4: refused
}

}  // namespace
}  // namespace pf::plan

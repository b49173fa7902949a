// Tensor parallelism (runtime/tensor_parallel) with its T members as threads of this process, each
// with its own trainer over a ThreadWorld member:
// - the deterministic reduction is bitwise equal to a single-threaded reference written here, which
//   computes every member's partial products with the same kernels and adds them in rank order;
// - the default reduction stays within float rounding of the unsplit sequential trainer;
// - each member holds 1/T of each split parameter, and reduces the bytes the formula says;
// - bad splits, unsupported combinations and a failed member are refused with errors naming them.
// tests/processes/tensor_parallel_cli_test.cc runs the same across mpirun processes.
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "runtime/comm/thread_world.h"
#include "runtime/checkpoint/parameter_checksum.h"
#include "runtime/checkpoint/sharded_checkpoint.h"
#include "runtime/core/error.h"
#include "runtime/execution/stage_message_slices.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/kernels/cpu/rows.h"
#include "runtime/layers/activations.h"
#include "runtime/layers/cross_entropy.h"
#include "runtime/layers/layer_norm.h"
#include "runtime/layers/transformer_block.h"
#include "runtime/models/builders.h"
#include "runtime/models/init.h"
#include "runtime/optim/optimizer.h"
#include "runtime/run/make_trainer.h"
#include "runtime/tensor_parallel/split_model.h"
#include "runtime/train/micro_batches.h"
#include "tests/runtime/trainer_fixtures.h"
#include "tests/tensor_parallel/small_models.h"

namespace pf {
namespace {

using namespace tp_test;

constexpr int kMicroBatches = 2;

TrainerOptions options(OptimizerConfig::Kind kind, float clip) {
  TrainerOptions o;
  o.micro_batches = kMicroBatches;
  o.seed = 7;
  o.optimizer.kind = kind;
  o.optimizer.lr = kind == OptimizerConfig::Kind::kSgd ? 0.1f : 0.01f;
  o.optimizer.momentum = kind == OptimizerConfig::Kind::kSgd ? 0.9f : 0.0f;
  o.optimizer.weight_decay = 0.01f;
  o.optimizer.clip_norm = clip;
  return o;
}

std::vector<float> values_of(const Tensor& t) {
  const float* p = t.f32();
  return std::vector<float>(p, p + t.numel());
}

// What one member ends with: its parameters (name -> values, in its own slice's layout), the
// step losses, the parameter shapes and the bytes it all-reduced.
struct MemberResult {
  std::vector<Parameter> parameters;  // names, slice shapes and splits (no tensors)
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  std::vector<std::vector<float>> values;
  std::vector<float> losses;
  int64_t parameter_elements = 0;
  int64_t reduced_bytes = 0;
  int64_t overlapped_bytes = 0;  // of the all-reduces started to overlap W
  std::string checksum;  // whole_parameter_checksum: the whole model's, gathered over the group
  std::string error;
};

// Runs T members, each training its own split model for kSteps steps. `before_step(rank, world)`
// may stand in for a member's step (a member that fails); it returns true when it did.
using ModelFactory = std::function<std::shared_ptr<Model>()>;

// Runs `body(rank, member world)` on T threads, each a member of one ThreadWorld. A member whose
// body throws aborts the world (so no other waits forever). Returns each member's error ("" if none).
using MemberBody = std::function<void(int, const std::shared_ptr<comm::World>&)>;
std::vector<std::string> on_members(int T, const MemberBody& body) {
  comm::ThreadWorld world(T);
  std::vector<std::string> errors(static_cast<size_t>(T));
  std::vector<std::thread> threads;
  for (int r = 0; r < T; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r, std::shared_ptr<comm::World>(&world.member(r), [](comm::World*) {}));
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
        world.member(r).abort(e.what());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

// The same, failing the test when a member failed.
void in_members(int T, const MemberBody& body) {
  const std::vector<std::string> errors = on_members(T, body);
  for (int r = 0; r < T; ++r) ASSERT_EQ(errors[static_cast<size_t>(r)], "") << "member " << r;
}

std::unique_ptr<Trainer> member_trainer(std::shared_ptr<Model> model, const TrainerOptions& o, int T,
                                        const std::shared_ptr<comm::World>& world,
                                        const std::string& reduction = "deterministic",
                                        bool sequence_parallel = false) {
  TrainingConfig c;
  c.base = o;
  c.tensor_parallel = T;
  c.tensor_parallel_world = world;
  c.tensor_reduction = reduction;
  c.sequence_parallel = sequence_parallel;
  c.recv_timeout_seconds = 20;
  return make_trainer(std::move(model), c);
}

std::vector<MemberResult> run_members(int T, const std::string& reduction, const TrainerOptions& o,
                                      const std::function<bool(int, comm::World&)>& instead_of_step = nullptr,
                                      const ModelFactory& make_model = mlp, const std::vector<Batch>& data = batches(),
                                      bool sequence_parallel = false) {
  std::vector<MemberResult> results(static_cast<size_t>(T));
  const std::vector<std::string> errors = on_members(T, [&](int r, const std::shared_ptr<comm::World>& world) {
    MemberResult& out = results[static_cast<size_t>(r)];
    std::shared_ptr<Model> model = make_model();
    std::unique_ptr<Trainer> trainer = member_trainer(model, o, T, world, reduction, sequence_parallel);
    for (const Batch& b : data) {
      if (instead_of_step && instead_of_step(r, *world)) return;
      out.losses.push_back(static_cast<float>(trainer->step(b).loss));
    }
    for (Parameter* p : model->parameters()) {
      Parameter meta = *p;
      meta.value = meta.grad = Tensor();
      out.parameters.push_back(meta);
      out.names.push_back(p->name);
      out.shapes.push_back(p->shape);
      out.values.push_back(values_of(p->value));
    }
    out.parameter_elements = model->num_parameter_elements();
    out.checksum = whole_parameter_checksum(model->parameters(), model->tensor_parallel_group().get());
    out.reduced_bytes = model->tensor_parallel_group()->reduced_bytes();
    out.overlapped_bytes = model->tensor_parallel_group()->overlapped_bytes();
  });
  for (int r = 0; r < T; ++r) results[static_cast<size_t>(r)].error = errors[static_cast<size_t>(r)];
  return results;
}

// Member r's slice of a whole [rows, cols] parameter split along `dim` into T parts.
std::vector<float> slice_of(const std::vector<float>& whole, const Shape& shape, int dim, int r, int T) {
  const int64_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
  std::vector<float> out;
  if (dim == 0) {
    const int64_t part = rows / T;
    out.assign(whole.begin() + r * part * cols, whole.begin() + (r + 1) * part * cols);
  } else {
    const int64_t part = cols / T;
    for (int64_t i = 0; i < rows; ++i)
      out.insert(out.end(), whole.begin() + i * cols + r * part, whole.begin() + i * cols + (r + 1) * part);
  }
  return out;
}

// The split of each MLP parameter: fc0's weight and bias by rows, fc1's weight by columns.
int split_dim(const std::string& name) {
  if (name == "fc0.weight" || name == "fc0.bias") return 0;
  if (name == "fc1.weight") return 1;
  return -1;
}

// ---- The reference: one thread computes every member's partial products, in rank order ----

double squared_norm(const float* g, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(g[i]) * g[i];
  return s;
}

// Trains the whole model `full` as T members would, and returns the step losses.
std::vector<float> reference_training(Model& full, int T, const TrainerOptions& o) {
  initialize_parameters(full.parameters(), o.seed);
  std::unique_ptr<Optimizer> optimizer = make_optimizer(o.optimizer);
  Parameter& w0 = *full.find_parameter("fc0.weight");
  Parameter& b0 = *full.find_parameter("fc0.bias");
  Parameter& w1 = *full.find_parameter("fc1.weight");
  Parameter& b1 = *full.find_parameter("fc1.bias");
  Layer& head = *full.layers()[4];
  const int64_t o0 = kHidden / T;  // fc0's outputs per member = fc1's inputs per member
  std::vector<float> losses;
  for (const Batch& batch : batches()) {
    for (Parameter* p : full.parameters()) std::memset(p->grad.data<char>(), 0, p->grad.nbytes());
    // fc1's weight slices (columns) and their gradients, contiguous as a member holds them.
    std::vector<std::vector<float>> w1_part, g1_part;
    for (int r = 0; r < T; ++r) {
      w1_part.push_back(slice_of(values_of(w1.value), w1.shape, 1, r, T));
      g1_part.emplace_back(static_cast<size_t>(kMiddle * o0), 0.0f);
    }
    float loss = 0.0f;
    for (int mb = 0; mb < kMicroBatches; ++mb) {
      const Batch micro = batch.micro_batch(mb, kMicroBatches);
      const int64_t R = micro.rows();
      const float* x = micro.inputs.f32();
      // fc0, column: each member's slice of the outputs, then ReLU on it.
      std::vector<Tensor> a(static_cast<size_t>(T));
      std::vector<SavedContext> relu0(static_cast<size_t>(T));
      ReLU act0("act0");
      for (int r = 0; r < T; ++r) {
        Tensor h = Tensor::empty({R, o0});
        cpu::broadcast_rows(R, o0, b0.value.f32() + r * o0, h.f32());
        cpu::gemm(false, true, R, o0, kInput, 1.0f, x, w0.value.f32() + r * o0 * kInput, 1.0f, h.f32());
        a[static_cast<size_t>(r)] = act0.forward(h, relu0[static_cast<size_t>(r)]);
      }
      // fc1, row: the partial products added in rank order, then the bias.
      Tensor y = Tensor::zeros({R, kMiddle});
      for (int r = 0; r < T; ++r) {
        Tensor partial = Tensor::empty({R, kMiddle});
        cpu::gemm(false, true, R, kMiddle, o0, 1.0f, a[static_cast<size_t>(r)].f32(),
                  w1_part[static_cast<size_t>(r)].data(), 0.0f, partial.f32());
        if (r == 0) y.copy_from(partial);
        else for (int64_t i = 0; i < y.numel(); ++i) y.f32()[i] += partial.f32()[i];
      }
      cpu::add_broadcast_rows(R, kMiddle, y.f32(), b1.value.f32(), y.f32());
      // act1, head and the loss: whole on every member.
      SavedContext relu1, head_ctx, loss_ctx;
      ReLU act1("act1");
      Tensor logits = head.forward(act1.forward(y, relu1), head_ctx);
      loss += full.loss().forward(logits, micro.targets, 1.0f / kMicroBatches, loss_ctx);
      Tensor dy = act1.backward(relu1, head.backward(head_ctx, full.loss().backward(loss_ctx)));
      // fc1's backward: each member's input gradient slice and weight gradient; the whole bias.
      for (int r = 0; r < T; ++r) {
        Tensor da = Tensor::empty({R, o0});
        cpu::gemm(false, false, R, o0, kMiddle, 1.0f, dy.f32(), w1_part[static_cast<size_t>(r)].data(), 0.0f,
                  da.f32());
        cpu::gemm(true, false, kMiddle, o0, R, 1.0f, dy.f32(), a[static_cast<size_t>(r)].f32(), 1.0f,
                  g1_part[static_cast<size_t>(r)].data());
        Tensor dh = act0.backward(relu0[static_cast<size_t>(r)], da);
        // fc0's weight and bias gradients (its input gradient is not needed: fc0 is first).
        cpu::gemm(true, false, o0, kInput, R, 1.0f, dh.f32(), x, 1.0f, w0.grad.f32() + r * o0 * kInput);
        cpu::accumulate_column_sums(R, o0, dh.f32(), b0.grad.f32() + r * o0);
      }
      cpu::accumulate_column_sums(R, kMiddle, dy.f32(), b1.grad.f32());
    }
    for (int r = 0; r < T; ++r)
      for (int64_t i = 0; i < kMiddle; ++i)
        for (int64_t j = 0; j < o0; ++j)
          w1.grad.f32()[i * kHidden + r * o0 + j] = g1_part[static_cast<size_t>(r)][static_cast<size_t>(i * o0 + j)];
    // Clipping: a split parameter's squared norm is its slices', added in rank order.
    if (o.optimizer.clip_norm > 0) {
      std::vector<double> squared;
      for (Parameter* p : full.parameters()) {
        const int dim = split_dim(p->name);
        if (dim < 0) {
          squared.push_back(grad_squared_norm(*p));
          continue;
        }
        double sum = 0.0;
        for (int r = 0; r < T; ++r) {
          const std::vector<float> g = slice_of(values_of(p->grad), p->shape, dim, r, T);
          sum += squared_norm(g.data(), static_cast<int64_t>(g.size()));
        }
        squared.push_back(sum);
      }
      const float scale = clip_scale(global_norm(squared), o.optimizer.clip_norm);
      if (scale != 1.0f) scale_gradients(full.parameters(), scale);
    }
    optimizer->set_lr(o.optimizer.lr);
    optimizer->step(full.parameters());
    losses.push_back(loss);
  }
  return losses;
}

struct Case {
  int T;
  OptimizerConfig::Kind kind;
  float clip;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << "T " << c.T << ", " << (c.kind == OptimizerConfig::Kind::kSgd ? "SGD" : "AdamW") << ", clip " << c.clip;
}

// Every member's step losses and parameters (its slice of each split one, split along
// `split_dim_of(name)`, or the whole of one that is not, -1) are bitwise the reference's, which
// trained the whole model `full` to `losses`; so is the checksum of the members' gathered model.
void expect_members_bitwise(const std::vector<MemberResult>& members, const Model& full, const std::vector<float>& losses,
                            const std::function<int(const std::string&)>& split_dim_of) {
  const int T = static_cast<int>(members.size());
  for (int r = 0; r < T; ++r) {
    const MemberResult& m = members[static_cast<size_t>(r)];
    ASSERT_EQ(m.error, "") << "member " << r;
    ASSERT_EQ(m.losses.size(), losses.size());
    for (size_t s = 0; s < losses.size(); ++s)
      EXPECT_EQ(std::memcmp(&m.losses[s], &losses[s], sizeof(float)), 0)
          << "member " << r << " step " << s << ": " << m.losses[s] << " vs " << losses[s];
    ASSERT_EQ(m.names.size(), full.parameters().size());
    for (size_t i = 0; i < m.names.size(); ++i) {
      const Parameter& p = *full.parameters()[i];
      ASSERT_EQ(m.names[i], p.name);
      const int dim = split_dim_of(p.name);
      const std::vector<float> want = dim < 0 ? values_of(p.value) : slice_of(values_of(p.value), p.shape, dim, r, T);
      ASSERT_EQ(m.values[i].size(), want.size()) << p.name;
      EXPECT_EQ(std::memcmp(m.values[i].data(), want.data(), want.size() * sizeof(float)), 0)
          << "member " << r << " of " << T << ": " << p.name << " differs from the reference";
    }
    EXPECT_EQ(m.checksum, parameter_checksum(full.parameters())) << "member " << r;
  }
}

class DeterministicReduction : public ::testing::TestWithParam<Case> {};

TEST_P(DeterministicReduction, EveryMemberBitwiseEqualToTheReference) {
  const Case k = GetParam();
  const TrainerOptions o = options(k.kind, k.clip);
  const std::vector<MemberResult> members = run_members(k.T, "deterministic", o);
  std::shared_ptr<Model> full = build_mlp(mlp_config());
  const std::vector<float> losses = reference_training(*full, k.T, o);
  expect_members_bitwise(members, *full, losses, split_dim);
}

INSTANTIATE_TEST_SUITE_P(Members, DeterministicReduction,
                         ::testing::Values(Case{2, OptimizerConfig::Kind::kSgd, 0.0f},
                                           Case{2, OptimizerConfig::Kind::kAdamW, 0.05f},
                                           Case{4, OptimizerConfig::Kind::kAdamW, 0.0f},
                                           Case{4, OptimizerConfig::Kind::kSgd, 0.05f}));

// The whole model trained by the sequential trainer, for the tolerance comparison.
struct Whole {
  std::vector<float> losses;
  std::shared_ptr<Model> model;
};
Whole train_whole(const TrainerOptions& o) {
  Whole w;
  w.model = build_mlp(mlp_config());
  std::unique_ptr<Trainer> trainer = make_trainer(w.model, TrainingConfig{o});
  for (const Batch& b : batches()) w.losses.push_back(static_cast<float>(trainer->step(b).loss));
  return w;
}

TEST(TensorParallel, AllReduceStaysWithinRoundingOfTheWholeModel) {
  for (const auto kind : {OptimizerConfig::Kind::kSgd, OptimizerConfig::Kind::kAdamW}) {
    const TrainerOptions o = options(kind, 0.05f);
    const Whole whole = train_whole(o);
    for (int T : {2, 4}) {
      const std::vector<MemberResult> members = run_members(T, "allreduce", o);
      for (int r = 0; r < T; ++r) {
        const MemberResult& m = members[static_cast<size_t>(r)];
        ASSERT_EQ(m.error, "");
        for (size_t s = 0; s < whole.losses.size(); ++s)
          EXPECT_NEAR(m.losses[s], whole.losses[s], 1e-5 * std::max(1.0f, std::fabs(whole.losses[s])))
              << "T " << T << " member " << r << " step " << s;
        for (size_t i = 0; i < m.names.size(); ++i) {
          const Parameter& p = *whole.model->parameters()[i];
          const int dim = split_dim(p.name);
          const std::vector<float> want =
              dim < 0 ? values_of(p.value) : slice_of(values_of(p.value), p.shape, dim, r, T);
          ASSERT_EQ(m.values[i].size(), want.size());
          for (size_t e = 0; e < want.size(); ++e)
            ASSERT_NEAR(m.values[i][e], want[e], 1e-5f) << "T " << T << " member " << r << " " << p.name << "[" << e << "]";
        }
      }
    }
  }
}

TEST(TensorParallel, EachMemberHoldsItsSliceAndReducesWhatTheFormulaSays) {
  const int T = 4;
  const std::vector<MemberResult> members = run_members(T, "allreduce", options(OptimizerConfig::Kind::kAdamW, 0));
  // Whole model: fc0 12x16 + 16, fc1 16x12 + 12, head 12x10 + 10. Split: fc0's weight and bias,
  // fc1's weight; whole: fc1's bias and the head.
  const int64_t split = kInput * kHidden + kHidden + kHidden * kMiddle;
  const int64_t whole = kMiddle + kMiddle * kClasses + kClasses;
  // Per micro-batch: fc1's forward sums [rows, 12], fc0's backward sums its input gradient [rows, 12].
  const int64_t rows = kRows / kMicroBatches;
  const int64_t bytes_per_step = kMicroBatches * (rows * kMiddle + rows * kInput) * 4;
  for (int r = 0; r < T; ++r) {
    const MemberResult& m = members[static_cast<size_t>(r)];
    ASSERT_EQ(m.error, "");
    EXPECT_EQ(m.parameter_elements, split / T + whole);
    EXPECT_EQ(m.shapes[0], (Shape{kHidden / T, kInput}));  // fc0.weight: its rows
    EXPECT_EQ(m.shapes[1], (Shape{kHidden / T}));          // fc0.bias
    EXPECT_EQ(m.shapes[2], (Shape{kMiddle, kHidden / T})); // fc1.weight: its columns
    EXPECT_EQ(m.shapes[3], (Shape{kMiddle}));              // fc1.bias: whole
    EXPECT_EQ(m.reduced_bytes, kSteps * bytes_per_step);
  }
}

TEST(TensorParallel, AFailedMemberStopsTheOthersWithItsName) {
  const std::vector<MemberResult> members =
      run_members(2, "allreduce", options(OptimizerConfig::Kind::kSgd, 0), [](int rank, comm::World& world) {
        if (rank != 1) return false;
        world.abort("member 1 was killed");
        return true;
      });
  EXPECT_NE(members[0].error.find("rank 1 failed: member 1 was killed"), std::string::npos) << members[0].error;
  EXPECT_NE(members[0].error.find("tensor parallel rank 0 of 2"), std::string::npos) << members[0].error;
}

// The model's split as a lone member would make it (a ThreadWorld of T, this thread as member 0),
// with the pipeline stages of `layers_per_stage` (empty: one).
void split_alone(Model& model, int T, comm::ThreadWorld& world, const std::vector<int>& layers_per_stage = {},
                 bool sequence_parallel = false) {
  ASSERT_EQ(world.size(), T);
  split_model_for_tensor_parallel(
      model,
      std::make_shared<TensorParallelGroup>(std::shared_ptr<comm::World>(&world.member(0), [](comm::World*) {}),
                                            TensorReduction::kAllReduce, 5.0, sequence_parallel),
      layers_per_stage);
}

std::string split_error(const std::string& json, int T) {
  comm::ThreadWorld world(T);
  try {
    std::unique_ptr<Model> model = build_model_from_json_text(json);
    split_alone(*model, T, world);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_split_error(const std::string& json, int T, const std::string& want) {
  const std::string error = split_error(json, T);
  EXPECT_NE(error.find(want), std::string::npos) << "wanted: " << want << "\ngot: " << error;
}

TEST(TensorParallel, RefusesSplitsThatDoNotFit) {
  const std::string head = R"({"input": {"kind": "features", "features": 8, "classes": 4}, "layers": [)";
  // T does not divide the split dimension.
  expect_split_error(head + R"({"type": "linear", "name": "fc0", "in": 8, "out": 6}, {"type": "relu"},
      {"type": "linear", "name": "fc1", "in": 6, "out": 4}], "loss": "cross_entropy"})", 4, "linear 'fc0': 6 output features are not divisible by the tensor-parallel size 4");
  // A layer that is not element-wise between the column and the row split.
  expect_split_error(head + R"({"type": "linear", "name": "fc0", "in": 8, "out": 8, "parallel": "column"},
      {"type": "layernorm", "name": "norm", "dim": 8},
      {"type": "linear", "name": "fc1", "in": 8, "out": 4, "parallel": "row"}], "loss": "cross_entropy"})", 2, "layers[1] 'norm' (layernorm) takes the column-split output of layers[0] 'fc0'");
  // A row split without a column split before it.
  expect_split_error(head + R"({"type": "linear", "name": "fc0", "in": 8, "out": 4, "parallel": "row"}],
      "loss": "cross_entropy"})", 2, "the row-parallel layers[0] 'fc0' (linear) has no column-parallel linear before it");
  // A column split that reaches the loss.
  expect_split_error(head + R"({"type": "linear", "name": "fc0", "in": 8, "out": 4, "parallel": "column"}],
      "loss": "cross_entropy"})", 2, "the column-split output of layers[0] 'fc0' (linear) reaches the loss");
  // A split inside a residual.
  expect_split_error(head + R"({"type": "residual", "name": "res", "layers": [
      {"type": "linear", "in": 8, "out": 8, "parallel": "column"}]}, {"type": "linear", "in": 8, "out": 4}],
      "loss": "cross_entropy"})", 2, "layers[0].layers[0]: a tensor-parallel split inside a residual or sequential layer");
  // An unknown split.
  expect_split_error(head + R"({"type": "linear", "in": 8, "out": 4, "parallel": "diagonal"}],
      "loss": "cross_entropy"})", 2, "layers[0].parallel: unknown tensor-parallel split 'diagonal' (known: column, row, vocab)");
}

// Pipeline stages: the default pairs form inside each stage, and an annotated column split whose
// output would cross a stage boundary is refused naming the layer (a stage message is whole).
TEST(TensorParallel, SplitsEachPipelineStageByItself) {
  MlpConfig c = mlp_config();
  c.hidden = {8, 8, 8};  // fc0 act0 fc1 act1 fc2 act2 head
  const auto split_stages = [&](const std::vector<int>& layers_per_stage) {
    comm::ThreadWorld world(2);
    std::shared_ptr<Model> model = build_mlp(c);
    split_alone(*model, 2, world, layers_per_stage);
    std::vector<TensorSplit> splits;
    for (const auto& layer : model->layers()) splits.push_back(layer->tensor_split());
    return splits;
  };
  const TensorSplit n = TensorSplit::kNone, col = TensorSplit::kColumn, row = TensorSplit::kRow;
  // One stage: fc0 / fc1 pair, fc2 / head pair.
  EXPECT_EQ(split_stages({}), (std::vector<TensorSplit>{col, n, row, n, col, n, row}));
  // Stages of 2 and 5 layers: fc0 has no partner in its stage; fc1 / fc2 pair, the head alone.
  EXPECT_EQ(split_stages({2, 5}), (std::vector<TensorSplit>{n, n, col, n, row, n, n}));
  // Stages of 4 and 3: fc0 / fc1, then fc2 / head.
  EXPECT_EQ(split_stages({4, 3}), (std::vector<TensorSplit>{col, n, row, n, col, n, row}));
  const std::string head = R"({"input": {"kind": "features", "features": 8, "classes": 4}, "layers": [)";
  comm::ThreadWorld world(2);
  std::unique_ptr<Model> annotated = build_model_from_json_text(head + R"(
      {"type": "linear", "name": "fc0", "in": 8, "out": 8, "parallel": "column"}, {"type": "relu", "name": "act"},
      {"type": "linear", "name": "fc1", "in": 8, "out": 4, "parallel": "row"}], "loss": "cross_entropy"})");
  try {
    split_alone(*annotated, 2, world, {2, 1});
    FAIL() << "a column split crossing a stage boundary was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("the column-split output of layers[0] 'fc0' (linear) would cross the pipeline "
                                         "stage boundary after layers[1] 'act' (relu)"),
              std::string::npos)
        << e.what();
  }
}

TEST(TensorParallel, TheSplitModelDescribesTheWholeOne) {
  comm::ThreadWorld world(2);
  std::shared_ptr<Model> whole = build_mlp(mlp_config());
  std::shared_ptr<Model> split = build_mlp(mlp_config());
  split_alone(*split, 2, world);
  nlohmann::json expected = whole->to_json();
  expected["layers"][0]["parallel"] = "column";
  expected["layers"][2]["parallel"] = "row";
  EXPECT_EQ(split->to_json(), expected);
  // And the description rebuilds a model with the same splits.
  std::unique_ptr<Model> again = build_model_from_json(split->to_json());
  EXPECT_EQ(again->layers()[0]->tensor_split(), TensorSplit::kColumn);
  EXPECT_EQ(again->layers()[2]->tensor_split(), TensorSplit::kRow);
  EXPECT_EQ(again->layers()[4]->tensor_split(), TensorSplit::kNone);
}

TEST(TensorParallel, RefusesWhatIsNotSupportedYetNamingTheOption) {
  comm::ThreadWorld world(2);
  const auto member = std::shared_ptr<comm::World>(&world.member(0), [](comm::World*) {});
  const auto refusal = [&](const std::function<void(TrainingConfig&)>& set) -> std::string {
    TrainingConfig c;
    c.tensor_parallel = 2;
    c.tensor_parallel_world = member;
    set(c);
    try {
      make_trainer(build_mlp(mlp_config()), c);
    } catch (const Error& e) {
      return std::to_string(static_cast<int>(e.code())) + " " + e.what();
    }
    return "";
  };
  const std::string unimplemented = std::to_string(static_cast<int>(ErrorCode::kUnimplemented)) + " ";
  const std::string invalid = std::to_string(static_cast<int>(ErrorCode::kInvalidArgument)) + " ";
  // A pipeline of split stages runs one process per rank, member and replica (the world).
  EXPECT_EQ(refusal([](TrainingConfig& c) { c.schedule = "1f1b"; c.ranks = 2; })
                .rfind(invalid + "tensor_parallel 2 with a pipeline schedule needs one process per rank, member and "
                                 "replica: mpirun -np 4", 0), 0u);
  EXPECT_EQ(refusal([](TrainingConfig& c) { c.base.replicas = 2; })
                .rfind(invalid + "tensor_parallel 2 with replicas 2 runs under a pipeline schedule (schedule)", 0), 0u);
  const auto in_processes = [&](const std::string& schedule) {
    return [&, schedule](TrainingConfig& c) {
      c.schedule = schedule;
      c.ranks = 2;
      c.world = member;
    };
  };
  EXPECT_EQ(refusal(in_processes("pipedream")).rfind(unimplemented + "tensor_parallel 2 with ", 0), 0u);
  EXPECT_NE(refusal(in_processes("pipedream")).find("not supported yet (synchronous schedules only)"), std::string::npos);
  EXPECT_EQ(refusal([&](TrainingConfig& c) { in_processes("1f1b")(c); c.overlap_steps = true; })
                .rfind(unimplemented + "tensor_parallel 2 with overlap_steps is not supported yet", 0), 0u);
  EXPECT_EQ(refusal([&](TrainingConfig& c) { in_processes("1f1b")(c); c.adaptation.enabled = true; })
                .rfind(unimplemented + "tensor_parallel 2 with adapt is not supported yet", 0), 0u);
  EXPECT_NE(refusal([](TrainingConfig& c) { c.tensor_parallel_world = nullptr; }).find("tensor_parallel 2 needs its group of 2 members"), std::string::npos);
  EXPECT_NE(refusal([](TrainingConfig& c) { c.tensor_parallel = 3; }).find("tensor_parallel_world has 2 members for tensor_parallel 3"), std::string::npos);
  EXPECT_NE(refusal([](TrainingConfig& c) { c.tensor_reduction = "fast"; }).find("unknown reduction 'fast'"), std::string::npos);
}

// A checkpoint saved by 2 members is the whole model's: it resumes in one process, at T = 4 and
// at T = 2, each with the saved values bit for bit; at T = 2 (deterministic) the resumed run is
// bitwise the run that never stopped, in one process within rounding of it.
TEST(TensorParallel, ACheckpointSavedSplitResumesAtAnyT) {
  const TrainerOptions o = options(OptimizerConfig::Kind::kAdamW, 0.05f);
  const std::vector<Batch> data = batches();
  const std::string path = ::testing::TempDir() + "/tp_checkpoint.pfck";
  std::vector<std::vector<float>> uninterrupted(2);  // member r's values after all steps
  float last_loss = 0;
  in_members(2, [&](int r, const std::shared_ptr<comm::World>& world) {
    std::shared_ptr<Model> model = mlp();
    std::unique_ptr<Trainer> trainer = member_trainer(model, o, 2, world);
    trainer->step(data[0]);
    trainer->step(data[1]);
    save_trainer_checkpoint(*trainer, path);
    const float loss = static_cast<float>(trainer->step(data[2]).loss);
    if (r == 0) last_loss = loss;
    for (Parameter* p : model->parameters()) {
      const std::vector<float> v = values_of(p->value);
      uninterrupted[static_cast<size_t>(r)].insert(uninterrupted[static_cast<size_t>(r)].end(), v.begin(), v.end());
    }
  });
  // One process: the whole model, its optimizer state and progress.
  std::shared_ptr<Model> whole = mlp();
  std::unique_ptr<Trainer> one = make_trainer(whole, TrainingConfig{o});
  load_trainer_checkpoint(*one, path);
  EXPECT_EQ(one->metrics().step, 2);
  EXPECT_EQ(one->optimizer().steps_taken(), 2);
  EXPECT_EQ(one->optimizer().state().size(), 2 * whole->parameters().size());  // exp_avg, exp_avg_sq
  std::vector<std::vector<float>> saved;
  for (Parameter* p : whole->parameters()) saved.push_back(values_of(p->value));
  EXPECT_NEAR(one->step(data[2]).loss, last_loss, 1e-5);
  // T = 4 and T = 2: every member's slices are the saved values at their places, bit for bit.
  for (int T : {4, 2}) {
    in_members(T, [&](int r, const std::shared_ptr<comm::World>& world) {
      std::shared_ptr<Model> model = mlp();
      std::unique_ptr<Trainer> trainer = member_trainer(model, o, T, world);
      load_trainer_checkpoint(*trainer, path);
      for (size_t i = 0; i < model->parameters().size(); ++i) {
        const Parameter& p = *model->parameters()[i];
        for (int64_t e = 0; e < p.value.numel(); ++e)
          ASSERT_EQ(p.value.f32()[e], saved[i][static_cast<size_t>(full_tensor_index(p, e))])
              << "T " << T << " member " << r << " " << p.name << "[" << e << "]";
        const Tensor& m = trainer->optimizer().state().at(p.name + "/exp_avg");
        ASSERT_EQ(m.shape(), p.shape) << p.name;
      }
      EXPECT_EQ(trainer->metrics().step, 2);
      trainer->step(data[2]);
      if (T != 2) return;
      std::vector<float> values;
      for (Parameter* p : model->parameters()) {
        const std::vector<float> v = values_of(p->value);
        values.insert(values.end(), v.begin(), v.end());
      }
      EXPECT_EQ(values, uninterrupted[static_cast<size_t>(r)]) << "member " << r << ": resumed != uninterrupted";
    });
  }
}

// ---- The GPT block: attention split by heads, the MLP as a column / row pair ----


// Every element of each member's slices equals the whole model's element at its place.
void expect_slices_near(const std::vector<MemberResult>& members, const Model& whole, float tolerance) {
  for (size_t r = 0; r < members.size(); ++r) {
    const MemberResult& m = members[r];
    ASSERT_EQ(m.error, "") << "member " << r;
    ASSERT_EQ(m.parameters.size(), whole.parameters().size());
    for (size_t i = 0; i < m.parameters.size(); ++i) {
      const Parameter& slice = m.parameters[i];
      const float* want = whole.parameters()[i]->value.f32();
      for (size_t e = 0; e < m.values[i].size(); ++e)
        ASSERT_NEAR(m.values[i][e], want[full_tensor_index(slice, static_cast<int64_t>(e))], tolerance)
            << "member " << r << ": " << slice.name << "[" << e << "]";
    }
  }
}

// T members of `make_model` trained on the GPT batches with `reduction` stay within 1e-5 of the
// whole model trained by the sequential trainer: losses and every parameter. Returns the members.
std::vector<MemberResult> expect_members_near_whole(const ModelFactory& make_model, int T, const std::string& reduction,
                                                    const TrainerOptions& o, bool sequence_parallel = false) {
  std::shared_ptr<Model> whole = make_model();
  std::vector<float> losses;
  {
    std::unique_ptr<Trainer> trainer = make_trainer(whole, TrainingConfig{o});
    for (const Batch& b : gpt_batches()) losses.push_back(static_cast<float>(trainer->step(b).loss));
  }
  const std::vector<MemberResult> members =
      run_members(T, reduction, o, nullptr, make_model, gpt_batches(), sequence_parallel);
  for (const MemberResult& m : members) {
    EXPECT_EQ(m.error, "");
    if (!m.error.empty()) return members;
    for (size_t s = 0; s < losses.size(); ++s)
      EXPECT_NEAR(m.losses[s], losses[s], 1e-5 * std::max(1.0f, std::fabs(losses[s]))) << "step " << s;
  }
  expect_slices_near(members, *whole, 1e-5f);
  return members;
}

TEST(TensorParallelGpt, StaysWithinRoundingOfTheWholeModel) {
  const TrainerOptions o = options(OptimizerConfig::Kind::kAdamW, 1.0f);
  for (int T : {2, 4}) {
    for (const char* reduction : {"allreduce", "deterministic"}) {
      SCOPED_TRACE(std::string("T ") + std::to_string(T) + ", " + reduction);
      expect_members_near_whole(gpt, T, reduction, o);
    }
  }
}

TEST(TensorParallelGpt, DeterministicIsReproducibleAndSplitsAsMegatronDoes) {
  const TrainerOptions o = options(OptimizerConfig::Kind::kSgd, 0.5f);
  const std::vector<MemberResult> a = run_members(2, "deterministic", o, nullptr, gpt, gpt_batches());
  const std::vector<MemberResult> b = run_members(2, "deterministic", o, nullptr, gpt, gpt_batches());
  for (size_t r = 0; r < a.size(); ++r) {
    ASSERT_EQ(a[r].error, "");
    EXPECT_EQ(a[r].values, b[r].values) << "member " << r;
    EXPECT_EQ(std::memcmp(a[r].losses.data(), b[r].losses.data(), a[r].losses.size() * sizeof(float)), 0);
  }
  // Member 1 of 2: qkv holds heads 2-3 of q, of k and of v (rows 8-15, 24-31, 40-47 of 48); the
  // projections hold its heads' columns; the MLP's fc its 32 of 64 rows, proj its columns.
  const MemberResult& m = a[1];
  std::map<std::string, Shape> shape;
  for (const Parameter& p : m.parameters) shape[p.name] = p.shape;
  EXPECT_EQ(shape["blocks.0.attn.qkv.weight"], (Shape{24, 16}));
  EXPECT_EQ(shape["blocks.0.attn.qkv.bias"], (Shape{24}));
  EXPECT_EQ(shape["blocks.0.attn.proj.weight"], (Shape{16, 8}));
  EXPECT_EQ(shape["blocks.0.attn.proj.bias"], (Shape{16}));
  EXPECT_EQ(shape["blocks.0.mlp.fc.weight"], (Shape{32, 16}));
  EXPECT_EQ(shape["blocks.0.mlp.proj.weight"], (Shape{16, 32}));
  EXPECT_EQ(shape["blocks.0.ln1.weight"], (Shape{16}));
  const Parameter* qkv = nullptr;
  for (const Parameter& p : m.parameters)
    if (p.name == "blocks.0.attn.qkv.weight") qkv = &p;
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(full_tensor_index(*qkv, 0), 8 * 16);        // q row 8
  EXPECT_EQ(full_tensor_index(*qkv, 8 * 16), 24 * 16);  // k row 24
  EXPECT_EQ(full_tensor_index(*qkv, 16 * 16 + 3), 40 * 16 + 3);  // v row 40
}

TEST(TensorParallelGpt, RefusesHeadsThatDoNotDivide) {
  comm::ThreadWorld world(3);
  GptConfig c = gpt_config();
  c.d_model = 24;
  c.mlp_hidden = 48;
  std::shared_ptr<Model> model = build_gpt(c);
  try {
    split_alone(*model, 3, world);
    ADD_FAILURE() << "4 heads split 3 ways";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention 'blocks.0.attn': 4 heads are not divisible by the "
                                         "tensor-parallel size 3"), std::string::npos) << e.what();
  }
}

// ---- The vocabulary: Megatron's vocabulary-parallel embedding, head and cross-entropy ----

constexpr int64_t kVocab = 24, kSeq = 8, kDim = 16;

// embed (24 tokens, learned positions) -> head (16 -> 24), both split by the vocabulary.
std::shared_ptr<Model> vocab_model() {
  const nlohmann::json j = {
      {"input", {{"kind", "tokens"}, {"seq_len", kSeq}, {"vocab", kVocab}, {"classes", kVocab}}},
      {"layers",
       {{{"type", "embedding"}, {"name", "embed"}, {"vocab", kVocab}, {"seq_len", kSeq}, {"dim", kDim},
         {"parallel", "vocab"}},
        {{"type", "linear"}, {"name", "head"}, {"in", kDim}, {"out", kVocab}, {"parallel", "vocab"}}}},
      {"loss", "cross_entropy"}};
  return build_model_from_json(j);
}
std::vector<Batch> vocab_batches() {
  std::vector<Batch> b;
  const std::string text = " !\"#$%&'()*+,-./01234567";  // text_batch's ids 0..23
  for (int s = 0; s < kSteps; ++s) b.push_back(testing::text_batch(text + text + text, 4, kSeq, 300 + s));
  return b;
}

// The whole model trained as T vocabulary-parallel members would: each member's logits from its
// rows of the head, the loss's row maxima and (in rank order, in double) sums of exponentials and
// target logits, the input gradient's partial products added in rank order. Returns the losses.
std::vector<float> vocab_reference(Model& full, int T, const TrainerOptions& o) {
  initialize_parameters(full.parameters(), o.seed);
  std::unique_ptr<Optimizer> optimizer = make_optimizer(o.optimizer);
  Layer& embed = *full.layers()[0];
  Parameter& w = *full.find_parameter("head.weight");
  Parameter& b = *full.find_parameter("head.bias");
  const int64_t held = kVocab / T;
  std::vector<float> losses;
  for (const Batch& batch : vocab_batches()) {
    for (Parameter* p : full.parameters()) std::memset(p->grad.data<char>(), 0, p->grad.nbytes());
    float loss = 0.0f;
    for (int mb = 0; mb < kMicroBatches; ++mb) {
      const Batch micro = batch.micro_batch(mb, kMicroBatches);
      SavedContext embed_ctx;
      const Tensor h = embed.forward(micro.inputs, embed_ctx);
      const int64_t R = h.numel() / kDim;
      std::vector<Tensor> logits(static_cast<size_t>(T));
      for (int r = 0; r < T; ++r) {
        Tensor y = Tensor::empty({R, held});
        cpu::broadcast_rows(R, held, b.value.f32() + r * held, y.f32());
        cpu::gemm(false, true, R, held, kDim, 1.0f, h.f32(), w.value.f32() + r * held * kDim, 1.0f, y.f32());
        logits[static_cast<size_t>(r)] = y;
      }
      const int32_t* t = micro.targets.i32();
      std::vector<float> row_max(static_cast<size_t>(R));
      std::vector<double> sum_exp(static_cast<size_t>(R)), target(static_cast<size_t>(R));
      for (int64_t i = 0; i < R; ++i) {
        float m = logits[0].f32()[i * held];
        for (int r = 0; r < T; ++r)
          for (int64_t c = 0; c < held; ++c) m = std::max(m, logits[static_cast<size_t>(r)].f32()[i * held + c]);
        row_max[static_cast<size_t>(i)] = m;
        double sum = 0.0, x_t = 0.0;
        for (int r = 0; r < T; ++r) {
          double part = 0.0;
          for (int64_t c = 0; c < held; ++c)
            part += std::exp(static_cast<double>(logits[static_cast<size_t>(r)].f32()[i * held + c]) - m);
          sum += part;
          if (t[i] / held == r) x_t += logits[static_cast<size_t>(r)].f32()[i * held + t[i] % held];
        }
        sum_exp[static_cast<size_t>(i)] = sum;
        target[static_cast<size_t>(i)] = x_t;
      }
      double total = 0.0;
      for (int64_t i = 0; i < R; ++i)
        total += static_cast<double>(row_max[static_cast<size_t>(i)]) + std::log(sum_exp[static_cast<size_t>(i)]) -
                 target[static_cast<size_t>(i)];
      const float scale = 1.0f / kMicroBatches;
      loss += static_cast<float>(static_cast<double>(scale) * total / static_cast<double>(R));
      // The logits' gradients, the head's gradients, and the input gradient summed in rank order.
      const double coef = static_cast<double>(scale) / static_cast<double>(R);
      Tensor dh = Tensor::zeros({R, kDim});
      for (int r = 0; r < T; ++r) {
        Tensor g = Tensor::empty({R, held});
        for (int64_t i = 0; i < R; ++i)
          for (int64_t c = 0; c < held; ++c) {
            const double p = std::exp(static_cast<double>(logits[static_cast<size_t>(r)].f32()[i * held + c]) -
                                      row_max[static_cast<size_t>(i)]) *
                             (1.0 / sum_exp[static_cast<size_t>(i)]);
            g.f32()[i * held + c] = static_cast<float>(coef * (r * held + c == t[i] ? p - 1.0 : p));
          }
        Tensor partial = Tensor::empty({R, kDim});
        cpu::gemm(false, false, R, kDim, held, 1.0f, g.f32(), w.value.f32() + r * held * kDim, 0.0f, partial.f32());
        if (r == 0) dh.copy_from(partial);
        else for (int64_t i = 0; i < dh.numel(); ++i) dh.f32()[i] += partial.f32()[i];
        cpu::gemm(true, false, held, kDim, R, 1.0f, g.f32(), h.f32(), 1.0f, w.grad.f32() + r * held * kDim);
        cpu::accumulate_column_sums(R, held, g.f32(), b.grad.f32() + r * held);
      }
      embed.backward(embed_ctx, dh.reshape(h.shape()));
    }
    optimizer->set_lr(o.optimizer.lr);
    optimizer->step(full.parameters());
    losses.push_back(loss);
  }
  return losses;
}

TEST(TensorParallelVocabulary, DeterministicIsBitwiseTheReference) {
  for (const int T : {2, 4}) {
    for (const OptimizerConfig::Kind kind : {OptimizerConfig::Kind::kSgd, OptimizerConfig::Kind::kAdamW}) {
      SCOPED_TRACE("T " + std::to_string(T));
      const TrainerOptions o = options(kind, 0.0f);
      const std::vector<MemberResult> members =
          run_members(T, "deterministic", o, nullptr, vocab_model, vocab_batches());
      std::shared_ptr<Model> full = vocab_model();
      const std::vector<float> losses = vocab_reference(*full, T, o);
      // Every parameter but the positions is split by its rows (the vocabulary).
      expect_members_bitwise(members, *full, losses,
                             [](const std::string& name) { return name == "embed.position_weight" ? -1 : 0; });
    }
  }
}

// The GPT splits its vocabulary by default: each member holds 1/T of the token embedding and of the
// head (weight and bias), the positions whole; the forward all-reduces the embedding's output, and
// the loss takes the logits split (no member ever holds a whole row of logits).
TEST(TensorParallelVocabulary, TheGptSplitsItsVocabularyByDefault) {
  const TrainerOptions o = options(OptimizerConfig::Kind::kAdamW, 1.0f);
  const std::vector<MemberResult> members = run_members(2, "allreduce", o, nullptr, gpt, gpt_batches());
  ASSERT_EQ(members[0].error, "");
  std::map<std::string, Shape> shape;
  for (const Parameter& p : members[1].parameters) shape[p.name] = p.shape;
  EXPECT_EQ(shape["embed.token_weight"], (Shape{64, 16}));
  EXPECT_EQ(shape["embed.position_weight"], (Shape{8, 16}));
  EXPECT_EQ(shape["head.weight"], (Shape{64, 16}));
  EXPECT_EQ(shape["head.bias"], (Shape{64}));
  std::shared_ptr<Model> model = gpt();
  comm::ThreadWorld world(2);
  split_alone(*model, 2, world);
  const nlohmann::json description = model->to_json();
  EXPECT_EQ(description["layers"][0]["parallel"], "vocab");
  EXPECT_EQ(description["layers"][0]["vocab"], 128);
  EXPECT_EQ(description["layers"].back()["parallel"], "vocab");
  EXPECT_EQ(description["layers"].back()["out"], 128);
}

// GPT-2's tied head splits with its embedding (the same rows of the same matrix), within rounding
// of the whole tied model; a tied head split without its embedding is refused naming both.
TEST(TensorParallelVocabulary, ATiedHeadSplitsWithItsEmbedding) {
  const auto tied = [] {
    GptConfig c = gpt_config();
    c.tie_embeddings = true;
    return std::shared_ptr<Model>(build_gpt(c));
  };
  expect_members_near_whole(tied, 2, "allreduce", options(OptimizerConfig::Kind::kAdamW, 1.0f));

  nlohmann::json j = tied()->to_json();
  for (auto& layer : j["layers"])
    if (layer["name"] == "head") layer["parallel"] = "vocab";
  for (auto& layer : j["layers"])
    if (layer["type"] == "transformer_block") layer.erase("parallel");
  std::shared_ptr<Model> half = build_model_from_json(j);
  comm::ThreadWorld world(2);
  try {
    split_alone(*half, 2, world);
    ADD_FAILURE() << "a tied head split without its embedding";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'head.weight' is tied to 'embed.token_weight', but only the copy is split"),
              std::string::npos) << e.what();
  }
}

// A vocabulary-parallel head must end the model: a layer that is not element-wise after it, or a
// loss that cannot take split logits, is refused naming the layer.
TEST(TensorParallelVocabulary, RefusesAHeadThatDoesNotEndTheModel) {
  nlohmann::json j = vocab_model()->to_json();
  j["layers"].push_back({{"type", "linear"}, {"name", "after"}, {"in", kVocab}, {"out", kVocab}});
  std::shared_ptr<Model> model = build_model_from_json(j);
  comm::ThreadWorld world(2);
  try {
    split_alone(*model, 2, world);
    ADD_FAILURE() << "a linear after the vocabulary-parallel head";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers[2] 'after' (linear) takes the logits of the vocabulary-parallel "
                                         "layers[1] 'head' (linear)"), std::string::npos) << e.what();
  }
  nlohmann::json bad = vocab_model()->to_json();
  bad["layers"][0]["parallel"] = "column";
  try {
    build_model_from_json(bad);
    ADD_FAILURE() << "an embedding split by columns";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers[0].parallel: an embedding splits by \"vocab\" only"),
              std::string::npos) << e.what();
  }
}

// ---- Pipeline messages at T > 1: each member sends its slice, the receivers gather them ----

// Three members, a [2, 5] tensor: slices of 4, 4 and 2 + 2 zeros of padding; each member's message
// is the header (rank 2, dims 2 and 5 as int64s: 6 floats) and its slice; gathered, the whole again.
TEST(StageMessageSlices, EachMemberSendsItsSliceAndTheGroupGathersTheWhole) {
  const Tensor whole = Tensor::from_vector({2, 5}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_EQ(exec::slice_message_bytes(whole.shape(), 3), 4 * (6 + 4));
  std::vector<std::vector<float>> gathered(3);
  in_members(3, [&](int r, const std::shared_ptr<comm::World>& world) {
    TensorParallelGroup group(world, TensorReduction::kAllReduce, 10.0);
    const Tensor message = exec::slice_message(whole, group);
    ASSERT_EQ(message.numel(), 6 + 4);
    const std::vector<float> part(message.f32() + 6, message.f32() + 10);
    const std::vector<std::vector<float>> want = {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 0, 0}};
    EXPECT_EQ(part, want[static_cast<size_t>(r)]) << "member " << r;
    const Tensor back = exec::gather_slice_message(message, group, "test");
    EXPECT_EQ(back.shape(), whole.shape());
    gathered[static_cast<size_t>(r)] = values_of(back);
    EXPECT_EQ(group.gathered_bytes(), 16);
  });
  for (const auto& g : gathered) EXPECT_EQ(g, values_of(whole));
}

// A message is checked before anything is allocated: its header's rank, its dimensions and its
// length against the slice they imply.
TEST(StageMessageSlices, RefusesAMessageThatIsNotASliceOfThisGroup) {
  comm::ThreadWorld world(1);
  TensorParallelGroup group(std::shared_ptr<comm::World>(&world.member(0), [](comm::World*) {}),
                            TensorReduction::kAllReduce, 10.0);
  const auto refused = [&](const Tensor& message, const std::string& want) {
    try {
      exec::gather_slice_message(message, group, "rank 1 1RECV_F0");
      ADD_FAILURE() << "accepted; wanted: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  Tensor good = exec::slice_message(Tensor::from_vector({2, 2}, {1, 2, 3, 4}), group);
  EXPECT_EQ(values_of(exec::gather_slice_message(good, group, "x")), (std::vector<float>{1, 2, 3, 4}));
  const auto with_value = [&](int index, int64_t value) {
    Tensor t = Tensor::empty(good.shape());
    t.copy_from(good);
    std::memcpy(t.f32() + 2 * index, &value, sizeof(value));
    return t;
  };
  refused(with_value(0, 9), "rank 1 1RECV_F0: a slice message's header names 9 dimensions");
  refused(with_value(1, 0), "a slice message's header has dimension 0 of 0");
  refused(with_value(2, int64_t{1} << 40), "a slice message's header has dimension 1 of 1099511627776");
  refused(with_value(2, 3), "a slice message of [2, 3] over 1 members holds 6 floats, this one 4");
  refused(Tensor::from_vector({1}, {0}), "expected a slice message");
}

// The vocabulary-parallel loss's correct count: the largest logit over every member's classes, the
// first of equal ones (here tied across members), as the unsplit loss counts.
TEST(TensorParallelVocabulary, CountsCorrectRowsAsTheWholeLossDoes) {
  // 3 rows of 4 classes; row 0's best is class 3 (member 1), row 1 ties classes 1 and 2 (members 0
  // and 1: the first wins), row 2's best is class 0.
  const std::vector<float> logits = {0, 1, 2, 5, /**/ 0, 4, 4, 1, /**/ 9, 1, 2, 3};
  Tensor targets = Tensor::empty({3}, DType::kI32);
  const auto split_counts = [&] {
    std::vector<int64_t> got(2);
    in_members(2, [&](int r, const std::shared_ptr<comm::World>& world) {
      CrossEntropyLoss split;
      ASSERT_TRUE(split.split_classes(std::make_shared<TensorParallelGroup>(world, TensorReduction::kAllReduce, 10.0)));
      std::vector<float> mine;  // member r's classes 2r, 2r + 1 of each row
      for (int row = 0; row < 3; ++row)
        for (int c = 0; c < 2; ++c) mine.push_back(logits[static_cast<size_t>(row * 4 + r * 2 + c)]);
      got[static_cast<size_t>(r)] = split.count_correct(Tensor::from_vector({3, 2}, mine), targets);
    });
    return got;
  };
  CrossEntropyLoss whole;
  for (const std::vector<int32_t>& t : {std::vector<int32_t>{3, 1, 0}, std::vector<int32_t>{3, 2, 0}}) {
    // {3, 1, 0}: all three; {3, 2, 0}: row 1's target is the second of the tied classes, not counted.
    std::copy(t.begin(), t.end(), targets.i32());
    const int64_t want = whole.count_correct(Tensor::from_vector({3, 4}, logits), targets);
    EXPECT_EQ(want, t[1] == 1 ? 3 : 2);
    EXPECT_EQ(split_counts(), (std::vector<int64_t>{want, want}));
  }
}


// The Llama block: grouped-query attention (4 heads, 2 key/value heads) with rotary positions, the
// SwiGLU MLP's gate_up split per half, no biases; T = 2 within rounding of the whole model.
TEST(TensorParallelLlama, StaysWithinRoundingOfTheWholeModel) {
  const std::vector<MemberResult> members = expect_members_near_whole(
      [] { return llama(24); }, 2, "allreduce", options(OptimizerConfig::Kind::kAdamW, 1.0f));
  ASSERT_EQ(members[1].error, "");
  std::map<std::string, Shape> shape;
  for (const Parameter& p : members[1].parameters) shape[p.name] = p.shape;
  EXPECT_EQ(shape["blocks.0.attn.qkv.weight"], (Shape{(2 + 2 * 1) * 4, 16}));  // 2 query heads, 1 kv head of 4
  EXPECT_EQ(shape["blocks.0.mlp.gate_up.weight"], (Shape{24, 16}));
  EXPECT_EQ(shape["blocks.0.mlp.down.weight"], (Shape{16, 12}));
}

// ---- Sequence parallelism: between the split layers each member holds its 1/T of the steps ----

// A tensor of `shape` drawn from N(0, 1) with `seed`.
Tensor random_normal(const Shape& shape, uint32_t seed) {
  Tensor t = Tensor::empty(shape);
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = normal(gen);
  return t;
}



// The GPT at T = 2 and 4 (both reductions; AdamW with clipping, and SGD with momentum) and the
// llama preset stay within 1e-5 of the whole model: losses and every parameter.
TEST(TensorParallelSequence, StaysWithinRoundingOfTheWholeModel) {
  const TrainerOptions adamw = options(OptimizerConfig::Kind::kAdamW, 1.0f);
  for (int T : {2, 4}) {
    for (const char* reduction : {"allreduce", "deterministic"}) {
      SCOPED_TRACE(std::string("T ") + std::to_string(T) + ", " + reduction);
      expect_members_near_whole(gpt, T, reduction, adamw, true);
    }
  }
  expect_members_near_whole(gpt, 2, "deterministic", options(OptimizerConfig::Kind::kSgd, 0.5f), true);
  SCOPED_TRACE("llama");
  expect_members_near_whole([] { return llama(); }, 2, "allreduce", adamw, true);
}

// In the deterministic mode every sum of the forward is the one without sequence parallelism,
// restricted to the member's steps (reduce_scatter_sequence adds in rank order too), and the steps
// are gathered exactly: the first step's loss is bitwise the loss without it (later steps differ
// by the norms' gradients, which are now sums of the members' partial sums). Reproducible from run
// to run, and the parameters every member keeps whole (norms, positions, row biases) stay bitwise
// the same on every member.
TEST(TensorParallelSequence, DeterministicForwardIsTheTensorParallelOneAndReproducible) {
  const TrainerOptions o = options(OptimizerConfig::Kind::kAdamW, 1.0f);
  for (int T : {2, 4}) {
    SCOPED_TRACE("T " + std::to_string(T));
    const std::vector<MemberResult> plain = run_members(T, "deterministic", o, nullptr, gpt, gpt_batches());
    const std::vector<MemberResult> a = run_members(T, "deterministic", o, nullptr, gpt, gpt_batches(), true);
    const std::vector<MemberResult> b = run_members(T, "deterministic", o, nullptr, gpt, gpt_batches(), true);
    for (size_t r = 0; r < a.size(); ++r) {
      ASSERT_EQ(a[r].error, "");
      ASSERT_EQ(plain[r].error, "");
      EXPECT_EQ(std::memcmp(&a[r].losses[0], &plain[r].losses[0], sizeof(float)), 0)
          << "member " << r << ": " << a[r].losses[0] << " vs " << plain[r].losses[0];
      EXPECT_NE(a[r].values, plain[r].values) << "member " << r << ": the norms' gradients were not summed apart";
      EXPECT_EQ(a[r].values, b[r].values) << "member " << r;
      EXPECT_EQ(std::memcmp(a[r].losses.data(), b[r].losses.data(), a[r].losses.size() * sizeof(float)), 0);
      for (size_t i = 0; i < a[r].parameters.size(); ++i) {
        if (a[r].parameters[i].shard.split()) continue;
        EXPECT_EQ(a[r].values[i], a[0].values[i]) << "member " << r << ": " << a[r].names[i];
      }
    }
  }
}

// A LayerNorm on the members' steps: each member's weight gradients are the sum, in rank order, of
// the gradients a whole LayerNorm computes on each member's steps alone (the reference here),
// bitwise; its output is the whole LayerNorm's on those steps, and what it keeps for backward is
// 1/T of what the whole one keeps.
TEST(TensorParallelSequence, NormGradientsAreTheMembersPartialSumsInRankOrder) {
  constexpr int T = 2;
  constexpr int64_t kBatch = 2, kSteps = 6, kDim = 8;
  const Tensor x = random_normal({kBatch, kSteps, kDim}, 1), dy = random_normal({kBatch, kSteps, kDim}, 2);
  const auto make_norm = [&] {
    auto norm = std::make_unique<LayerNorm>("ln", kDim);
    initialize_parameters(norm->parameters(), 3);
    norm->parameters()[0]->value.f32()[1] = 1.5f;  // weights other than the initial ones
    norm->parameters()[1]->value.f32()[2] = -0.25f;
    return norm;
  };
  // Member r's steps of a [B, S, d] tensor.
  const auto steps_of = [&](const Tensor& whole, int r) {
    const int64_t held = kSteps / T;
    Tensor shard = Tensor::empty({kBatch, held, kDim});
    for (int64_t b = 0; b < kBatch; ++b)
      std::memcpy(shard.f32() + b * held * kDim, whole.f32() + (b * kSteps + r * held) * kDim,
                  static_cast<size_t>(held * kDim) * sizeof(float));
    return shard;
  };
  std::vector<std::vector<float>> partial_w, partial_b, outputs;
  size_t whole_bytes = 0;
  {
    auto whole = make_norm();
    SavedContext ctx;
    whole->forward(x, ctx);
    whole_bytes = ctx.bytes();
  }
  for (int r = 0; r < T; ++r) {
    auto alone = make_norm();
    SavedContext ctx;
    outputs.push_back(values_of(alone->forward(steps_of(x, r), ctx)));
    alone->backward_input(ctx, steps_of(dy, r));
    alone->backward_weight(ctx);
    partial_w.push_back(values_of(alone->parameters()[0]->grad));
    partial_b.push_back(values_of(alone->parameters()[1]->grad));
  }
  std::vector<float> want_w = partial_w[0], want_b = partial_b[0];
  for (int64_t i = 0; i < kDim; ++i) {
    want_w[static_cast<size_t>(i)] += partial_w[1][static_cast<size_t>(i)];
    want_b[static_cast<size_t>(i)] += partial_b[1][static_cast<size_t>(i)];
  }
  in_members(T, [&](int r, const std::shared_ptr<comm::World>& world) {
    auto group = std::make_shared<TensorParallelGroup>(world, TensorReduction::kDeterministic, 5.0, true);
    auto norm = make_norm();
    norm->split_for_tensor_parallel(group);
    SavedContext ctx;
    const Tensor y = norm->forward(group->sequence_shard(x, "x"), ctx);
    EXPECT_EQ(values_of(y), outputs[static_cast<size_t>(r)]) << "member " << r;
    EXPECT_EQ(ctx.bytes() * T, whole_bytes) << "member " << r;
    norm->backward_input(ctx, group->sequence_shard(dy, "dy"));
    norm->backward_weight(ctx);
    EXPECT_EQ(values_of(norm->parameters()[0]->grad), want_w) << "member " << r;
    EXPECT_EQ(values_of(norm->parameters()[1]->grad), want_b) << "member " << r;
  });
  EXPECT_NE(want_w, partial_w[0]);  // the reference is a sum of two different parts
}

// The group's gather and reduce-scatter over steps, in both reductions: exact copies in member
// order, and each member's steps of the sum (integer-valued: exact in any order).
TEST(TensorParallelSequence, GatherAndReduceScatterTheMembersSteps) {
  constexpr int T = 3;
  for (TensorReduction reduction : {TensorReduction::kDeterministic, TensorReduction::kAllReduce})
  in_members(T, [&](int r, const std::shared_ptr<comm::World>& world) {
    TensorParallelGroup group(world, reduction, 5.0, true);
    // Member r's [2, 1, 2] steps hold 100 b + 10 r + i.
    Tensor shard = Tensor::empty({2, 1, 2});
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 2; ++i) shard.f32()[b * 2 + i] = static_cast<float>(100 * b + 10 * r + i);
    const Tensor whole = group.gather_sequence(shard, "gather");
    ASSERT_EQ(whole.shape(), (Shape{2, 3, 2}));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t s = 0; s < 3; ++s)
        for (int64_t i = 0; i < 2; ++i)
          EXPECT_EQ(whole.f32()[(b * 3 + s) * 2 + i], static_cast<float>(100 * b + 10 * s + i));
    // Every member contributes (r + 1) * whole: the sum is 6 * whole, member r keeps step r.
    Tensor partial = Tensor::empty(whole.shape());
    for (int64_t i = 0; i < whole.numel(); ++i) partial.f32()[i] = static_cast<float>(r + 1) * whole.f32()[i];
    const Tensor mine = group.reduce_scatter_sequence(partial, "scatter");
    ASSERT_EQ(mine.shape(), (Shape{2, 1, 2}));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 2; ++i) EXPECT_EQ(mine.f32()[b * 2 + i], 6.0f * shard.f32()[b * 2 + i]);
    EXPECT_EQ(group.scattered_bytes(), reduction == TensorReduction::kAllReduce ? 12 * 4 : 0);
    try {
      Tensor odd = Tensor::zeros({2, 4, 2});
      group.reduce_scatter_sequence(odd, "linear 'x' forward");
      ADD_FAILURE() << "4 steps over 3 members";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("linear 'x' forward: 4 steps per sequence are not divisible by the "
                                           "tensor-parallel size 3"),
                std::string::npos)
          << e.what();
    }
  });
}

// What sequence parallelism cannot split is refused naming it: a model that is not a language
// model, a vocabulary that T does not divide, sequences that T does not divide, T = 1.
TEST(TensorParallelSequence, RefusesWhatItCannotSplitBySteps) {
  const auto refusal = [](const ModelFactory& make_model, int T) {
    comm::ThreadWorld world(T);
    try {
      std::shared_ptr<Model> model = make_model();
      split_alone(*model, T, world, {}, true);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refusal(mlp, 2).find("sequence parallelism: the first layer must be a vocabulary-parallel token "
                                 "embedding"),
            std::string::npos)
      << refusal(mlp, 2);
  const auto odd_vocab = [] {
    GptConfig c = gpt_config();
    c.vocab = 126;
    return std::shared_ptr<Model>(build_gpt(c));
  };
  EXPECT_NE(refusal(odd_vocab, 4).find("layers[0] 'embed' (embedding) kept whole"), std::string::npos)
      << refusal(odd_vocab, 4);

  const TrainerOptions o = options(OptimizerConfig::Kind::kSgd, 0.0f);
  std::vector<Batch> six_steps;
  six_steps.push_back(testing::text_batch("sequences of six steps", 4, 6, 5));
  const std::vector<MemberResult> members = run_members(4, "allreduce", o, nullptr, gpt, six_steps, true);
  EXPECT_NE(members[0].error.find("6 steps per sequence are not divisible by the tensor-parallel size 4"),
            std::string::npos)
      << members[0].error;

  TrainingConfig c;
  c.base = o;
  c.sequence_parallel = true;
  try {
    make_trainer(gpt(), c);
    ADD_FAILURE() << "sequence parallelism without tensor parallelism";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("it needs tensor_parallel > 1, got 1"), std::string::npos) << e.what();
  }
}


// ---- B's all-reduce overlapping W (Megatron's overlap) ----

// A split block's fused backward starts each column split's all-reduce of its input gradient (the
// MLP's fc, the attention's qkv; under sequence parallelism their reduce-scatters) and computes the
// weight gradients meanwhile: its input gradient and every parameter gradient are bitwise those of
// backward_input then backward_weight (which overlaps nothing), and the overlapped bytes are the
// two [rows, d] partials.
TEST(TensorParallelOverlap, AFusedBlockBackwardIsBitwiseBThenW) {
  constexpr int T = 2;
  constexpr int64_t kBatch = 2, kSteps = 4, kDim = 16;
  for (const bool sp : {false, true}) {
  // Under sequence parallelism the block sees its member's steps.
  const int64_t steps = sp ? kSteps / T : kSteps;
  const Tensor x = random_normal({kBatch, steps, kDim}, 5), dy = random_normal({kBatch, steps, kDim}, 6);
  for (const char* reduction : {"allreduce", "deterministic"}) {
    SCOPED_TRACE(std::string(reduction) + (sp ? ", sequence parallel" : ""));
    in_members(T, [&](int r, const std::shared_ptr<comm::World>& world) {
      std::shared_ptr<TensorParallelGroup> group =
          std::make_shared<TensorParallelGroup>(world, parse_tensor_reduction(reduction), 5.0, sp);
      const auto run = [&](bool fused, std::vector<std::vector<float>>* grads) {
        TransformerBlock block("b", kDim, 4, 4 * kDim);
        block.split_for_tensor_parallel(group);
        initialize_parameters(block.parameters(), 11);
        SavedContext ctx;
        block.forward(x, ctx);
        const int64_t before = group->overlapped_bytes();
        Tensor dx;
        if (fused) {
          dx = block.backward(ctx, dy);
        } else {
          dx = block.backward_input(ctx, dy);
          block.backward_weight(ctx);
        }
        for (Parameter* p : block.parameters()) grads->push_back(values_of(p->grad));
        grads->push_back(values_of(dx));
        return group->overlapped_bytes() - before;
      };
      std::vector<std::vector<float>> fused, separate, blocking;
      EXPECT_EQ(run(true, &fused), 2 * kBatch * kSteps * kDim * 4) << "member " << r;
      EXPECT_EQ(run(false, &separate), 0) << "member " << r;
      EXPECT_EQ(fused, separate) << "member " << r;
      // tensor_parallel_overlap false: the fused backward's collectives block; the same bits.
      group = std::make_shared<TensorParallelGroup>(world, parse_tensor_reduction(reduction), 5.0, sp, false);
      EXPECT_EQ(run(true, &blocking), 0) << "member " << r;
      EXPECT_EQ(blocking, separate) << "member " << r;
    });
  }
  }
}

// The GPT trained by the sequential trainer (each layer's fused backward): every block's two
// input-gradient all-reduces and the vocabulary-parallel head's overlap W, (2 layers + 1) x rows x d
// floats per micro-batch, and it still stays within rounding of the whole model (above).
// Under sequence parallelism the reduce-scatters of the same partials overlap W instead.
TEST(TensorParallelOverlap, TheGptOverlapsEveryInputGradientAllReduce) {
  const GptConfig c = gpt_config();
  int64_t rows = 0;
  for (const Batch& b : gpt_batches()) rows += b.inputs.numel();
  for (const bool sp : {false, true}) {
    SCOPED_TRACE(sp ? "sequence parallel" : "tensor parallel");
    const std::vector<MemberResult> members = run_members(2, "allreduce", options(OptimizerConfig::Kind::kAdamW, 1.0f),
                                                          nullptr, gpt, gpt_batches(), sp);
    for (const MemberResult& m : members) {
      ASSERT_EQ(m.error, "");
      EXPECT_EQ(m.overlapped_bytes, (2 * c.layers + 1) * rows * c.d_model * 4);
    }
  }
}

}  // namespace
}  // namespace pf

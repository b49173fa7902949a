#include "runtime/layers/layer_factory.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "runtime/layers/activations.h"
#include "runtime/layers/attention.h"
#include "runtime/layers/cross_entropy.h"
#include "runtime/layers/embedding.h"
#include "runtime/layers/layer_norm.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/llama_block.h"
#include "runtime/layers/rms_norm.h"
#include "runtime/layers/residual.h"
#include "runtime/layers/sequential.h"
#include "runtime/layers/transformer_block.h"
#include "tests/layers/gradient_check.h"

namespace pf::test {
namespace {

using nlohmann::json;

std::vector<std::unique_ptr<Layer>> list(std::unique_ptr<Layer> a, std::unique_ptr<Layer> b) {
  std::vector<std::unique_ptr<Layer>> out;
  out.push_back(std::move(a));
  out.push_back(std::move(b));
  return out;
}

// Rebuilds `layer` from its config() and checks the copy is identical: the same config, the same
// parameters (names, shapes, init rules) and, with the same parameter values, bitwise the same
// output and gradients.
void expect_round_trip(Layer& layer, const Tensor& input) {
  SCOPED_TRACE(layer.config().dump());
  std::unique_ptr<Layer> copy;
  ASSERT_NO_THROW(copy = layer_from_json(layer.config(), "unused", "layers[0]"));
  EXPECT_EQ(copy->config(), layer.config());
  EXPECT_STREQ(copy->type(), layer.type());
  EXPECT_EQ(copy->name(), layer.name());
  // The config survives a trip through text, too.
  EXPECT_EQ(layer_from_json(json::parse(layer.config().dump()), "", "")->config(), layer.config());
  auto a = layer.parameters(), b = copy->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]->name, b[i]->name);
    EXPECT_EQ(a[i]->value.shape(), b[i]->value.shape());
    EXPECT_EQ(a[i]->init.kind, b[i]->init.kind);
    EXPECT_EQ(a[i]->init.stddev, b[i]->init.stddev);
  }
  randomize_parameters(layer, 9);
  copy_parameters(layer, *copy);
  zero_gradients(*copy);
  SavedContext ca, cb;
  const Tensor ya = layer.forward(input, ca), yb = copy->forward(input, cb);
  EXPECT_TRUE(bitwise_equal(ya, yb));
  const Tensor dy = uniform_tensor(ya.shape(), 3);
  EXPECT_TRUE(bitwise_equal(layer.backward(ca, dy), copy->backward(cb, dy)));
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(bitwise_equal(a[i]->grad, b[i]->grad)) << a[i]->name;
}

TEST(LayerFactory, EveryLayerRoundTrips) {
  const Tensor rows = uniform_tensor({2, 3, 8}, 1);
  Linear linear("head", 8, 5, false, 0.125f);
  expect_round_trip(linear, rows);
  Linear linear_default("fc", 8, 4);
  expect_round_trip(linear_default, rows);
  ReLU relu("act");
  expect_round_trip(relu, rows);
  GELU gelu("mlp.act");
  expect_round_trip(gelu, rows);
  LayerNorm ln("ln_f", 8, 1e-6f);
  expect_round_trip(ln, rows);
  Embedding embed("embed", 11, 4, 8, 0.01f);
  expect_round_trip(embed, int_tensor({2, 3}, {1, 10, 0, 3, 3, 7}));
  CausalSelfAttention attn("attn", 8, 4, 0.03f);
  expect_round_trip(attn, rows);
  TransformerBlock block("blocks.1", 8, 2, 20);
  expect_round_trip(block, rows);
  RMSNorm rms("norm", 8, 1e-6f);
  expect_round_trip(rms, rows);
  SwiGLU swiglu("mlp.act");
  expect_round_trip(swiglu, rows);
  Embedding tokens_only("embed", 11, 4, 8, 0.02f, false);
  expect_round_trip(tokens_only, int_tensor({2, 3}, {1, 10, 0, 3, 3, 7}));
  AttentionOptions gqa;
  gqa.kv_heads = 2;
  gqa.bias = false;
  gqa.rope_theta = 500000.0f;
  CausalSelfAttention llama_attn("attn", 8, 4, 0.02f, gqa);
  expect_round_trip(llama_attn, rows);
  LlamaBlockConfig lc;
  lc.dim = 8;
  lc.heads = 2;
  lc.kv_heads = 1;
  lc.mlp_hidden = 12;
  lc.rope_theta = 1000.0f;
  lc.norm_eps = 1e-6f;
  LlamaBlock llama("blocks.2", lc);
  expect_round_trip(llama, rows);
  Residual residual("res", std::make_unique<Sequential>(
                               "res.body", list(std::make_unique<LayerNorm>("res.ln", 8),
                                                std::make_unique<Linear>("res.fc", 8, 8))));
  expect_round_trip(residual, rows);
  Residual residual_single("res1", std::make_unique<GELU>("res1.act"));
  expect_round_trip(residual_single, rows);
  Sequential seq("stack", list(std::make_unique<TransformerBlock>("stack.0", 8, 2, 16),
                               std::make_unique<Linear>("stack.head", 8, 3)));
  expect_round_trip(seq, rows);
}

TEST(LayerFactory, DefaultsAndNames) {
  auto linear = layer_from_json({{"type", "linear"}, {"in", 3}, {"out", 2}}, "fc0", "layers[0]");
  EXPECT_EQ(linear->name(), "fc0");
  EXPECT_EQ(linear->config(), json({{"type", "linear"}, {"name", "fc0"}, {"in", 3}, {"out", 2},
                                    {"bias", true}, {"init_std", 0.02f}}));
  auto ln = layer_from_json({{"type", "layernorm"}, {"dim", 4}}, "ln", "");
  EXPECT_EQ(static_cast<LayerNorm&>(*ln).eps(), 1e-5f);
  auto block =
      layer_from_json({{"type", "transformer_block"}, {"name", "b"}, {"dim", 8}, {"heads", 2}}, "x", "");
  EXPECT_EQ(static_cast<TransformerBlock&>(*block).mlp_hidden(), 32);
  auto embed =
      layer_from_json({{"type", "embedding"}, {"vocab", 5}, {"seq_len", 4}, {"dim", 3}}, "embed", "");
  EXPECT_EQ(embed->parameters()[0]->init.stddev, 0.02f);
  auto llama = layer_from_json({{"type", "llama_block"}, {"dim", 64}, {"heads", 4}}, "b", "");
  const LlamaBlockConfig& lc = static_cast<LlamaBlock&>(*llama).block_config();
  EXPECT_EQ(lc.kv_heads, 4);
  EXPECT_EQ(lc.mlp_hidden, 176);
  EXPECT_EQ(lc.rope_theta, 10000.0f);
  EXPECT_EQ(lc.norm_eps, 1e-5f);

  // Sub-layers without names are called <name>.<index>; named ones keep their names.
  auto seq = layer_from_json(json::parse(R"({"type": "sequential", "name": "mlp", "layers": [
      {"type": "linear", "in": 4, "out": 6}, {"type": "gelu"},
      {"type": "residual", "layers": [{"type": "linear", "in": 6, "out": 6}]},
      {"type": "linear", "name": "head", "in": 6, "out": 2}]})"), "ignored", "");
  std::vector<std::string> names;
  for (Parameter* p : seq->parameters()) names.push_back(p->name);
  EXPECT_EQ(names, (std::vector<std::string>{"mlp.0.weight", "mlp.0.bias", "mlp.2.0.weight", "mlp.2.0.bias",
                                             "head.weight", "head.bias"}));
  const auto& layers = static_cast<Sequential&>(*seq).layers();
  EXPECT_EQ(layers[1]->name(), "mlp.1");
  EXPECT_STREQ(layers[2]->type(), "residual");
  EXPECT_EQ(layers[2]->name(), "mlp.2");
}

TEST(LayerFactory, ErrorsNameThePath) {
  auto expect_error = [](const json& description, const std::vector<std::string>& parts) {
    SCOPED_TRACE(description.dump());
    expect_invalid_argument([&] { layer_from_json(description, "x", "layers[2]"); }, parts);
  };
  expect_error({{"type", "attention"}, {"dim", 8}, {"heads", 2}, {"head", 2}},
               {"layers[2].head", "unknown field", "heads"});
  expect_error({{"type", "attention"}, {"dim", 8}}, {"layers[2].heads", "missing"});
  expect_error({{"type", "attention"}, {"dim", 8}, {"heads", "two"}},
               {"layers[2].heads", "integer", "string"});
  expect_error({{"type", "attention"}, {"dim", 8}, {"heads", 2.5}}, {"layers[2].heads", "integer"});
  expect_error({{"type", "attention"}, {"dim", 8}, {"heads", 0}}, {"layers[2].heads", "positive"});
  expect_error({{"type", "attention"}, {"dim", 8}, {"heads", -2}}, {"layers[2].heads", "positive"});
  expect_error({{"type", "attention"}, {"dim", 8}, {"heads", 3}}, {"layers[2].heads", "divisible"});
  expect_error({{"type", "attention"}, {"dim", 8}, {"heads", 2}, {"init_std", -1.0}},
               {"layers[2].init_std", "non-negative"});
  expect_error({{"type", "linear"}, {"in", 8}, {"out", 2}, {"bias", 1}}, {"layers[2].bias", "true or false"});
  expect_error({{"type", "linear"}, {"in", 8}, {"out", 5000000000LL}}, {"layers[2].out", "at most"});
  expect_error({{"type", "layernorm"}, {"dim", 8}, {"eps", 0}}, {"layers[2].eps", "positive"});
  expect_error({{"type", "layernorm"}, {"dim", 8}, {"eps", "small"}}, {"layers[2].eps", "number"});
  expect_error({{"type", "embedding"}, {"vocab", 8}, {"dim", 4}}, {"layers[2].seq_len", "missing"});
  expect_error({{"type", "transformer_block"}, {"dim", 8}, {"heads", 2}, {"mlp_hidden", 0}},
               {"layers[2].mlp_hidden", "positive"});
  expect_error({{"type", "attention"}, {"dim", 8}, {"heads", 4}, {"kv_heads", 3}},
               {"layers[2].kv_heads", "heads 4", "kv_heads 3"});
  expect_error({{"type", "attention"}, {"dim", 12}, {"heads", 4}, {"rope_theta", 10000}},
               {"layers[2].rope_theta", "even head dimension"});
  expect_error({{"type", "llama_block"}, {"dim", 8}, {"heads", 2}, {"rope_theta", 0}},
               {"layers[2].rope_theta", "positive"});
  expect_error({{"type", "llama_block"}, {"dim", 8}, {"heads", 2}, {"kv_heads", 4}},
               {"layers[2].kv_heads", "heads 2"});
  expect_error({{"type", "rmsnorm"}, {"dim", 8}, {"bias", true}}, {"layers[2].bias", "unknown field"});
  expect_error({{"type", "embedding"}, {"vocab", 8}, {"seq_len", 4}, {"dim", 4}, {"positions", 0}},
               {"layers[2].positions", "true or false"});
  expect_error({{"type", "relu"}, {"dim", 8}}, {"layers[2].dim", "unknown field"});
  expect_error({{"type", "relu"}, {"name", 3}}, {"layers[2].name", "string"});
  expect_error({{"type", "sequential"}, {"layers", {{"type", "relu"}}}}, {"layers[2].layers", "array"});
  expect_error({{"type", "residual"}}, {"layers[2].layers", "missing"});
  expect_error({{"type", "sequential"},
                {"layers", json::array({json{{"type", "relu"}}, json{{"type", "linear"}, {"in", 2}}})}},
               {"layers[2].layers[1].out", "missing"});
  expect_error({{"type", "residual"},
                {"layers", json::array({json{{"type", "sequential"},
                                             {"layers", json::array({json{{"type", "attention"},
                                                                          {"dim", 6}, {"heads", 4}}})}}})}},
               {"layers[2].layers[0].layers[0].heads", "divisible"});
  expect_error({{"type", "convolution"}},
               {"layers[2].type", "convolution", "linear", "relu", "gelu", "layernorm", "embedding",
                "attention", "transformer_block", "residual", "sequential"});
  expect_error({{"name", "x"}}, {"layers[2].type", "missing"});
  expect_error({{"type", 7}}, {"layers[2].type", "string"});
  expect_error(json::array({1, 2}), {"layers[2]", "object"});
  expect_error("linear", {"layers[2]", "object"});
}

TEST(LossFactory, BuildsCrossEntropy) {
  auto a = loss_from_json("cross_entropy", "loss");
  EXPECT_STREQ(a->type(), "cross_entropy");
  EXPECT_NE(dynamic_cast<CrossEntropyLoss*>(a.get()), nullptr);
  auto b = loss_from_json({{"type", "cross_entropy"}}, "loss");
  EXPECT_STREQ(b->type(), "cross_entropy");
}

TEST(LossFactory, ErrorsNameThePath) {
  expect_invalid_argument([] { loss_from_json("mse", "loss"); }, {"loss", "mse", "cross_entropy"});
  expect_invalid_argument([] { loss_from_json({{"type", "hinge"}}, "loss"); },
                          {"loss.type", "hinge", "cross_entropy"});
  expect_invalid_argument([] { loss_from_json({{"type", "cross_entropy"}, {"smoothing", 0.1}}, "loss"); },
                          {"loss.smoothing", "unknown field"});
  expect_invalid_argument([] { loss_from_json(json::object(), "loss"); }, {"loss.type", "missing"});
  expect_invalid_argument([] { loss_from_json(3, "loss"); }, {"loss", "number"});
  expect_invalid_argument([] { loss_from_json({{"type", 1}}, "loss"); }, {"loss.type", "string"});
}

}  // namespace
}  // namespace pf::test

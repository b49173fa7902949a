#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/models/builders.h"

namespace pf {
namespace {

std::string error_of(const std::string& json_text) {
  try {
    build_model_from_json_text(json_text);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error for " << json_text;
  return "";
}

TEST(ModelJson, PresetsBuildTheReferenceModels) {
  auto mlp = build_model_from_json_text(R"({"preset": "mlp", "input_dim": 8, "hidden": [16], "classes": 3})");
  EXPECT_EQ(mlp->layers().size(), 3u);  // fc0, act0, head
  EXPECT_EQ(mlp->num_parameter_elements(), 8 * 16 + 16 + 16 * 3 + 3);
  auto gpt = build_model_from_json_text(R"({"preset": "gpt", "vocab": 20, "seq_len": 8, "d_model": 16,
                                           "heads": 2, "layers": 2})");
  EXPECT_EQ(gpt->layers().size(), 5u);  // embed, 2 blocks, ln_f, head
  EXPECT_NE(gpt->find_parameter("blocks.1.attn.qkv.weight"), nullptr);
  EXPECT_EQ(gpt->input_spec().kind, InputSpec::Kind::kTokens);
}

// Llama: token-only embedding, blocks, RMSNorm, head without bias; counted parameter by parameter.
TEST(ModelJson, LlamaPreset) {
  auto llama = build_model_from_json_text(R"({"preset": "llama", "vocab": 20, "seq_len": 8, "d_model": 16,
      "heads": 4, "kv_heads": 2, "layers": 2, "mlp_hidden": 24, "rope_theta": 500000, "norm_eps": 1e-6})");
  EXPECT_EQ(llama->layers().size(), 5u);  // embed, 2 blocks, norm, head
  const int64_t hd = 4, qkv = (4 + 2 * 2) * hd * 16, block = 16 + qkv + 16 * 16 + 16 + 2 * 24 * 16 + 24 * 16;
  EXPECT_EQ(llama->num_parameter_elements(), 20 * 16 + 2 * block + 16 + 16 * 20);
  EXPECT_EQ(llama->find_parameter("head.bias"), nullptr);
  EXPECT_EQ(llama->find_parameter("embed.position_weight"), nullptr);
  EXPECT_NE(llama->find_parameter("blocks.1.mlp.gate_up.weight"), nullptr);
  // to_json rebuilds the same model.
  auto again = build_model_from_json(llama->to_json());
  EXPECT_EQ(again->to_json(), llama->to_json());
  EXPECT_EQ(again->num_parameter_elements(), llama->num_parameter_elements());

  EXPECT_NE(error_of(R"({"preset": "llama", "d_model": 16, "heads": 4, "kv_heads": 3})").find("kv_heads"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"preset": "llama", "d_model": 12, "heads": 4})").find("even head dimension"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"preset": "llama", "rope_theta": -1})").find("rope_theta"), std::string::npos);
  EXPECT_NE(error_of(R"({"preset": "llama", "norm_eps": 1e300})").find("norm_eps"), std::string::npos);
  // Tied: the head is a copy of the token embedding, and the model JSON keeps the tie.
  auto tied = build_model_from_json_text(R"({"preset": "llama", "vocab": 20, "d_model": 16, "tie_embeddings": true})");
  ASSERT_EQ(tied->tied_pairs().size(), 1u);
  EXPECT_EQ(tied->tied_pairs()[0].first->name, "embed.token_weight");
  EXPECT_EQ(tied->tied_pairs()[0].second->name, "head.weight");
  EXPECT_EQ(build_model_from_json(tied->to_json())->tied_pairs().size(), 1u);
  // Its size counts the tied matrix once (as Transformers' num_parameters does); memory holds both.
  auto untied = build_model_from_json_text(R"({"preset": "llama", "vocab": 20, "d_model": 16})");
  EXPECT_EQ(tied->num_parameter_elements(), untied->num_parameter_elements());
  EXPECT_EQ(tied->num_distinct_parameter_elements(), untied->num_parameter_elements() - 20 * 16);
  EXPECT_EQ(untied->num_distinct_parameter_elements(), untied->num_parameter_elements());
  EXPECT_NE(error_of(R"({"preset": "llama", "tie_embeddings": 1})").find("tie_embeddings"), std::string::npos);
  EXPECT_NE(error_of(R"({"input": {"kind": "features", "features": 4, "classes": 4},
      "layers": [{"type": "linear", "in": 4, "out": 4, "tied_to": "nothing.weight"}]})").find("nothing.weight"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"input": {"kind": "features", "features": 4, "classes": 3},
      "layers": [{"type": "linear", "name": "a", "in": 4, "out": 4},
                 {"type": "linear", "name": "b", "in": 4, "out": 3, "tied_to": "a.weight"}]})").find("shapes differ"),
            std::string::npos);
}

TEST(ModelJson, ResNetPreset) {
  auto m = build_model_from_json(nlohmann::json::parse(
      R"({"preset": "resnet", "channels": 3, "image_size": 8, "width": 8, "blocks": [1, 2], "groups": 4, "classes": 5})"));
  EXPECT_EQ(m->input_spec().kind, InputSpec::Kind::kFeatures);
  EXPECT_EQ(m->input_spec().features, 3 * 8 * 8);
  EXPECT_EQ(m->input_spec().classes, 5);
  std::vector<std::string> names;
  for (const auto& l : m->layers()) names.push_back(l->name());
  EXPECT_EQ(names, (std::vector<std::string>{"stem", "stem_norm", "stem_act", "blocks.0", "blocks.1", "blocks.2", "pool",
                                             "head"}));
  // The first block keeps 8 channels (no shortcut); the second stage's first block doubles them
  // with a strided projection shortcut; the head reads 16 channels.
  ASSERT_NE(m->find_parameter("blocks.0.res.0.weight"), nullptr);
  EXPECT_EQ(m->find_parameter("blocks.0.res.0.weight")->shape, (Shape{8, 8, 3, 3}));
  EXPECT_EQ(m->find_parameter("blocks.0.res.shortcut.0.weight"), nullptr);
  ASSERT_NE(m->find_parameter("blocks.1.res.shortcut.0.weight"), nullptr);
  EXPECT_EQ(m->find_parameter("blocks.1.res.shortcut.0.weight")->shape, (Shape{16, 8, 1, 1}));
  EXPECT_EQ(m->find_parameter("blocks.2.res.shortcut.0.weight"), nullptr);
  EXPECT_EQ(m->find_parameter("head.weight")->shape, (Shape{5, 16}));
  EXPECT_EQ(m->find_parameter("stem.bias"), nullptr);  // a convolution before a GroupNorm has no bias
  // Its JSON rebuilds the same model.
  auto b = build_model_from_json(m->to_json());
  EXPECT_EQ(m->to_json(), b->to_json());
  ASSERT_EQ(m->parameters().size(), b->parameters().size());
  for (size_t i = 0; i < m->parameters().size(); ++i) EXPECT_EQ(m->parameters()[i]->name, b->parameters()[i]->name);
  EXPECT_NE(error_of(R"({"preset": "resnet", "width": 6, "groups": 4})").find("groups"), std::string::npos);
  EXPECT_NE(error_of(R"({"preset": "resnet", "image_size": 2, "blocks": [1, 1, 1]})").find("stage 2"), std::string::npos);
  EXPECT_NE(error_of(R"({"preset": "resnet", "blocks": [1, 0]})").find("blocks"), std::string::npos);
  EXPECT_NE(error_of(R"({"preset": "resnet", "depth": 18})").find("depth"), std::string::npos);
}

TEST(ModelJson, ToJsonRebuildsAnIdenticalModel) {
  GptConfig c;
  c.vocab = 11;
  c.seq_len = 6;
  c.d_model = 8;
  c.heads = 2;
  c.layers = 1;
  auto a = build_gpt(c);
  auto b = build_model_from_json(a->to_json());
  EXPECT_EQ(a->to_json(), b->to_json());
  ASSERT_EQ(a->parameters().size(), b->parameters().size());
  for (size_t i = 0; i < a->parameters().size(); ++i) {
    EXPECT_EQ(a->parameters()[i]->name, b->parameters()[i]->name);
    EXPECT_EQ(a->parameters()[i]->value.shape(), b->parameters()[i]->value.shape());
  }
}

TEST(ModelJson, ExplicitLayersAndStrictErrors) {
  auto m = build_model_from_json_text(R"({"input": {"kind": "features", "features": 4, "classes": 2},
      "layers": [{"type": "linear", "in": 4, "out": 5}, {"type": "gelu"}, {"type": "linear", "in": 5, "out": 2}],
      "loss": "cross_entropy"})");
  EXPECT_EQ(m->layers().size(), 3u);
  EXPECT_NE(m->find_parameter("layers.0.weight"), nullptr);

  EXPECT_NE(error_of("{not json").find("malformed"), std::string::npos);
  EXPECT_NE(error_of(R"({"preset": "mlp", "hiden": [4]})").find("hiden"), std::string::npos);
  EXPECT_NE(error_of(R"({"preset": "unet"})").find("unet"), std::string::npos);
  EXPECT_NE(error_of(R"({"input": {"kind": "features", "features": 4, "classes": 2},
                         "layers": [{"type": "convolution"}]})").find("convolution"), std::string::npos);
  EXPECT_NE(error_of(R"({"input": {"kind": "features", "features": 4, "classes": 2},
                         "layers": [{"type": "linear", "in": 4, "out": -1}]})").find("layers[0]"), std::string::npos);
  EXPECT_NE(error_of(R"({"input": {"kind": "pixels", "classes": 2}, "layers": []})").find("pixels"), std::string::npos);
  EXPECT_NE(error_of(R"({"preset": "gpt", "d_model": 10, "heads": 3})").find("heads"), std::string::npos);
  EXPECT_NE(error_of(R"({"format": "pipeforge.model/9", "preset": "mlp"})").find("pipeforge.model/9"), std::string::npos);
  EXPECT_NE(error_of(R"({"input": {"kind": "features", "features": 4, "classes": 2},
      "layers": [{"type": "linear", "name": "x", "in": 4, "out": 4}, {"type": "linear", "name": "x", "in": 4, "out": 2}]})")
                .find("duplicate"), std::string::npos);
}

TEST(ModelJson, CheckBatchNamesTheProblem) {
  auto m = build_mlp(MlpConfig{});
  Tensor x = Tensor::zeros({4, 32});
  Tensor y = Tensor::from_ints({4}, {0, 1, 2, 3});
  m->check_batch(x, y, "batch");
  try {
    m->check_batch(Tensor::zeros({4, 31}), y, "micro-batch 2");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("micro-batch 2: inputs"), std::string::npos) << e.what();
  }
  try {
    m->check_batch(x, Tensor::from_ints({4}, {0, 1, 99, 3}), "batch");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("99"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pf

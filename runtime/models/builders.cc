#include "runtime/models/builders.h"

#include <cmath>

#include "runtime/core/error.h"
#include "runtime/core/json_object.h"
#include "runtime/layers/activations.h"
#include "runtime/layers/cross_entropy.h"
#include "runtime/layers/embedding.h"
#include "runtime/layers/layer_factory.h"
#include "runtime/layers/layer_norm.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/transformer_block.h"

namespace pf {
namespace {

void check_mlp(const MlpConfig& c) {
  PF_CHECK_ARG(c.input_dim > 0, "mlp: input_dim must be > 0, got ", c.input_dim);
  PF_CHECK_ARG(c.classes > 0, "mlp: classes must be > 0, got ", c.classes);
  for (size_t i = 0; i < c.hidden.size(); ++i)
    PF_CHECK_ARG(c.hidden[i] > 0, "mlp: hidden[", i, "] must be > 0, got ", c.hidden[i]);
  PF_CHECK_ARG(c.activation == "relu" || c.activation == "gelu", "mlp: activation must be relu or gelu, got '",
               c.activation, "'");
}

void check_gpt(const GptConfig& c) {
  PF_CHECK_ARG(c.vocab > 0, "gpt: vocab must be > 0, got ", c.vocab);
  PF_CHECK_ARG(c.seq_len > 0, "gpt: seq_len must be > 0, got ", c.seq_len);
  PF_CHECK_ARG(c.d_model > 0, "gpt: d_model must be > 0, got ", c.d_model);
  PF_CHECK_ARG(c.heads > 0 && c.d_model % c.heads == 0, "gpt: heads must be > 0 and divide d_model (",
               c.d_model, "), got ", c.heads);
  PF_CHECK_ARG(c.layers >= 0, "gpt: layers must be >= 0, got ", c.layers);
  PF_CHECK_ARG(c.mlp_hidden >= 0, "gpt: mlp_hidden must be >= 0, got ", c.mlp_hidden);
}

std::unique_ptr<Model> build_preset(const JsonObject& obj, const std::string& preset) {
  if (preset == "mlp") {
    MlpConfig c;
    c.input_dim = obj.get_int("input_dim", c.input_dim);
    c.hidden = obj.get_int_list("hidden", c.hidden);
    c.classes = obj.get_int("classes", c.classes);
    c.activation = obj.get_string("activation", c.activation);
    obj.reject_unknown({"preset", "format"});
    return build_mlp(c);
  }
  if (preset == "gpt") {
    GptConfig c;
    c.vocab = obj.get_int("vocab", c.vocab);
    c.seq_len = obj.get_int("seq_len", c.seq_len);
    c.d_model = obj.get_int("d_model", c.d_model);
    c.heads = obj.get_int("heads", c.heads);
    c.layers = obj.get_int("layers", c.layers);
    c.mlp_hidden = obj.get_int("mlp_hidden", c.mlp_hidden);
    obj.reject_unknown({"preset", "format"});
    return build_gpt(c);
  }
  fail(ErrorCode::kInvalidArgument, "preset: unknown preset '", preset, "' (known: mlp, gpt)");
}

InputSpec parse_input(const nlohmann::json& j) {
  JsonObject obj(j, "input");
  InputSpec spec;
  const std::string kind = obj.get_string("kind");
  if (kind == "features") {
    spec.kind = InputSpec::Kind::kFeatures;
    spec.features = obj.get_positive_int("features");
  } else if (kind == "tokens") {
    spec.kind = InputSpec::Kind::kTokens;
    spec.vocab = obj.get_positive_int("vocab");
    spec.seq_len = obj.get_positive_int("seq_len");
  } else {
    fail(ErrorCode::kInvalidArgument, "input.kind: unknown input kind '", kind, "' (known: features, tokens)");
  }
  spec.classes = obj.get_positive_int("classes");
  obj.reject_unknown();
  return spec;
}

}  // namespace

std::unique_ptr<Model> build_mlp(const MlpConfig& config) {
  check_mlp(config);
  std::vector<std::unique_ptr<Layer>> layers;
  int64_t in = config.input_dim;
  for (size_t i = 0; i < config.hidden.size(); ++i) {
    layers.push_back(std::make_unique<Linear>("fc" + std::to_string(i), in, config.hidden[i], true,
                                              1.0f / std::sqrt(static_cast<float>(in))));
    if (config.activation == "relu") {
      layers.push_back(std::make_unique<ReLU>("act" + std::to_string(i)));
    } else {
      layers.push_back(std::make_unique<GELU>("act" + std::to_string(i)));
    }
    in = config.hidden[i];
  }
  layers.push_back(std::make_unique<Linear>("head", in, config.classes, true,
                                            1.0f / std::sqrt(static_cast<float>(in))));
  InputSpec spec;
  spec.kind = InputSpec::Kind::kFeatures;
  spec.features = config.input_dim;
  spec.classes = config.classes;
  return std::make_unique<Model>(spec, std::move(layers), std::make_unique<CrossEntropyLoss>());
}

std::unique_ptr<Model> build_gpt(const GptConfig& config) {
  check_gpt(config);
  const int64_t hidden = config.mlp_hidden > 0 ? config.mlp_hidden : 4 * config.d_model;
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<Embedding>("embed", config.vocab, config.seq_len, config.d_model));
  for (int64_t i = 0; i < config.layers; ++i) {
    layers.push_back(std::make_unique<TransformerBlock>("blocks." + std::to_string(i), config.d_model,
                                                        config.heads, hidden));
  }
  layers.push_back(std::make_unique<LayerNorm>("ln_f", config.d_model));
  layers.push_back(std::make_unique<Linear>("head", config.d_model, config.vocab));
  InputSpec spec;
  spec.kind = InputSpec::Kind::kTokens;
  spec.vocab = config.vocab;
  spec.seq_len = config.seq_len;
  spec.classes = config.vocab;
  return std::make_unique<Model>(spec, std::move(layers), std::make_unique<CrossEntropyLoss>());
}

std::unique_ptr<Model> build_model_from_json(const nlohmann::json& description) {
  JsonObject obj(description, "");
  if (obj.has("format")) {
    const std::string format = obj.get_string("format");
    PF_CHECK_ARG(format == "pipeforge.model/1", "format: unsupported model format '", format,
                 "' (this build reads pipeforge.model/1)");
  }
  if (obj.has("preset")) return build_preset(obj, obj.get_string("preset"));

  InputSpec spec = parse_input(obj.get("input"));
  const auto& list = obj.get_array("layers");
  std::vector<std::unique_ptr<Layer>> layers;
  for (size_t i = 0; i < list.size(); ++i) {
    layers.push_back(layer_from_json(list[i], "layers." + std::to_string(i), "layers[" + std::to_string(i) + "]"));
  }
  PF_CHECK_ARG(!layers.empty(), "layers: at least one layer is required");
  std::unique_ptr<Loss> loss = loss_from_json(obj.has("loss") ? obj.get("loss") : nlohmann::json("cross_entropy"), "loss");
  obj.reject_unknown();
  return std::make_unique<Model>(spec, std::move(layers), std::move(loss));
}

std::unique_ptr<Model> build_model_from_json_text(const std::string& text) {
  nlohmann::json description;
  try {
    description = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail(ErrorCode::kInvalidArgument, "model JSON is malformed: ", e.what());
  }
  return build_model_from_json(description);
}

}  // namespace pf

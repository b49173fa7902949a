#include "runtime/train/local_heads.h"

#include <algorithm>

#include "runtime/core/error.h"
#include "runtime/layers/activations.h"
#include "runtime/layers/cross_entropy.h"
#include "runtime/layers/layer_norm.h"
#include "runtime/layers/linear.h"

namespace pf {

int64_t stage_output_width(const Model& model, int end, int stage) {
  PF_CHECK_ARG(end >= 1 && end <= static_cast<int>(model.layers().size()), "local head of stage ", stage,
               ": layer range ends at ", end, " of ", model.layers().size());
  for (int i = end - 1; i >= 0; --i) {
    const nlohmann::json c = model.layers()[static_cast<size_t>(i)]->config();
    if (c.contains("out")) return c.at("out").get<int64_t>();
    if (c.contains("dim")) return c.at("dim").get<int64_t>();
  }
  if (model.input_spec().kind == InputSpec::Kind::kFeatures) return model.input_spec().features;
  fail(ErrorCode::kInvalidArgument, "local head of stage ", stage,
       ": cannot tell the width of its output (no layer up to ", end, " has an 'out' or 'dim')");
}

std::unique_ptr<Model> make_local_head(const Model& model, int stage, int end, const std::string& kind) {
  check_local_head_kind(kind);
  const int64_t width = stage_output_width(model, end, stage);
  const int64_t classes = model.input_spec().classes;
  std::string k = kind;
  if (k == "auto") k = model.input_spec().kind == InputSpec::Kind::kTokens ? "layernorm-linear" : "linear";
  const std::string prefix = "heads." + std::to_string(stage) + ".";
  std::vector<std::unique_ptr<Layer>> layers;
  if (k == "layernorm-linear") layers.push_back(std::make_unique<LayerNorm>(prefix + "ln", width));
  if (k == "mlp") {
    layers.push_back(std::make_unique<Linear>(prefix + "fc", width, width));
    layers.push_back(std::make_unique<GELU>(prefix + "act"));
  }
  layers.push_back(std::make_unique<Linear>(prefix + "proj", width, classes));
  InputSpec in;
  in.kind = InputSpec::Kind::kFeatures;
  in.features = width;
  in.classes = classes;
  return std::make_unique<Model>(in, std::move(layers), std::make_unique<CrossEntropyLoss>());
}

uint64_t local_head_seed(uint64_t seed, int stage) {
  return seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(stage + 1));
}

}  // namespace pf

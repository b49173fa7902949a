#include "runtime/train/local_heads.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/layers/activations.h"
#include "runtime/layers/class_token.h"
#include "runtime/layers/cross_entropy.h"
#include "runtime/layers/layer_norm.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/pooling.h"

namespace pf {

namespace {

// Reads one layer's config (last to first inside composites): sets the width and the form where
// the layer tells them and they are still unknown (0 / unset). Returns true once both are known.
struct OutputReader {
  int64_t width = 0;
  bool form_known = false;
  StageOutput::Form form = StageOutput::Form::kRows;

  void set_form(StageOutput::Form f) {
    if (!form_known) form = f;
    form_known = true;
  }
  void set_width(int64_t w) {
    if (width == 0) width = w;
  }
  bool done() const { return width > 0 && form_known; }

  bool read(const nlohmann::json& c) {
    const std::string type = c.value("type", "");
    if (type == "sequential" || type == "residual") {
      const nlohmann::json& layers = c.at("layers");
      for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
        if (read(*it)) return true;
      }
      return done();
    }
    if (type == "global_avg_pool" || type == "class_token") set_form(StageOutput::Form::kRows);
    if (type == "conv2d" || type == "groupnorm" || type == "max_pool2d" || type == "avg_pool2d")
      set_form(StageOutput::Form::kFeatureMaps);
    if (type == "patch_embedding") set_form(StageOutput::Form::kImageTokens);
    if (c.contains("out")) set_width(c.at("out").get<int64_t>());
    if (c.contains("out_channels")) set_width(c.at("out_channels").get<int64_t>());
    if (c.contains("channels") && type == "groupnorm") set_width(c.at("channels").get<int64_t>());
    if (c.contains("dim")) set_width(c.at("dim").get<int64_t>());
    if (type == "linear" || type == "embedding") set_form(StageOutput::Form::kRows);
    return done();
  }
};

}  // namespace

StageOutput stage_output(const Model& model, int end, int stage) {
  PF_CHECK_ARG(end >= 1 && end <= static_cast<int>(model.layers().size()), "local head of stage ", stage,
               ": layer range ends at ", end, " of ", model.layers().size());
  OutputReader reader;
  for (int i = end - 1; i >= 0 && !reader.done(); --i) reader.read(model.layers()[static_cast<size_t>(i)]->config());
  const bool tokens = model.input_spec().kind == InputSpec::Kind::kTokens;
  if (reader.width == 0 && !tokens) reader.set_width(model.input_spec().features);
  PF_CHECK_ARG(reader.width > 0, "local head of stage ", stage,
               ": cannot tell the width of its output (no layer up to ", end,
               " has an 'out', 'out_channels', 'channels' or 'dim')");
  StageOutput out;
  out.width = reader.width;
  // A row per token of a token model (its targets are per token); a feature-input model's rows
  // unless a layer said otherwise.
  out.form = reader.form_known && reader.form != StageOutput::Form::kRows ? reader.form
             : tokens                                                     ? StageOutput::Form::kTokens
                                                                          : StageOutput::Form::kRows;
  if (tokens && out.form == StageOutput::Form::kImageTokens) out.form = StageOutput::Form::kTokens;
  return out;
}

std::unique_ptr<Model> make_local_head(const Model& model, int stage, int end, const std::string& kind) {
  check_local_head_kind(kind);
  const StageOutput output = stage_output(model, end, stage);
  const int64_t width = output.width;
  const int64_t classes = model.input_spec().classes;
  using Form = StageOutput::Form;
  std::string k = kind;
  if (k == "auto") k = output.form == Form::kTokens || output.form == Form::kImageTokens ? "layernorm-linear" : "linear";
  const std::string prefix = "heads." + std::to_string(stage) + ".";
  std::vector<std::unique_ptr<Layer>> layers;
  if (output.form == Form::kFeatureMaps) layers.push_back(std::make_unique<GlobalAvgPool>(prefix + "pool"));
  if (output.form == Form::kImageTokens) layers.push_back(std::make_unique<ClassToken>(prefix + "pool"));
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

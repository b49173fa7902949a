// pf_model_builder_*: assembles model JSON ("pipeforge.model/1") step by step and builds it through
// pf::build_model_from_json, the same path as pf_model_create_from_json.
#include <string>

#include <nlohmann/json.hpp>

#include "c_api/guard.h"
#include "c_api/handles.h"
#include "runtime/core/json_text.h"
#include "runtime/core/limits.h"
#include "runtime/models/builders.h"

namespace {

using pf::capi::guard;
using pf::capi::guard_void;
using pf::capi::require;

void check_positive(int64_t value, const char* name) {
  PF_CHECK_ARG(value > 0, "argument '", name, "' must be > 0, got ", value);
}

}  // namespace

extern "C" {

pf_status* pf_model_builder_create(pf_model_builder** out) {
  return guard(__func__, [&] {
    require(out, "out");
    *out = new pf_model_builder();
  });
}

pf_status* pf_model_builder_set_input_features(pf_model_builder* builder, int64_t features,
                                               int64_t classes) {
  return guard(__func__, [&] {
    require(builder, "builder");
    check_positive(features, "features");
    check_positive(classes, "classes");
    builder->input = {{"kind", "features"}, {"features", features}, {"classes", classes}};
  });
}

pf_status* pf_model_builder_set_input_tokens(pf_model_builder* builder, int64_t vocab, int64_t seq_len,
                                             int64_t classes) {
  return guard(__func__, [&] {
    require(builder, "builder");
    check_positive(vocab, "vocab");
    check_positive(seq_len, "seq_len");
    check_positive(classes, "classes");
    builder->input = {{"kind", "tokens"}, {"vocab", vocab}, {"seq_len", seq_len}, {"classes", classes}};
  });
}

pf_status* pf_model_builder_add_layer(pf_model_builder* builder, const char* type, const char* options_json) {
  return guard(__func__, [&] {
    require(builder, "builder");
    const std::string layer_type = pf::capi::require_string(type, "type");
    nlohmann::json layer = nlohmann::json::object();
    if (options_json != nullptr) {
      layer = pf::parse_json_text(options_json, "options_json", pf::limits::kMaxModelJsonBytes);
      PF_CHECK_ARG(layer.is_object(), "options_json: expected a JSON object, got ", layer.type_name());
      PF_CHECK_ARG(!layer.contains("type"),
                   "options_json: must not contain \"type\" (the layer type is the 'type' argument)");
    }
    layer["type"] = layer_type;
    builder->layers.push_back(std::move(layer));
  });
}

pf_status* pf_model_builder_set_loss(pf_model_builder* builder, const char* loss) {
  return guard(__func__, [&] {
    require(builder, "builder");
    builder->loss = pf::capi::require_string(loss, "loss");
  });
}

pf_status* pf_model_builder_build(const pf_model_builder* builder, pf_model** out) {
  return guard(__func__, [&] {
    require(builder, "builder");
    require(out, "out");
    PF_CHECK_STATE(!builder->input.is_null(),
                   "no input set: call pf_model_builder_set_input_features or pf_model_builder_set_input_tokens");
    const nlohmann::json description = {{"format", "pipeforge.model/1"},
                                        {"input", builder->input},
                                        {"layers", builder->layers},
                                        {"loss", builder->loss}};
    auto model = std::make_unique<pf_model>();
    model->model = std::shared_ptr<pf::Model>(pf::build_model_from_json(description));
    *out = model.release();
  });
}

void pf_model_builder_destroy(pf_model_builder* builder) {
  guard_void(__func__, [&] { delete builder; });
}

}  // extern "C"

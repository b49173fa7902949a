// pf_model_*: models from JSON, from the MLP / GPT presets and from a Transformers folder's
// config.json, and what a caller can ask of them.
#include <cstddef>
#include <string>
#include <vector>

#include "c_api/guard.h"
#include "c_api/handles.h"
#include "c_api/struct_io.h"
#include "runtime/interop/hf_models.h"
#include "runtime/models/builders.h"

namespace {

using pf::capi::guard;
using pf::capi::guard_void;
using pf::capi::require;

// Version-1 sizes: an older caller's struct must hold at least these fields.
constexpr size_t kMlpConfigV1Size = sizeof(pf_mlp_config);
constexpr size_t kGptConfigV1Size = sizeof(pf_gpt_config);
static_assert(kMlpConfigV1Size == 48 && kGptConfigV1Size == 56, "a v1 struct layout changed");

const int64_t kDefaultHidden[] = {64, 64};

pf_mlp_config default_mlp_config() {
  const pf::MlpConfig d;
  pf_mlp_config c{};
  c.struct_size = sizeof(pf_mlp_config);
  c.input_dim = d.input_dim;
  c.hidden = kDefaultHidden;
  c.num_hidden = sizeof(kDefaultHidden) / sizeof(kDefaultHidden[0]);
  c.classes = d.classes;
  c.activation = "relu";
  return c;
}

pf_gpt_config default_gpt_config() {
  const pf::GptConfig d;
  pf_gpt_config c{};
  c.struct_size = sizeof(pf_gpt_config);
  c.vocab = d.vocab;
  c.seq_len = d.seq_len;
  c.d_model = d.d_model;
  c.heads = d.heads;
  c.layers = d.layers;
  c.mlp_hidden = d.mlp_hidden;
  return c;
}

pf_model* wrap(std::unique_ptr<pf::Model> model) {
  auto handle = std::make_unique<pf_model>();
  handle->model = std::shared_ptr<pf::Model>(std::move(model));
  return handle.release();
}

}  // namespace

extern "C" {

pf_status* pf_model_create_from_json(const char* json, pf_model** out) {
  return guard(__func__, [&] {
    const std::string text = pf::capi::require_string(json, "json", /*allow_empty=*/true);
    require(out, "out");
    *out = wrap(pf::build_model_from_json_text(text));
  });
}

pf_status* pf_model_create_from_hf(const char* dir, pf_model** out) {
  return guard(__func__, [&] {
    const std::string folder = pf::capi::require_string(dir, "dir");
    require(out, "out");
    *out = wrap(pf::build_model_from_json(pf::model_json_from_hf_folder(folder)));
  });
}

void pf_mlp_config_init(pf_mlp_config* config) {
  if (config != nullptr) *config = default_mlp_config();
}

void pf_gpt_config_init(pf_gpt_config* config) {
  if (config != nullptr) *config = default_gpt_config();
}

pf_status* pf_model_create_mlp(const pf_mlp_config* config, pf_model** out) {
  return guard(__func__, [&] {
    require(config, "config");
    require(out, "out");
    const pf_mlp_config c =
        pf::capi::read_struct(*config, kMlpConfigV1Size, "config", "pf_mlp_config", default_mlp_config());
    PF_CHECK_ARG(c.hidden != nullptr || c.num_hidden == 0, "config->hidden is NULL but config->num_hidden is ",
                 c.num_hidden);
    PF_CHECK_ARG(c.num_hidden <= 4096, "config->num_hidden is ", c.num_hidden, " (at most 4096 hidden layers)");
    PF_CHECK_ARG(c.activation != nullptr, "config->activation is NULL (use \"relu\" or \"gelu\")");
    pf::MlpConfig mlp;
    mlp.input_dim = c.input_dim;
    mlp.hidden.assign(c.hidden, c.hidden + c.num_hidden);
    mlp.classes = c.classes;
    mlp.activation = c.activation;
    *out = wrap(pf::build_mlp(mlp));
  });
}

pf_status* pf_model_create_gpt(const pf_gpt_config* config, pf_model** out) {
  return guard(__func__, [&] {
    require(config, "config");
    require(out, "out");
    const pf_gpt_config c =
        pf::capi::read_struct(*config, kGptConfigV1Size, "config", "pf_gpt_config", default_gpt_config());
    pf::GptConfig gpt;
    gpt.vocab = c.vocab;
    gpt.seq_len = c.seq_len;
    gpt.d_model = c.d_model;
    gpt.heads = c.heads;
    gpt.layers = c.layers;
    gpt.mlp_hidden = c.mlp_hidden;
    *out = wrap(pf::build_gpt(gpt));
  });
}

pf_status* pf_model_to_json(pf_model* model, const char** out) {
  return guard(__func__, [&] {
    require(model, "model");
    require(out, "out");
    model->json = model->model->to_json().dump();
    *out = model->json.c_str();
  });
}

pf_status* pf_model_num_parameters(const pf_model* model, size_t* out) {
  return guard(__func__, [&] {
    require(model, "model");
    require(out, "out");
    *out = model->model->parameters().size();
  });
}

pf_status* pf_model_num_parameter_elements(const pf_model* model, int64_t* out) {
  return guard(__func__, [&] {
    require(model, "model");
    require(out, "out");
    *out = model->model->num_parameter_elements();
  });
}

pf_status* pf_model_parameter_name(const pf_model* model, size_t index, const char** out) {
  return guard(__func__, [&] {
    require(model, "model");
    require(out, "out");
    const auto& params = model->model->parameters();
    if (index >= params.size()) {
      pf::fail(pf::ErrorCode::kInvalidArgument, "index ", index, " is out of range: the model has ",
               params.size(), " parameters");
    }
    *out = params[index]->name.c_str();
  });
}

void pf_model_destroy(pf_model* model) {
  guard_void(__func__, [&] { delete model; });
}

}  // extern "C"

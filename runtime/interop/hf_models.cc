#include "runtime/interop/hf_models.h"

#include <sys/stat.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/core/error.h"
#include "runtime/core/input_file.h"
#include "runtime/core/json_text.h"
#include "runtime/core/limits.h"
#include "runtime/core/output_file.h"
#include "runtime/layers/embedding.h"
#include "runtime/layers/layer_norm.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/llama_block.h"
#include "runtime/layers/rms_norm.h"
#include "runtime/layers/transformer_block.h"

namespace pf {
namespace {

using nlohmann::json;

constexpr size_t kMaxConfigBytes = size_t{16} << 20;

// The layers of a Llama model (build_llama's shape), or kInvalidArgument naming what differs.
struct LlamaLayers {
  const Embedding* embed = nullptr;
  std::vector<const LlamaBlock*> blocks;
  const RMSNorm* norm = nullptr;
  const Linear* head = nullptr;
  bool tied = false;  // the head a copy of the token embedding
};

// The layers of a GPT-2 (build_gpt's shape with tie_embeddings), or kInvalidArgument naming what differs.
struct Gpt2Layers {
  const Embedding* embed = nullptr;
  std::vector<const TransformerBlock*> blocks;
  const LayerNorm* ln_f = nullptr;
};

Gpt2Layers gpt2_layers(const Model& model) {
  const auto& layers = model.layers();
  auto refuse = [](const Layer& l, const char* expected) {
    fail(ErrorCode::kInvalidArgument, "hf-gpt2: layer '", l.name(), "' is a ", l.type(), ", where GPT-2 has ", expected,
         " (the model must be the gpt preset's with tie_embeddings: embed, blocks, ln_f, head)");
  };
  PF_CHECK_ARG(layers.size() >= 3, "hf-gpt2: the model has ", layers.size(),
               " top-level layers, GPT-2 at least 3 (embed, ln_f, head)");
  Gpt2Layers out;
  out.embed = dynamic_cast<const Embedding*>(layers.front().get());
  if (out.embed == nullptr || !out.embed->positions()) refuse(*layers.front(), "a token and position embedding");
  for (size_t i = 1; i + 2 < layers.size(); ++i) {
    const auto* block = dynamic_cast<const TransformerBlock*>(layers[i].get());
    if (block == nullptr) refuse(*layers[i], "a transformer_block");
    PF_CHECK_ARG(block->causal(), "hf-gpt2: block '", block->name(),
                 "' has bidirectional attention (causal false), where GPT-2's is causal");
    out.blocks.push_back(block);
  }
  out.ln_f = dynamic_cast<const LayerNorm*>(layers[layers.size() - 2].get());
  if (out.ln_f == nullptr) refuse(*layers[layers.size() - 2], "a layernorm");
  const auto* head = dynamic_cast<const Linear*>(layers.back().get());
  if (head == nullptr) refuse(*layers.back(), "a linear");
  const auto head_params = const_cast<Linear*>(head)->parameters();
  PF_CHECK_ARG(head_params.size() == 1 && head_params[0]->tied_to == join_name(out.embed->name(), "token_weight"),
               "hf-gpt2: the head '", head->name(), "' is not tied to the token embedding without a bias: GPT-2's is "
               "(train with tie_embeddings, --tie-embeddings)");
  PF_CHECK_ARG(out.ln_f->eps() == 1e-5f, "hf-gpt2: '", out.ln_f->name(), "' has eps ", out.ln_f->eps(),
               ", GPT-2's LayerNorms 1e-5");
  for (const TransformerBlock* b : out.blocks)
    PF_CHECK_ARG(b->heads() == out.blocks.front()->heads() && b->mlp_hidden() == out.blocks.front()->mlp_hidden(),
                 "hf-gpt2: block '", b->name(), "' differs from '", out.blocks.front()->name(),
                 "': GPT2Config has one size for every layer");
  return out;
}

LlamaLayers llama_layers(const Model& model) {
  const auto& layers = model.layers();
  auto refuse = [](const Layer& l, const char* expected) {
    fail(ErrorCode::kInvalidArgument, "hf-llama: layer '", l.name(), "' is a ", l.type(), ", where a Llama has ",
         expected, " (the model must be the llama preset's: embed, blocks, norm, head)");
  };
  PF_CHECK_ARG(layers.size() >= 3, "hf-llama: the model has ", layers.size(),
               " top-level layers, a Llama at least 3 (embed, norm, head)");
  LlamaLayers out;
  out.embed = dynamic_cast<const Embedding*>(layers.front().get());
  if (out.embed == nullptr || out.embed->positions()) refuse(*layers.front(), "a token embedding without positions");
  for (size_t i = 1; i + 2 < layers.size(); ++i) {
    const auto* block = dynamic_cast<const LlamaBlock*>(layers[i].get());
    if (block == nullptr) refuse(*layers[i], "a llama_block");
    out.blocks.push_back(block);
  }
  out.norm = dynamic_cast<const RMSNorm*>(layers[layers.size() - 2].get());
  if (out.norm == nullptr) refuse(*layers[layers.size() - 2], "an rmsnorm");
  out.head = dynamic_cast<const Linear*>(layers.back().get());
  if (out.head == nullptr || const_cast<Linear*>(out.head)->parameters().size() != 1)
    refuse(*layers.back(), "a linear without bias");
  out.tied = !const_cast<Linear*>(out.head)->parameters()[0]->tied_to.empty();
  for (const LlamaBlock* b : out.blocks) {
    PF_CHECK_ARG(b->block_config().norm_eps == out.norm->eps(), "hf-llama: block '", b->name(), "' has norm_eps ",
                 b->block_config().norm_eps, " and '", out.norm->name(), "' eps ", out.norm->eps(),
                 ": Transformers' LlamaConfig has one rms_norm_eps");
    PF_CHECK_ARG(b->block_config().rope_theta == out.blocks.front()->block_config().rope_theta &&
                     b->block_config().heads == out.blocks.front()->block_config().heads &&
                     b->block_config().kv_heads == out.blocks.front()->block_config().kv_heads &&
                     b->block_config().mlp_hidden == out.blocks.front()->block_config().mlp_hidden,
                 "hf-llama: block '", b->name(), "' differs from '", out.blocks.front()->name(),
                 "': Transformers' LlamaConfig has one size for every layer");
  }
  return out;
}

// A non-negative integer field of config.json, or `fallback` when absent (-1: required).
int64_t config_int(const json& c, const char* key, int64_t fallback, const std::string& path) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) {
    PF_CHECK_ARG(fallback >= 0, path, ": missing required field \"", key, "\"");
    return fallback;
  }
  PF_CHECK_ARG(json_integer_in(*it, 1, limits::kMaxDimension), path, ": ", key, ": expected a positive integer, got ",
               describe_json(*it));
  return it->get<int64_t>();
}

double config_number(const json& c, const char* key, double fallback, const std::string& path) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return fallback;
  PF_CHECK_ARG(it->is_number() && std::isfinite(it->get<double>()) && it->get<double>() > 0, path, ": ", key,
               ": expected a positive number, got ", describe_json(*it));
  return it->get<double>();
}

bool config_bool(const json& c, const char* key, bool fallback, const std::string& path) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return fallback;
  PF_CHECK_ARG(it->is_boolean(), path, ": ", key, ": expected true or false, got ", describe_json(*it));
  return it->get<bool>();
}

// The safetensors files of a folder and which holds each tensor.
struct HfWeights {
  std::vector<std::shared_ptr<const SafetensorsFile>> files;
  std::map<std::string, std::pair<const SafetensorsFile*, const SafetensorsEntry*>> tensors;
};

HfWeights open_weights(const std::string& dir) {
  HfWeights w;
  const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
  std::vector<std::string> names;
  auto exists = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0;
  };
  if (exists(single)) {
    names.push_back("model.safetensors");
  } else {
    if (!exists(index))
      fail(ErrorCode::kNotFound, "Transformers folder ", dir, ": neither model.safetensors nor model.safetensors.index.json is in the folder");
    const json j = read_json_input(index, "safetensors index", kMaxConfigBytes);
    PF_CHECK_ARG(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), index,
                 ": no \"weight_map\" object");
    std::set<std::string> distinct;
    for (const auto& item : j["weight_map"].items()) {
      PF_CHECK_ARG(item.value().is_string(), index, ": weight_map '", item.key(), "' is not a file name");
      const std::string file = item.value().get<std::string>();
      PF_CHECK_ARG(find_path_escape(dir, file).kind == PathEscape::Kind::kInside, index, ": weight_map '", item.key(),
                   "' names '", file, "', which is not a file inside the folder");
      if (distinct.insert(file).second) names.push_back(file);
    }
  }
  for (const std::string& name : names) {
    w.files.push_back(SafetensorsFile::open(dir + "/" + name));
    const SafetensorsFile* f = w.files.back().get();
    for (const SafetensorsEntry& e : f->header().entries) {
      if (!w.tensors.emplace(e.name, std::make_pair(f, &e)).second)
        fail(ErrorCode::kDataLoss, "Transformers folder ", dir, ": tensor '", e.name, "' is in two files (",
             w.tensors[e.name].first->path(), ", ", f->path(), ")");
    }
  }
  return w;
}

// The shortest decimal that reads back as `f` (1e-5f gives 1e-05, not 9.99999974737875e-06), as
// a double: what a config.json written by Python holds.
double decimal_of(float f) {
  char text[64];
  const auto end = std::to_chars(text, text + sizeof(text), f).ptr;
  return std::strtod(std::string(text, end).c_str(), nullptr);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

HfFamily parse_hf_family(const std::string& name, const std::string& what) {
  if (name == "hf-llama") return HfFamily::kLlama;
  if (name == "hf-gpt2") return HfFamily::kGpt2;
  fail(ErrorCode::kInvalidArgument, what, ": unknown names '", name, "' (known: hf-llama, hf-gpt2)");
}

HfFamily hf_family_of(const Model& model) {
  const auto* embed = dynamic_cast<const Embedding*>(model.layers().front().get());
  if (embed != nullptr && embed->positions()) {
    gpt2_layers(model);  // refuses what differs
    return HfFamily::kGpt2;
  }
  llama_layers(model);
  return HfFamily::kLlama;
}

namespace {

std::vector<HfTensor> gpt2_tensor_map(const Model& model) {
  const Gpt2Layers g = gpt2_layers(model);
  std::vector<HfTensor> out;
  auto add = [&](const std::string& hf, const std::string& param, bool transpose) {
    const Parameter* p = model.find_parameter(param);
    PF_INTERNAL_CHECK(p != nullptr, "hf-gpt2: no parameter ", param);
    out.push_back({hf, param, 0, p->shape[0], transpose});
  };
  add("transformer.wte.weight", join_name(g.embed->name(), "token_weight"), false);
  add("transformer.wpe.weight", join_name(g.embed->name(), "position_weight"), false);
  for (size_t i = 0; i < g.blocks.size(); ++i) {
    const std::string hf = "transformer.h." + std::to_string(i) + ".", n = g.blocks[i]->name() + ".";
    for (const char* part : {"weight", "bias"}) add(hf + "ln_1." + part, n + "ln1." + part, false);
    add(hf + "attn.c_attn.weight", n + "attn.qkv.weight", true);
    add(hf + "attn.c_attn.bias", n + "attn.qkv.bias", false);
    add(hf + "attn.c_proj.weight", n + "attn.proj.weight", true);
    add(hf + "attn.c_proj.bias", n + "attn.proj.bias", false);
    for (const char* part : {"weight", "bias"}) add(hf + "ln_2." + part, n + "ln2." + part, false);
    add(hf + "mlp.c_fc.weight", n + "mlp.fc.weight", true);
    add(hf + "mlp.c_fc.bias", n + "mlp.fc.bias", false);
    add(hf + "mlp.c_proj.weight", n + "mlp.proj.weight", true);
    add(hf + "mlp.c_proj.bias", n + "mlp.proj.bias", false);
  }
  for (const char* part : {"weight", "bias"}) add(std::string("transformer.ln_f.") + part, join_name(g.ln_f->name(), part), false);
  return out;
}

}  // namespace

std::vector<HfTensor> hf_tensor_map(const Model& model, HfFamily family) {
  if (family == HfFamily::kGpt2) return gpt2_tensor_map(model);
  const LlamaLayers l = llama_layers(model);
  const int64_t dim = l.embed->dim();
  std::vector<HfTensor> out;
  auto whole = [&](const std::string& hf, const std::string& param) {
    const Parameter* p = model.find_parameter(param);
    PF_INTERNAL_CHECK(p != nullptr, "hf-llama: no parameter ", param);
    out.push_back({hf, param, 0, p->value.dim(0)});
  };
  whole("model.embed_tokens.weight", join_name(l.embed->name(), "token_weight"));
  for (size_t i = 0; i < l.blocks.size(); ++i) {
    const LlamaBlockConfig& c = l.blocks[i]->block_config();
    const std::string hf = "model.layers." + std::to_string(i) + ".", n = l.blocks[i]->name() + ".";
    const int64_t kv = c.kv_heads * (dim / c.heads);
    whole(hf + "input_layernorm.weight", n + "attn_norm.weight");
    out.push_back({hf + "self_attn.q_proj.weight", n + "attn.qkv.weight", 0, dim});
    out.push_back({hf + "self_attn.k_proj.weight", n + "attn.qkv.weight", dim, kv});
    out.push_back({hf + "self_attn.v_proj.weight", n + "attn.qkv.weight", dim + kv, kv});
    whole(hf + "self_attn.o_proj.weight", n + "attn.proj.weight");
    whole(hf + "post_attention_layernorm.weight", n + "mlp_norm.weight");
    out.push_back({hf + "mlp.gate_proj.weight", n + "mlp.gate_up.weight", 0, c.mlp_hidden});
    out.push_back({hf + "mlp.up_proj.weight", n + "mlp.gate_up.weight", c.mlp_hidden, c.mlp_hidden});
    whole(hf + "mlp.down_proj.weight", n + "mlp.down.weight");
  }
  whole("model.norm.weight", join_name(l.norm->name(), "weight"));
  if (!l.tied) whole("lm_head.weight", join_name(l.head->name(), "weight"));  // tied: not in the file
  return out;
}

nlohmann::ordered_json hf_config_of(const Model& model, HfFamily family) {
  if (family == HfFamily::kGpt2) {
    const Gpt2Layers g = gpt2_layers(model);
    nlohmann::ordered_json j;
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["vocab_size"] = g.embed->vocab();
    j["n_positions"] = g.embed->seq_len();
    j["n_embd"] = g.embed->dim();
    j["n_layer"] = g.blocks.size();
    j["n_head"] = g.blocks.empty() ? 1 : g.blocks.front()->heads();
    j["n_inner"] = g.blocks.empty() ? 4 * g.embed->dim() : g.blocks.front()->mlp_hidden();
    j["activation_function"] = "gelu_new";
    j["layer_norm_epsilon"] = 1e-5;
    j["tie_word_embeddings"] = true;
    j["scale_attn_weights"] = true;
    j["scale_attn_by_inverse_layer_idx"] = false;
    j["reorder_and_upcast_attn"] = false;
    j["initializer_range"] = 0.02;
    j["torch_dtype"] = "float32";
    j["dtype"] = "float32";
    return j;
  }
  const LlamaLayers l = llama_layers(model);
  LlamaBlockConfig c;
  c.heads = 1;
  c.kv_heads = 1;
  c.mlp_hidden = 1;
  c.norm_eps = l.norm->eps();
  if (!l.blocks.empty()) c = l.blocks.front()->block_config();
  nlohmann::ordered_json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["vocab_size"] = l.embed->vocab();
  j["hidden_size"] = l.embed->dim();
  j["intermediate_size"] = c.mlp_hidden;
  j["num_hidden_layers"] = l.blocks.size();
  j["num_attention_heads"] = c.heads;
  j["num_key_value_heads"] = c.kv_heads;
  j["head_dim"] = l.embed->dim() / c.heads;
  j["max_position_embeddings"] = l.embed->seq_len();
  j["rms_norm_eps"] = decimal_of(l.norm->eps());
  // Transformers 5 reads rope_parameters, 4 reads rope_theta: both are written.
  j["rope_theta"] = decimal_of(c.rope_theta);
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", decimal_of(c.rope_theta)}};
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["tie_word_embeddings"] = l.tied;
  j["initializer_range"] = 0.02;
  j["torch_dtype"] = "float32";
  j["dtype"] = "float32";
  return j;
}

nlohmann::json model_json_from_hf_config(const nlohmann::json& c, const std::string& path) {
  PF_CHECK_ARG(c.is_object(), path, ": expected a JSON object");
  const std::string type = c.value("model_type", std::string());
  if (type == "gpt2") {
    const int64_t embd = config_int(c, "n_embd", 768, path), heads = config_int(c, "n_head", 12, path);
    PF_CHECK_ARG(embd % heads == 0, path, ": n_embd ", embd, " is not divisible by n_head ", heads);
    PF_CHECK_ARG(c.value("activation_function", std::string("gelu_new")) == "gelu_new", path, ": activation_function '",
                 c.value("activation_function", std::string()), "' (PipeForge's GPT computes gelu_new, the tanh form)");
    PF_CHECK_ARG(config_number(c, "layer_norm_epsilon", 1e-5, path) == 1e-5, path,
                 ": layer_norm_epsilon other than 1e-5 (PipeForge's GPT LayerNorms use 1e-5)");
    PF_CHECK_ARG(config_bool(c, "tie_word_embeddings", true, path), path,
                 ": tie_word_embeddings false: an untied GPT-2 head has no bias, PipeForge's untied GPT head has one");
    PF_CHECK_ARG(config_bool(c, "scale_attn_weights", true, path) &&
                     !config_bool(c, "scale_attn_by_inverse_layer_idx", false, path) &&
                     !config_bool(c, "add_cross_attention", false, path),
                 path, ": scale_attn_weights false, scale_attn_by_inverse_layer_idx or add_cross_attention: attention "
                 "PipeForge does not compute");
    return {{"preset", "gpt"},
            {"vocab", config_int(c, "vocab_size", 50257, path)},
            {"seq_len", config_int(c, "n_positions", 1024, path)},
            {"d_model", embd},
            {"heads", heads},
            {"layers", config_int(c, "n_layer", 12, path)},
            {"mlp_hidden", config_int(c, "n_inner", 4 * embd, path)},
            {"tie_embeddings", true}};
  }
  PF_CHECK_ARG(type == "llama", path, ": model_type '", type, "' (PipeForge reads llama and gpt2)");
  const int64_t hidden = config_int(c, "hidden_size", -1, path);
  const int64_t heads = config_int(c, "num_attention_heads", -1, path);
  const int64_t kv_heads = config_int(c, "num_key_value_heads", heads, path);
  PF_CHECK_ARG(hidden % heads == 0, path, ": hidden_size ", hidden, " is not divisible by num_attention_heads ", heads);
  PF_CHECK_ARG(config_int(c, "head_dim", hidden / heads, path) == hidden / heads, path, ": head_dim ",
               c.value("head_dim", json()).dump(), " differs from hidden_size / num_attention_heads = ", hidden / heads,
               " (PipeForge's attention has heads x head_dim = hidden_size)");
  PF_CHECK_ARG(c.value("hidden_act", std::string("silu")) == "silu", path, ": hidden_act '",
               c.value("hidden_act", std::string()), "' (PipeForge's SwiGLU uses silu)");
  PF_CHECK_ARG(!config_bool(c, "attention_bias", false, path), path, ": attention_bias true (PipeForge's Llama has no biases)");
  PF_CHECK_ARG(!config_bool(c, "mlp_bias", false, path), path, ": mlp_bias true (PipeForge's Llama has no biases)");
  double theta = config_number(c, "rope_theta", 10000.0, path);
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = c.find(key);
    if (it == c.end() || it->is_null()) continue;
    PF_CHECK_ARG(it->is_object(), path, ": ", key, ": expected an object, got ", describe_json(*it));
    const std::string rope_type = it->value("rope_type", it->value("type", std::string("default")));
    PF_CHECK_ARG(rope_type == "default", path, ": ", key, ".rope_type '", rope_type,
                 "' (PipeForge computes the default rotary embedding only)");
    theta = config_number(*it, "rope_theta", theta, path + ": " + key);
  }
  const double eps = config_number(c, "rms_norm_eps", 1e-6, path);
  PF_CHECK_ARG(theta <= 1e30 && eps <= 1.0, path, ": rope_theta ", theta, " or rms_norm_eps ", eps, " out of range");
  return {{"preset", "llama"},
          {"vocab", config_int(c, "vocab_size", -1, path)},
          {"seq_len", config_int(c, "max_position_embeddings", 2048, path)},
          {"d_model", hidden},
          {"heads", heads},
          {"kv_heads", kv_heads},
          {"layers", config_int(c, "num_hidden_layers", -1, path)},
          {"mlp_hidden", config_int(c, "intermediate_size", -1, path)},
          {"rope_theta", theta},
          {"norm_eps", eps},
          {"tie_embeddings", config_bool(c, "tie_word_embeddings", false, path)}};
}

nlohmann::json model_json_from_hf_folder(const std::string& dir) {
  const std::string path = dir + "/config.json";
  return model_json_from_hf_config(read_json_input(path, "Transformers config", kMaxConfigBytes), path);
}

namespace {

// The Transformers shape of `t` (its rows of the parameter, transposed when it is).
Shape hf_shape(const HfTensor& t, const Parameter& p) {
  Shape shape = p.shape;
  shape[0] = t.rows;
  if (t.transpose) std::swap(shape[0], shape[1]);
  return shape;
}

// A 2-D [rows, cols] tensor's transpose, [cols, rows].
Tensor transposed(const Tensor& x) {
  const int64_t rows = x.dim(0), cols = x.dim(1);
  Tensor out = Tensor::empty({cols, rows});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out.f32()[c * rows + r] = x.f32()[r * cols + c];
  return out;
}

// What older Transformers saved besides the weights: buffers, and a tied model's lm_head (a copy).
bool ignored_tensor(const std::string& name, const Model& model) {
  if (ends_with(name, "rotary_emb.inv_freq") || ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias"))
    return true;  // ".attn.bias" is GPT-2's causal mask; its c_attn.bias ends "_attn.bias"
  return name == "lm_head.weight" && !model.tied_pairs().empty();
}

}  // namespace

void export_hf_folder(const Model& model, HfFamily family, const std::string& dir) {
  const std::vector<HfTensor> map = hf_tensor_map(model, family);
  std::vector<Tensor> host;
  host.reserve(map.size());
  std::vector<std::pair<std::string, const Tensor*>> named;
  for (const HfTensor& t : map) {
    const Parameter* p = model.find_parameter(t.param);
    PF_CHECK_STATE(p->allocated(), "export: parameter ", t.param, " is not in this process (export from one process)");
    Shape shape = p->shape;
    shape[0] = t.rows;
    Tensor rows = Tensor::empty(shape);
    rows.copy_from(p->value.slice_rows(t.row_begin, t.row_begin + t.rows));
    host.push_back(t.transpose ? transposed(rows) : rows);
    named.emplace_back(t.hf_name, &host.back());
  }
  const std::string weights = dir + "/model.safetensors", config = dir + "/config.json";
  check_output_path(weights, "export");
  check_output_path(config, "export");
  write_output_file(weights, encode_safetensors(named, {{"format", "pt"}}), "export");
  write_output_file(config, hf_config_of(model, family).dump(2) + "\n", "export");
}

void load_hf_weights(const Model& model, const std::vector<Parameter*>& params, const std::string& dir) {
  const HfFamily family = hf_family_of(model);
  const std::vector<HfTensor> map = hf_tensor_map(model, family);
  const HfWeights weights = open_weights(dir);
  std::set<std::string> expected;
  for (const HfTensor& t : map) expected.insert(t.hf_name);
  for (const auto& [name, where] : weights.tensors)
    PF_CHECK_ARG(expected.count(name) || ignored_tensor(name, model), "Transformers folder ", dir, ": tensor '", name,
                 "' of ", where.first->path(), " has no place in the model (", family == HfFamily::kGpt2 ? "a GPT-2" : "a Llama",
                 " of ", model.layers().size() - 3, " layers)");
  std::set<std::string> local;
  for (const Parameter* p : params) local.insert(p->name);
  // Checked first, read and copied after: a refusal leaves every parameter as it was. A tied copy
  // this process holds takes its primary's tensor.
  std::vector<std::pair<const HfTensor*, Parameter*>> todo;
  for (const HfTensor& t : map) {
    auto it = weights.tensors.find(t.hf_name);
    PF_CHECK_ARG(it != weights.tensors.end(), "Transformers folder ", dir, ": tensor '", t.hf_name, "' (PipeForge's ", t.param,
                 ") is missing");
    Parameter* p = model.find_parameter(t.param);
    const Shape shape = hf_shape(t, *p);
    PF_CHECK_ARG(it->second.second->shape == shape, "Transformers folder ", dir, ": tensor '", t.hf_name, "' of ",
                 it->second.first->path(), " is ", shape_to_string(it->second.second->shape), ", the model's ",
                 shape_to_string(shape));
    if (local.count(t.param)) todo.emplace_back(&t, p);
    for (const auto& [primary, copy] : model.tied_pairs())
      if (primary == p && local.count(copy->name)) todo.emplace_back(&t, copy);
  }
  for (const auto& [t, p] : todo) {
    const auto& [file, entry] = weights.tensors.at(t->hf_name);
    const Tensor read = file->read_f32(*entry);
    p->value.slice_rows(t->row_begin, t->row_begin + t->rows).copy_from(t->transpose ? transposed(read) : read);
  }
}

}  // namespace pf

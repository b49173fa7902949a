#include "runtime/layers/layer_factory.h"

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/control_characters.h"
#include "runtime/core/error.h"
#include "runtime/core/json_text.h"
#include "runtime/core/limits.h"
#include "runtime/layers/activations.h"
#include "runtime/layers/attention.h"
#include "runtime/layers/conv2d.h"
#include "runtime/layers/class_token.h"
#include "runtime/layers/cross_entropy.h"
#include "runtime/layers/embedding.h"
#include "runtime/layers/group_norm.h"
#include "runtime/layers/layer_norm.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/llama_block.h"
#include "runtime/layers/pooling.h"
#include "runtime/layers/patch_embedding.h"
#include "runtime/layers/residual.h"
#include "runtime/layers/rms_norm.h"
#include "runtime/layers/sequential.h"
#include "runtime/layers/transformer_block.h"

namespace pf {

namespace {

using nlohmann::json;

constexpr int64_t kMaxSize = limits::kMaxDimension;

// Nesting depth of the layer_from_json calls running on this thread.
thread_local int nesting_depth = 0;

struct NestingGuard {
  NestingGuard(const std::string& path) {
    PF_CHECK_ARG(nesting_depth < limits::kMaxLayerNesting, path.empty() ? "(root)" : path,
                 ": layers nested deeper than the limit of ", limits::kMaxLayerNesting);
    ++nesting_depth;
  }
  ~NestingGuard() { --nesting_depth; }
};

// Counts the descriptions in `layers` and below; fails past the nesting or count limit.
void count_layers(const json& layers, const std::string& path, int depth, int64_t* count) {
  PF_CHECK_ARG(depth <= limits::kMaxLayerNesting, path, ": layers nested deeper than the limit of ",
               limits::kMaxLayerNesting);
  if (!layers.is_array()) return;  // reported with its path when the layer is built
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string item_path = path + "[" + std::to_string(i) + "]";
    PF_CHECK_ARG(++*count <= limits::kMaxLayers, item_path, ": more than the limit of ", limits::kMaxLayers,
                 " layers in one model");
    const json& item = layers[i];
    if (item.is_object()) {
      for (const char* key : {"layers", "shortcut"}) {
        auto it = item.find(key);
        if (it != item.end()) count_layers(*it, item_path + "." + key, depth + 1, count);
      }
    }
  }
}

std::string field_path(const std::string& path, const std::string& field) {
  return path.empty() ? field : path + "." + field;
}

std::string shown_path(const std::string& path) { return path.empty() ? "(root)" : path; }


std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

// Typed access to the fields of one layer description. Every accessor names the field's JSON path
// in its errors.
class Fields {
 public:
  Fields(const json& object, const std::string& path) : object_(object), path_(path) {}

  std::string at(const char* key) const { return field_path(path_, key); }

  const json* find(const char* key) const {
    auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }

  const json& required(const char* key, const std::string& type) const {
    const json* value = find(key);
    PF_CHECK_ARG(value != nullptr, at(key), ": missing required field \"", key, "\" (layer type \"", type,
                 "\")");
    return *value;
  }

  int64_t size(const json& value, const char* key) const {
    PF_CHECK_ARG(value.is_number_integer(), at(key), ": expected a positive integer, got ",
                 describe_json(value));
    PF_CHECK_ARG(json_integer_in(value, 1, kMaxSize), at(key), ": expected a positive integer (at most ", kMaxSize, "), got ",
                 describe_json(value));
    return value.get<int64_t>();
  }
  int64_t required_size(const char* key, const std::string& type) const {
    return size(required(key, type), key);
  }
  int64_t optional_size(const char* key, int64_t fallback) const {
    const json* value = find(key);
    return value ? size(*value, key) : fallback;
  }
  // An integer >= 0 (e.g. a padding).
  int64_t optional_count(const char* key, int64_t fallback) const {
    const json* value = find(key);
    if (!value) return fallback;
    PF_CHECK_ARG(value->is_number_integer() && json_integer_in(*value, 0, kMaxSize), at(key),
                 ": expected an integer from 0 to ", kMaxSize, ", got ", describe_json(*value));
    return value->get<int64_t>();
  }

  // A float that must be finite and >= 0 (or > 0 when `positive`).
  float optional_float(const char* key, float fallback, bool positive) const {
    const json* value = find(key);
    if (!value) return fallback;
    PF_CHECK_ARG(value->is_number(), at(key), ": expected a number, got ", describe_json(*value));
    const double v = value->get<double>();
    // Checked in double first: converting an out-of-range double to float is undefined.
    const bool ok = std::isfinite(v) && std::fabs(v) <= std::numeric_limits<float>::max() &&
                    (positive ? static_cast<float>(v) > 0.0f : v >= 0.0);
    PF_CHECK_ARG(ok, at(key), ": expected a finite ", positive ? "positive" : "non-negative",
                 " number, got ", describe_json(*value));
    return static_cast<float>(v);
  }

  // A string of at most limits::kMaxNameBytes bytes without control characters.
  std::string optional_string(const char* key, const std::string& fallback) const {
    const json* value = find(key);
    if (!value) return fallback;
    PF_CHECK_ARG(value->is_string(), at(key), ": expected a string, got ", describe_json(*value));
    const std::string s = value->get<std::string>();
    PF_CHECK_ARG(s.size() <= limits::kMaxNameBytes && !has_control_character(s), at(key),
                 ": expected a parameter name (at most ", limits::kMaxNameBytes, " bytes, no control character)");
    return s;
  }

  // A layer's "parallel": "column", "row" or "vocab" (TensorSplit); kNone when absent.
  TensorSplit optional_split(const char* key) const {
    const json* value = find(key);
    if (!value) return TensorSplit::kNone;
    PF_CHECK_ARG(value->is_string(), at(key), ": expected \"column\", \"row\" or \"vocab\", got ",
                 describe_json(*value));
    return parse_tensor_split(value->get<std::string>(), at(key));
  }

  bool optional_bool(const char* key, bool fallback) const {
    const json* value = find(key);
    if (!value) return fallback;
    PF_CHECK_ARG(value->is_boolean(), at(key), ": expected true or false, got ", describe_json(*value));
    return value->get<bool>();
  }

  const json& required_array(const char* key, const std::string& type) const {
    const json& value = required(key, type);
    PF_CHECK_ARG(value.is_array(), at(key), ": expected an array of layer descriptions, got ",
                 describe_json(value));
    return value;
  }

 private:
  const json& object_;
  std::string path_;
};

using Builder = std::function<std::unique_ptr<Layer>(const Fields&, const std::string& name)>;

struct LayerKind {
  const char* type;
  std::vector<std::string> fields;  // besides "type" and "name"
  Builder build;
};

// The layers of the array `key` ("layers", or a residual's "shortcut"), named "<name>.<i>".
std::vector<std::unique_ptr<Layer>> build_children(const Fields& f, const std::string& type,
                                                   const std::string& name, const char* key = "layers") {
  const json& items = f.required_array(key, type);
  std::vector<std::unique_ptr<Layer>> layers;
  for (size_t i = 0; i < items.size(); ++i) {
    layers.push_back(layer_from_json(items[i], join_name(name, std::to_string(i)),
                                     f.at(key) + "[" + std::to_string(i) + "]"));
  }
  return layers;
}

void check_divisible(const Fields& f, int64_t dim, int64_t heads) {
  PF_CHECK_ARG(dim % heads == 0, f.at("heads"), ": dim ", dim, " is not divisible by heads ", heads);
}

// kv_heads (default: heads), which must divide heads.
int64_t kv_heads_of(const Fields& f, int64_t heads) {
  const int64_t kv_heads = f.optional_size("kv_heads", heads);
  PF_CHECK_ARG(heads % kv_heads == 0, f.at("kv_heads"), ": heads ", heads, " is not divisible by kv_heads ",
               kv_heads);
  return kv_heads;
}

const std::vector<LayerKind>& layer_kinds() {
  static const std::vector<LayerKind> kinds = {
      {"linear", {"in", "out", "bias", "init_std", "tied_to", "parallel"},
       [](const Fields& f, const std::string& name) -> std::unique_ptr<Layer> {
         return std::make_unique<Linear>(name, f.required_size("in", "linear"),
                                         f.required_size("out", "linear"), f.optional_bool("bias", true),
                                         f.optional_float("init_std", 0.02f, false), f.optional_string("tied_to", ""),
                                         f.optional_split("parallel"));
       }},
      {"relu", {},
       [](const Fields&, const std::string& name) -> std::unique_ptr<Layer> {
         return std::make_unique<ReLU>(name);
       }},
      {"gelu", {},
       [](const Fields&, const std::string& name) -> std::unique_ptr<Layer> {
         return std::make_unique<GELU>(name);
       }},
      {"layernorm", {"dim", "eps"},
       [](const Fields& f, const std::string& name) -> std::unique_ptr<Layer> {
         return std::make_unique<LayerNorm>(name, f.required_size("dim", "layernorm"),
                                            f.optional_float("eps", 1e-5f, true));
       }},
      {"rmsnorm", {"dim", "eps"},
       [](const Fields& f, const std::string& name) -> std::unique_ptr<Layer> {
         return std::make_unique<RMSNorm>(name, f.required_size("dim", "rmsnorm"), f.optional_float("eps", 1e-5f, true));
       }},
      {"swiglu", {},
       [](const Fields&, const std::string& name) -> std::unique_ptr<Layer> {
         return std::make_unique<SwiGLU>(name);
       }},
      {"embedding", {"vocab", "seq_len", "dim", "init_std", "positions", "parallel"},
       [](const Fields& f, const std::string& name) -> std::unique_ptr<Layer> {
         const TensorSplit split = f.optional_split("parallel");
         PF_CHECK_ARG(split == TensorSplit::kNone || split == TensorSplit::kVocab, f.at("parallel"),
                      ": an embedding splits by \"vocab\" only, got \"", tensor_split_name(split), "\"");
         return std::make_unique<Embedding>(name, f.required_size("vocab", "embedding"),
                                            f.required_size("seq_len", "embedding"),
                                            f.required_size("dim", "embedding"),
                                            f.optional_float("init_std", 0.02f, false),
                                            f.optional_bool("positions", true), split);
       }},
      {"attention", {"dim", "heads", "init_std", "kv_heads", "bias", "rope_theta", "causal"},
       [](const Fields& f, const std::string& name) -> std::unique_ptr<Layer> {
         const int64_t dim = f.required_size("dim", "attention");
         const int64_t heads = f.required_size("heads", "attention");
         check_divisible(f, dim, heads);
         AttentionOptions options;
         options.kv_heads = kv_heads_of(f, heads);
         options.bias = f.optional_bool("bias", true);
         options.rope_theta = f.optional_float("rope_theta", 0.0f, false);
         options.causal = f.optional_bool("causal", true);
         PF_CHECK_ARG(options.rope_theta == 0.0f || (dim / heads) % 2 == 0, f.at("rope_theta"),
                      ": rotary positions need an even head dimension, got dim ", dim, " / heads ", heads);
         return std::make_unique<CausalSelfAttention>(name, dim, heads, f.optional_float("init_std", 0.02f, false),
                                                      options);
       }},
      {"llama_block", {"dim", "heads", "kv_heads", "mlp_hidden", "rope_theta", "norm_eps"},
       [](const Fields& f, const std::string& name) -> std::unique_ptr<Layer> {
         LlamaBlockConfig c;
         c.dim = f.required_size("dim", "llama_block");
         c.heads = f.required_size("heads", "llama_block");
         check_divisible(f, c.dim, c.heads);
         c.kv_heads = kv_heads_of(f, c.heads);
         c.mlp_hidden = f.optional_size("mlp_hidden", llama_default_mlp_hidden(c.dim));
         c.rope_theta = f.optional_float("rope_theta", c.rope_theta, true);
         c.norm_eps = f.optional_float("norm_eps", c.norm_eps, true);
         PF_CHECK_ARG((c.dim / c.heads) % 2 == 0, f.at("heads"),
                      ": rotary positions need an even head dimension, got dim ", c.dim, " / heads ", c.heads);
         return std::make_unique<LlamaBlock>(name, c);
       }},
      {"transformer_block", {"dim", "heads", "mlp_hidden", "causal"},
       [](const Fields& f, const std::string& name) -> std::unique_ptr<Layer> {
         const int64_t dim = f.required_size("dim", "transformer_block");
         const int64_t heads = f.required_size("heads", "transformer_block");
         check_divisible(f, dim, heads);
         return std::make_unique<TransformerBlock>(name, dim, heads, f.optional_size("mlp_hidden", 4 * dim),
                                                   f.optional_bool("causal", true));
       }},
      {"patch_embedding", {"channels", "height", "width", "patch", "dim", "init_std"},
       [](const Fields& f, const std::string& name) -> std::unique_ptr<Layer> {
         PatchEmbeddingConfig c;
         c.channels = f.optional_size("channels", c.channels);
         c.height = f.required_size("height", "patch_embedding");
         c.width = f.required_size("width", "patch_embedding");
         c.patch = f.required_size("patch", "patch_embedding");
         c.dim = f.required_size("dim", "patch_embedding");
         c.init_std = f.optional_float("init_std", c.init_std, false);
         PF_CHECK_ARG(c.height % c.patch == 0 && c.width % c.patch == 0, f.at("patch"), ": height ", c.height,
                      " and width ", c.width, " must be divisible by patch ", c.patch);
         return std::make_unique<PatchEmbedding>(name, c);
       }},
      {"class_token", {},
       [](const Fields&, const std::string& name) -> std::unique_ptr<Layer> {
         return std::make_unique<ClassToken>(name);
       }},
      {"residual", {"layers", "shortcut"},
       [](const Fields& f, const std::string& name) -> std::unique_ptr<Layer> {
         auto body =
             std::make_unique<Sequential>(join_name(name, "body"), build_children(f, "residual", name));
         std::unique_ptr<Layer> shortcut;
         if (f.find("shortcut") != nullptr) {
           const std::string shortcut_name = join_name(name, "shortcut");
           shortcut = std::make_unique<Sequential>(shortcut_name,
                                                   build_children(f, "residual", shortcut_name, "shortcut"));
         }
         return std::make_unique<Residual>(name, std::move(body), std::move(shortcut));
       }},
      {"conv2d", {"in_channels", "out_channels", "kernel", "stride", "padding", "bias", "init_std", "height", "width"},
       [](const Fields& f, const std::string& name) -> std::unique_ptr<Layer> {
         Conv2dOptions o;
         o.kernel = f.optional_size("kernel", o.kernel);
         o.stride = f.optional_size("stride", o.stride);
         o.padding = f.optional_count("padding", o.padding);
         o.bias = f.optional_bool("bias", o.bias);
         o.init_std = f.optional_float("init_std", 0.0f, false);
         o.height = f.optional_count("height", 0);
         o.width = f.optional_count("width", 0);
         return std::make_unique<Conv2d>(name, f.required_size("in_channels", "conv2d"),
                                         f.required_size("out_channels", "conv2d"), o);
       }},
      {"groupnorm", {"channels", "groups", "eps"},
       [](const Fields& f, const std::string& name) -> std::unique_ptr<Layer> {
         return std::make_unique<GroupNorm>(name, f.required_size("channels", "groupnorm"),
                                            f.required_size("groups", "groupnorm"),
                                            f.optional_float("eps", 1e-5f, true));
       }},
      {"max_pool2d", {"kernel", "stride"},
       [](const Fields& f, const std::string& name) -> std::unique_ptr<Layer> {
         return std::make_unique<Pool2d>(name, Pool2d::Mode::kMax, f.required_size("kernel", "max_pool2d"),
                                         f.optional_size("stride", f.required_size("kernel", "max_pool2d")));
       }},
      {"avg_pool2d", {"kernel", "stride"},
       [](const Fields& f, const std::string& name) -> std::unique_ptr<Layer> {
         return std::make_unique<Pool2d>(name, Pool2d::Mode::kAverage, f.required_size("kernel", "avg_pool2d"),
                                         f.optional_size("stride", f.required_size("kernel", "avg_pool2d")));
       }},
      {"global_avg_pool", {},
       [](const Fields&, const std::string& name) -> std::unique_ptr<Layer> {
         return std::make_unique<GlobalAvgPool>(name);
       }},
      {"sequential", {"layers"},
       [](const Fields& f, const std::string& name) -> std::unique_ptr<Layer> {
         return std::make_unique<Sequential>(name, build_children(f, "sequential", name));
       }},
  };
  return kinds;
}

}  // namespace

void check_layer_descriptions(const json& layers, const std::string& path) {
  int64_t count = 0;
  count_layers(layers, path, 1, &count);
}

std::unique_ptr<Layer> layer_from_json(const json& description, const std::string& default_name,
                                       const std::string& path) {
  NestingGuard nesting(path);
  PF_CHECK_ARG(description.is_object(), shown_path(path),
               ": expected a layer description (an object with a \"type\"), got ", describe_json(description));
  Fields f(description, path);
  const json* type_value = f.find("type");
  PF_CHECK_ARG(type_value != nullptr, f.at("type"), ": missing required field \"type\"");
  PF_CHECK_ARG(type_value->is_string(), f.at("type"), ": expected a string, got ", describe_json(*type_value));
  const std::string type = type_value->get<std::string>();

  const LayerKind* kind = nullptr;
  std::vector<std::string> known_types;
  for (const LayerKind& k : layer_kinds()) {
    known_types.push_back(k.type);
    if (type == k.type) kind = &k;
  }
  PF_CHECK_ARG(kind != nullptr, f.at("type"), ": unknown layer type \"", type, "\" (known types: ",
               join(known_types), ")");

  std::vector<std::string> known_fields = {"type", "name"};
  known_fields.insert(known_fields.end(), kind->fields.begin(), kind->fields.end());
  for (const auto& item : description.items()) {
    bool known = false;
    for (const std::string& k : known_fields) known = known || item.key() == k;
    PF_CHECK_ARG(known, field_path(path, item.key()), ": unknown field \"", item.key(),
                 "\" for layer type \"", type, "\" (known fields: ", join(known_fields), ")");
  }

  std::string name = default_name;
  if (const json* n = f.find("name")) {
    PF_CHECK_ARG(n->is_string(), f.at("name"), ": expected a string, got ", describe_json(*n));
    name = n->get<std::string>();
    PF_CHECK_ARG(name.size() <= limits::kMaxNameBytes, f.at("name"), ": ", name.size(), " bytes, more than the limit of ",
                 limits::kMaxNameBytes);
    PF_CHECK_ARG(!has_control_character(name), f.at("name"), ": contains a control character");
  }
  // Constructor errors (which name the layer, not the JSON) get the description's path in front;
  // errors that already start with a path inside this description pass through unchanged.
  try {
    return kind->build(f, name);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument || std::string(e.what()).rfind(path, 0) == 0) throw;
    fail(ErrorCode::kInvalidArgument, shown_path(path), ": ", e.what());
  }
}

std::unique_ptr<Loss> loss_from_json(const json& description, const std::string& path) {
  std::string type;
  std::string type_path = path;
  if (description.is_string()) {
    type = description.get<std::string>();
  } else {
    PF_CHECK_ARG(description.is_object(), shown_path(path),
                 ": expected a loss type (\"cross_entropy\") or {\"type\": ...}, got ",
                 describe_json(description));
    type_path = field_path(path, "type");
    for (const auto& item : description.items()) {
      PF_CHECK_ARG(item.key() == "type", field_path(path, item.key()), ": unknown field \"", item.key(),
                   "\" of a loss (known fields: type)");
    }
    auto it = description.find("type");
    PF_CHECK_ARG(it != description.end(), type_path, ": missing required field \"type\"");
    PF_CHECK_ARG(it->is_string(), type_path, ": expected a string, got ", describe_json(*it));
    type = it->get<std::string>();
  }
  PF_CHECK_ARG(type == "cross_entropy", shown_path(type_path), ": unknown loss type \"", type,
               "\" (known types: cross_entropy)");
  return std::make_unique<CrossEntropyLoss>();
}

}  // namespace pf

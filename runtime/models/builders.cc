#include "runtime/models/builders.h"

#include "runtime/models/local_head_kind.h"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/core/json_object.h"
#include "runtime/core/json_text.h"
#include "runtime/core/limits.h"
#include "runtime/layers/activations.h"
#include "runtime/layers/class_token.h"
#include "runtime/layers/conv2d.h"
#include "runtime/layers/cross_entropy.h"
#include "runtime/layers/embedding.h"
#include "runtime/layers/group_norm.h"
#include "runtime/layers/layer_factory.h"
#include "runtime/layers/layer_norm.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/llama_block.h"
#include "runtime/layers/patch_embedding.h"
#include "runtime/layers/pooling.h"
#include "runtime/layers/residual.h"
#include "runtime/layers/sequential.h"
#include "runtime/layers/rms_norm.h"
#include "runtime/layers/parameter.h"
#include "runtime/layers/transformer_block.h"

namespace pf {
namespace {

// A GPT's top-level layers are its blocks plus three (embed, ln_f, head); each block has 12 layers.
constexpr int64_t kMaxGptBlocks = limits::kMaxLayers / 13;

void check_dimension(int64_t value, const char* what) {
  PF_CHECK_ARG(value > 0 && value <= limits::kMaxDimension, what, " must be in [1, ", limits::kMaxDimension,
               "], got ", value);
}

void check_mlp(const MlpConfig& c) {
  check_dimension(c.input_dim, "mlp: input_dim");
  check_dimension(c.classes, "mlp: classes");
  PF_CHECK_ARG(static_cast<int64_t>(c.hidden.size()) <= limits::kMaxLayers / 2, "mlp: ", c.hidden.size(),
               " hidden layers, more than the limit of ", limits::kMaxLayers / 2);
  for (size_t i = 0; i < c.hidden.size(); ++i) {
    PF_CHECK_ARG(c.hidden[i] > 0 && c.hidden[i] <= limits::kMaxDimension, "mlp: hidden[", i, "] must be in [1, ",
                 limits::kMaxDimension, "], got ", c.hidden[i]);
  }
  PF_CHECK_ARG(c.activation == "relu" || c.activation == "gelu", "mlp: activation must be relu or gelu, got '",
               c.activation, "'");
}

// The sizes the GPT and Llama configs share; `what` ("gpt", "llama") starts each message.
template <typename Config>
void check_token_model(const Config& c, const std::string& what) {
  check_dimension(c.vocab, (what + ": vocab").c_str());
  check_dimension(c.seq_len, (what + ": seq_len").c_str());
  check_dimension(c.d_model, (what + ": d_model").c_str());
  PF_CHECK_ARG(c.heads > 0 && c.d_model % c.heads == 0, what, ": heads must be > 0 and divide d_model (",
               c.d_model, "), got ", c.heads);
  PF_CHECK_ARG(c.layers >= 0 && c.layers <= kMaxGptBlocks, what, ": layers must be in [0, ", kMaxGptBlocks,
               "], got ", c.layers);
  PF_CHECK_ARG(c.mlp_hidden >= 0 && c.mlp_hidden <= limits::kMaxDimension, what, ": mlp_hidden must be in [0, ",
               limits::kMaxDimension, "], got ", c.mlp_hidden);
}

void check_gpt(const GptConfig& c) {
  check_token_model(c, "gpt");
  PF_CHECK_ARG(c.mlp_hidden > 0 || 4 * c.d_model <= limits::kMaxDimension, "gpt: the default mlp_hidden 4 * d_model = ",
               4 * c.d_model, " is larger than ", limits::kMaxDimension, "; give mlp_hidden");
}

// A finite positive number that fits a float (checked as a double: converting an out-of-range
// double to float is undefined).
float positive_float(const JsonObject& obj, const char* key, float fallback) {
  const double v = obj.get_number(key, fallback);
  PF_CHECK_ARG(std::isfinite(v) && v > 0.0 && v <= std::numeric_limits<float>::max() &&
                   static_cast<float>(v) > 0.0f,
               obj.path_of(key), ": expected a finite positive number, got ", v);
  return static_cast<float>(v);
}

void check_llama(const LlamaConfig& c) {
  check_token_model(c, "llama");
  PF_CHECK_ARG((c.d_model / c.heads) % 2 == 0, "llama: rotary positions need an even head dimension, got d_model ",
               c.d_model, " / heads ", c.heads, " = ", c.d_model / c.heads);
  PF_CHECK_ARG(c.kv_heads >= 0 && (c.kv_heads == 0 || c.heads % c.kv_heads == 0),
               "llama: kv_heads must divide heads (", c.heads, "), got ", c.kv_heads);
  PF_CHECK_ARG(std::isfinite(c.rope_theta) && c.rope_theta > 0.0f, "llama: rope_theta must be finite and > 0, got ",
               c.rope_theta);
  PF_CHECK_ARG(std::isfinite(c.norm_eps) && c.norm_eps > 0.0f, "llama: norm_eps must be finite and > 0, got ",
               c.norm_eps);
}

// An image row of channels x size x size values fits the feature limit (the vision presets' input).
void check_image_size(int64_t channels, int64_t size, const char* preset) {
  PF_CHECK_ARG(size <= limits::kMaxDimension / size && channels <= limits::kMaxDimension / (size * size), preset,
               ": an image of ", channels, " x ", size, " x ", size, " values is more than the limit of ",
               limits::kMaxDimension, " features");
}

void check_vit(const VitConfig& c) {
  check_dimension(c.channels, "vit: channels");
  check_dimension(c.image_size, "vit: image_size");
  check_dimension(c.patch, "vit: patch");
  check_dimension(c.d_model, "vit: d_model");
  check_dimension(c.classes, "vit: classes");
  PF_CHECK_ARG(c.image_size % c.patch == 0, "vit: image_size ", c.image_size, " is not divisible by patch ", c.patch);
  check_image_size(c.channels, c.image_size, "vit");
  PF_CHECK_ARG(c.heads > 0 && c.d_model % c.heads == 0, "vit: heads must be > 0 and divide d_model (", c.d_model,
               "), got ", c.heads);
  PF_CHECK_ARG(c.layers >= 0 && c.layers <= kMaxGptBlocks, "vit: layers must be in [0, ", kMaxGptBlocks, "], got ",
               c.layers);
  PF_CHECK_ARG(c.mlp_hidden >= 0 && c.mlp_hidden <= limits::kMaxDimension, "vit: mlp_hidden must be in [0, ",
               limits::kMaxDimension, "], got ", c.mlp_hidden);
  PF_CHECK_ARG(c.mlp_hidden > 0 || 4 * c.d_model <= limits::kMaxDimension, "vit: the default mlp_hidden 4 * d_model = ",
               4 * c.d_model, " is larger than ", limits::kMaxDimension, "; give mlp_hidden");
}

void check_resnet(const ResNetConfig& c) {
  check_dimension(c.channels, "resnet: channels");
  check_dimension(c.image_size, "resnet: image_size");
  check_dimension(c.width, "resnet: width");
  check_dimension(c.classes, "resnet: classes");
  check_image_size(c.channels, c.image_size, "resnet");
  PF_CHECK_ARG(!c.blocks.empty() && c.blocks.size() <= 8, "resnet: blocks must list 1 to 8 stages, got ",
               c.blocks.size());
  int64_t channels = c.width, size = c.image_size, total = 0;
  for (size_t stage = 0; stage < c.blocks.size(); ++stage) {
    PF_CHECK_ARG(c.blocks[stage] >= 1, "resnet: blocks[", stage, "] must be >= 1, got ", c.blocks[stage]);
    total += c.blocks[stage];
    if (stage > 0) {
      PF_CHECK_ARG(size >= 2 && channels <= limits::kMaxDimension / 2, "resnet: stage ", stage,
                   " would halve a ", size, "x", size, " feature map of ", channels, " channels; use fewer stages");
      channels *= 2;
      size = (size - 1) / 2 + 1;
    }
  }
  PF_CHECK_ARG(total <= kMaxGptBlocks, "resnet: ", total, " blocks, more than the limit of ", kMaxGptBlocks);
  PF_CHECK_ARG(c.groups > 0 && c.width % c.groups == 0, "resnet: groups must be > 0 and divide width (", c.width,
               "), got ", c.groups);
}

// The fields the GPT and Llama presets share.
template <typename Config>
void read_token_model_fields(const JsonObject& obj, Config* c) {
  constexpr int64_t kDim = limits::kMaxDimension;
  c->vocab = obj.get_int_in("vocab", c->vocab, 1, kDim);
  c->seq_len = obj.get_int_in("seq_len", c->seq_len, 1, kDim);
  c->d_model = obj.get_int_in("d_model", c->d_model, 1, kDim);
  c->heads = obj.get_int_in("heads", c->heads, 1, kDim);
  c->layers = obj.get_int_in("layers", c->layers, 0, kMaxGptBlocks);
  c->mlp_hidden = obj.get_int_in("mlp_hidden", c->mlp_hidden, 0, kDim);
  c->tie_embeddings = obj.get_bool("tie_embeddings", false);
}

std::unique_ptr<Model> build_preset(const JsonObject& obj, const std::string& preset) {
  constexpr int64_t kDim = limits::kMaxDimension;
  if (preset == "mlp") {
    MlpConfig c;
    c.input_dim = obj.get_int_in("input_dim", c.input_dim, 1, kDim);
    c.hidden = obj.get_int_list("hidden", c.hidden, kDim, static_cast<size_t>(limits::kMaxLayers / 2));
    c.classes = obj.get_int_in("classes", c.classes, 1, kDim);
    c.activation = obj.get_string("activation", c.activation);
    obj.reject_unknown({"preset", "format", "local_head"});
    return build_mlp(c);
  }
  if (preset == "gpt") {
    GptConfig c;
    read_token_model_fields(obj, &c);
    obj.reject_unknown({"preset", "format", "local_head"});
    return build_gpt(c);
  }
  if (preset == "llama") {
    LlamaConfig c;
    read_token_model_fields(obj, &c);
    c.kv_heads = obj.get_int_in("kv_heads", c.heads, 1, kDim);
    c.rope_theta = positive_float(obj, "rope_theta", c.rope_theta);
    c.norm_eps = positive_float(obj, "norm_eps", c.norm_eps);
    obj.reject_unknown({"preset", "format", "local_head"});
    return build_llama(c);
  }
  if (preset == "vit") {
    VitConfig c;
    c.channels = obj.get_int_in("channels", c.channels, 1, kDim);
    c.image_size = obj.get_int_in("image_size", c.image_size, 1, kDim);
    c.patch = obj.get_int_in("patch", c.patch, 1, kDim);
    c.d_model = obj.get_int_in("d_model", c.d_model, 1, kDim);
    c.heads = obj.get_int_in("heads", c.heads, 1, kDim);
    c.layers = obj.get_int_in("layers", c.layers, 0, kMaxGptBlocks);
    c.mlp_hidden = obj.get_int_in("mlp_hidden", c.mlp_hidden, 0, kDim);
    c.classes = obj.get_int_in("classes", c.classes, 1, kDim);
    obj.reject_unknown({"preset", "format", "local_head"});
    return build_vit(c);
  }
  if (preset == "resnet") {
    ResNetConfig c;
    c.channels = obj.get_int_in("channels", c.channels, 1, kDim);
    c.image_size = obj.get_int_in("image_size", c.image_size, 1, kDim);
    c.width = obj.get_int_in("width", c.width, 1, kDim);
    c.blocks = obj.get_int_list("blocks", c.blocks, kMaxGptBlocks, 8);
    c.groups = obj.get_int_in("groups", c.groups, 1, kDim);
    c.classes = obj.get_int_in("classes", c.classes, 1, kDim);
    obj.reject_unknown({"preset", "format", "local_head"});
    return build_resnet(c);
  }
  fail(ErrorCode::kInvalidArgument, "preset: unknown preset '", preset, "' (known: mlp, gpt, llama, vit, resnet)");
}

InputSpec parse_input(const nlohmann::json& j) {
  constexpr int64_t kDim = limits::kMaxDimension;
  JsonObject obj(j, "input");
  InputSpec spec;
  const std::string kind = obj.get_string("kind");
  if (kind == "features") {
    spec.kind = InputSpec::Kind::kFeatures;
    spec.features = obj.get_int_in("features", 1, kDim);
  } else if (kind == "tokens") {
    spec.kind = InputSpec::Kind::kTokens;
    spec.vocab = obj.get_int_in("vocab", 1, kDim);
    spec.seq_len = obj.get_int_in("seq_len", 1, kDim);
  } else {
    fail(ErrorCode::kInvalidArgument, "input.kind: unknown input kind '", kind, "' (known: features, tokens)");
  }
  spec.classes = obj.get_int_in("classes", 1, kDim);
  obj.reject_unknown();
  return spec;
}

std::unique_ptr<Model> assemble_mlp(const MlpConfig& config) {
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

// The name of the token embedding's matrix in the GPT and Llama presets (what a tied head copies).
constexpr const char* kTokenWeight = "embed.token_weight";

// A token model of the presets' layers: tokens in, one class per vocabulary entry, cross-entropy.
std::unique_ptr<Model> token_model_of(int64_t vocab, int64_t seq_len, std::vector<std::unique_ptr<Layer>> layers) {
  InputSpec spec;
  spec.kind = InputSpec::Kind::kTokens;
  spec.vocab = vocab;
  spec.seq_len = seq_len;
  spec.classes = vocab;
  return std::make_unique<Model>(spec, std::move(layers), std::make_unique<CrossEntropyLoss>());
}

std::unique_ptr<Model> assemble_gpt(const GptConfig& config) {
  const int64_t hidden = config.mlp_hidden > 0 ? config.mlp_hidden : 4 * config.d_model;
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<Embedding>("embed", config.vocab, config.seq_len, config.d_model));
  for (int64_t i = 0; i < config.layers; ++i) {
    layers.push_back(std::make_unique<TransformerBlock>("blocks." + std::to_string(i), config.d_model,
                                                        config.heads, hidden));
  }
  layers.push_back(std::make_unique<LayerNorm>("ln_f", config.d_model));
  if (config.tie_embeddings) {
    layers.push_back(std::make_unique<Linear>("head", config.d_model, config.vocab, false, 0.02f, kTokenWeight));
  } else {
    layers.push_back(std::make_unique<Linear>("head", config.d_model, config.vocab));
  }
  return token_model_of(config.vocab, config.seq_len, std::move(layers));
}

std::unique_ptr<Model> assemble_llama(const LlamaConfig& config) {
  LlamaBlockConfig block;
  block.dim = config.d_model;
  block.heads = config.heads;
  block.kv_heads = config.kv_heads;
  block.mlp_hidden = config.mlp_hidden > 0 ? config.mlp_hidden : llama_default_mlp_hidden(config.d_model);
  block.rope_theta = config.rope_theta;
  block.norm_eps = config.norm_eps;
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<Embedding>("embed", config.vocab, config.seq_len, config.d_model, 0.02f, false));
  for (int64_t i = 0; i < config.layers; ++i)
    layers.push_back(std::make_unique<LlamaBlock>("blocks." + std::to_string(i), block));
  layers.push_back(std::make_unique<RMSNorm>("norm", config.d_model, config.norm_eps));
  layers.push_back(std::make_unique<Linear>("head", config.d_model, config.vocab, false, 0.02f,
                                            config.tie_embeddings ? kTokenWeight : ""));
  return token_model_of(config.vocab, config.seq_len, std::move(layers));
}

// A classifier of image rows (channels x size x size values, channel-major) into `classes`.
std::unique_ptr<Model> image_model_of(int64_t channels, int64_t size, int64_t classes,
                                      std::vector<std::unique_ptr<Layer>> layers) {
  InputSpec spec;
  spec.kind = InputSpec::Kind::kFeatures;
  spec.features = channels * size * size;
  spec.classes = classes;
  return std::make_unique<Model>(spec, std::move(layers), std::make_unique<CrossEntropyLoss>());
}

std::unique_ptr<Model> assemble_vit(const VitConfig& config) {
  PatchEmbeddingConfig patches;
  patches.channels = config.channels;
  patches.height = config.image_size;
  patches.width = config.image_size;
  patches.patch = config.patch;
  patches.dim = config.d_model;
  const int64_t hidden = config.mlp_hidden > 0 ? config.mlp_hidden : 4 * config.d_model;
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<PatchEmbedding>("embed", patches));
  for (int64_t i = 0; i < config.layers; ++i) {
    layers.push_back(std::make_unique<TransformerBlock>("blocks." + std::to_string(i), config.d_model, config.heads,
                                                        hidden, /*causal=*/false));
  }
  layers.push_back(std::make_unique<LayerNorm>("ln_f", config.d_model));
  layers.push_back(std::make_unique<ClassToken>("pool"));
  layers.push_back(std::make_unique<Linear>("head", config.d_model, config.classes));
  return image_model_of(config.channels, config.image_size, config.classes, std::move(layers));
}

// One basic block, "<name>": Residual "<name>.res" (conv, norm, relu, conv, norm; a projection
// shortcut when the shape changes) then ReLU "<name>.act". Names as the JSON form rebuilds them.
std::unique_ptr<Layer> resnet_block(const std::string& name, int64_t in, int64_t out, int64_t stride,
                                    int64_t groups) {
  const std::string res = name + ".res";
  Conv2dOptions first;
  first.stride = stride;
  first.padding = 1;
  first.bias = false;
  Conv2dOptions second;
  second.padding = 1;
  second.bias = false;
  std::vector<std::unique_ptr<Layer>> body;
  body.push_back(std::make_unique<Conv2d>(res + ".0", in, out, first));
  body.push_back(std::make_unique<GroupNorm>(res + ".1", out, groups));
  body.push_back(std::make_unique<ReLU>(res + ".2"));
  body.push_back(std::make_unique<Conv2d>(res + ".3", out, out, second));
  body.push_back(std::make_unique<GroupNorm>(res + ".4", out, groups));
  std::unique_ptr<Layer> shortcut;
  if (stride != 1 || in != out) {
    Conv2dOptions projection;
    projection.kernel = 1;
    projection.stride = stride;
    projection.bias = false;
    std::vector<std::unique_ptr<Layer>> path;
    path.push_back(std::make_unique<Conv2d>(res + ".shortcut.0", in, out, projection));
    path.push_back(std::make_unique<GroupNorm>(res + ".shortcut.1", out, groups));
    shortcut = std::make_unique<Sequential>(res + ".shortcut", std::move(path));
  }
  std::vector<std::unique_ptr<Layer>> block;
  block.push_back(std::make_unique<Residual>(res, std::make_unique<Sequential>(res + ".body", std::move(body)),
                                             std::move(shortcut)));
  block.push_back(std::make_unique<ReLU>(name + ".act"));
  return std::make_unique<Sequential>(name, std::move(block));
}

std::unique_ptr<Model> assemble_resnet(const ResNetConfig& config) {
  std::vector<std::unique_ptr<Layer>> layers;
  Conv2dOptions stem;
  stem.padding = 1;
  stem.bias = false;
  stem.height = config.image_size;
  stem.width = config.image_size;
  layers.push_back(std::make_unique<Conv2d>("stem", config.channels, config.width, stem));
  layers.push_back(std::make_unique<GroupNorm>("stem_norm", config.width, config.groups));
  layers.push_back(std::make_unique<ReLU>("stem_act"));
  int64_t channels = config.width, index = 0;
  for (size_t stage = 0; stage < config.blocks.size(); ++stage) {
    for (int64_t i = 0; i < config.blocks[stage]; ++i) {
      const bool downsample = stage > 0 && i == 0;
      const int64_t out = downsample ? 2 * channels : channels;
      layers.push_back(
          resnet_block("blocks." + std::to_string(index++), channels, out, downsample ? 2 : 1, config.groups));
      channels = out;
    }
  }
  layers.push_back(std::make_unique<GlobalAvgPool>("pool"));
  layers.push_back(std::make_unique<Linear>("head", channels, config.classes, true,
                                            1.0f / std::sqrt(static_cast<float>(channels))));
  return image_model_of(config.channels, config.image_size, config.classes, std::move(layers));
}

std::unique_ptr<Model> assemble_from_json(const JsonObject& obj) {
  InputSpec spec = parse_input(obj.get("input"));
  const auto& list = obj.get_array("layers");
  check_layer_descriptions(list, "layers");
  std::vector<std::unique_ptr<Layer>> layers;
  for (size_t i = 0; i < list.size(); ++i) {
    layers.push_back(layer_from_json(list[i], "layers." + std::to_string(i), "layers[" + std::to_string(i) + "]"));
  }
  PF_CHECK_ARG(!layers.empty(), "layers: at least one layer is required");
  std::unique_ptr<Loss> loss = loss_from_json(obj.has("loss") ? obj.get("loss") : nlohmann::json("cross_entropy"), "loss");
  obj.reject_unknown({"local_head"});
  return std::make_unique<Model>(spec, std::move(layers), std::move(loss));
}

// Builds the model once without allocating (ParameterSizing) to check its parameter bytes against
// limits::max_parameter_bytes(), then for real: a too large model is refused before any of it is
// allocated.
thread_local int deferred_allocation = 0;

template <typename Assemble>
std::unique_ptr<Model> build_within_memory_limit(const char* what, Assemble assemble) {
  {
    ParameterSizing sizing;
    std::unique_ptr<Model> sized = assemble();
    const int64_t limit = limits::max_parameter_bytes();
    if (sizing.bytes() > limit) {
      fail(ErrorCode::kOutOfMemory, what, ": the model's ", sizing.count(), " parameters would take ",
           sizing.bytes(), " bytes, more than the limit of ", limit,
           " (a quarter of the memory this process may use, leaving room for gradients and optimizer state);"
           " check the sizes (d_model, hidden, vocab, layers, in/out)");
    }
    if (deferred_allocation > 0) return sized;  // parameters unallocated (DeferParameterAllocation)
  }
  return assemble();
}

}  // namespace

DeferParameterAllocation::DeferParameterAllocation() { ++deferred_allocation; }
DeferParameterAllocation::~DeferParameterAllocation() { --deferred_allocation; }

std::unique_ptr<Model> build_mlp(const MlpConfig& config) {
  check_mlp(config);
  return build_within_memory_limit("mlp", [&] { return assemble_mlp(config); });
}

std::unique_ptr<Model> build_gpt(const GptConfig& config) {
  check_gpt(config);
  return build_within_memory_limit("gpt", [&] { return assemble_gpt(config); });
}

std::unique_ptr<Model> build_llama(const LlamaConfig& config) {
  check_llama(config);
  return build_within_memory_limit("llama", [&] { return assemble_llama(config); });
}

std::unique_ptr<Model> build_resnet(const ResNetConfig& config) {
  check_resnet(config);
  return build_within_memory_limit("resnet", [&] { return assemble_resnet(config); });
}

std::unique_ptr<Model> build_vit(const VitConfig& config) {
  check_vit(config);
  return build_within_memory_limit("vit", [&] { return assemble_vit(config); });
}

std::unique_ptr<Model> build_model_from_json(const nlohmann::json& description) {
  JsonObject obj(description, "");
  if (obj.has("format")) {
    const std::string format = obj.get_string("format");
    PF_CHECK_ARG(format == "pipeforge.model/1", "format: unsupported model format '", format,
                 "' (this build reads pipeforge.model/1)");
  }
  // Local learning's auxiliary heads (either form).
  const std::string head = obj.get_string("local_head", "auto");
  check_local_head_kind(head, obj.path_of("local_head"));
  std::unique_ptr<Model> model = obj.has("preset")
                                     ? build_preset(obj, obj.get_string("preset"))
                                     : build_within_memory_limit("model JSON", [&] { return assemble_from_json(obj); });
  model->set_local_head(head);
  return model;
}

std::unique_ptr<Model> build_model_from_json_text(const std::string& text) {
  return build_model_from_json(parse_json_text(text, "model JSON", limits::kMaxModelJsonBytes));
}

}  // namespace pf

// The reference models: an MLP classifier, a small GPT (pre-LayerNorm transformer) and a Llama
// (RMSNorm, rotary positions, SwiGLU, grouped-query attention, no biases).
#pragma once

#include <memory>
#include <vector>

#include "runtime/models/model.h"

namespace pf {

// While one is alive on this thread, the builders below return models whose parameters have their
// names, shapes and init rules but no tensors (Parameter::allocated() is false): a process that
// holds only some stages allocates just those (allocate_parameter; PipelineTrainer with a World
// does it). The memory limit is still checked for the whole model.
class DeferParameterAllocation {
 public:
  DeferParameterAllocation();
  ~DeferParameterAllocation();
  DeferParameterAllocation(const DeferParameterAllocation&) = delete;
  DeferParameterAllocation& operator=(const DeferParameterAllocation&) = delete;
};

struct MlpConfig {
  int64_t input_dim = 32;
  std::vector<int64_t> hidden = {64, 64};
  int64_t classes = 10;
  std::string activation = "relu";  // "relu" or "gelu"
};

struct GptConfig {
  int64_t vocab = 96;
  int64_t seq_len = 64;
  int64_t d_model = 64;
  int64_t heads = 4;
  int64_t layers = 2;
  int64_t mlp_hidden = 0;  // 0 = 4 * d_model
  // The head tied to the token embedding, without bias (GPT-2's own form, which Transformers'
  // GPT2LMHeadModel computes): "head.weight" is a tied copy of "embed.token_weight".
  bool tie_embeddings = false;
};

struct LlamaConfig {
  int64_t vocab = 96;
  int64_t seq_len = 64;  // the longest sequence (positions are rotary: no parameter depends on it)
  int64_t d_model = 64;
  int64_t heads = 4;
  int64_t kv_heads = 0;    // 0: heads
  int64_t layers = 2;
  int64_t mlp_hidden = 0;  // 0: llama_default_mlp_hidden(d_model) (runtime/layers/llama_block.h)
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  bool tie_embeddings = false;  // "head.weight" a tied copy of "embed.token_weight"
};

// A Vision Transformer (ViT) classifying square images: inputs f32 [B, channels * image_size^2]
// (each row an image in channel-major order), targets i32 [B] in [0, classes).
struct VitConfig {
  int64_t channels = 1;
  int64_t image_size = 8;  // height = width; divisible by patch
  int64_t patch = 2;
  int64_t d_model = 32;
  int64_t heads = 4;
  int64_t layers = 2;
  int64_t mlp_hidden = 0;  // 0 = 4 * d_model
  int64_t classes = 10;
};

// A small residual network for images (He et al. 2016's basic blocks, GroupNorm instead of
// BatchNorm: statistics per sample, so micro-batching changes nothing).
struct ResNetConfig {
  int64_t channels = 1;    // image channels (inputs: rows of channels * image_size^2 values)
  int64_t image_size = 8;  // height = width
  int64_t width = 16;      // channels of the stem and the first stage; each later stage doubles them
  std::vector<int64_t> blocks = {1, 1};  // residual blocks per stage; later stages start with stride 2
  int64_t groups = 4;      // GroupNorm groups; must divide width
  int64_t classes = 10;
};

// Top-level layers: "fc0", "act0", "fc1", ... , "head"; loss: cross-entropy.
std::unique_ptr<Model> build_mlp(const MlpConfig& config);
// Top-level layers: "embed" (token + position), "blocks.0" ... "blocks.{L-1}", "ln_f", "head".
std::unique_ptr<Model> build_gpt(const GptConfig& config);
// Top-level layers: "embed" (tokens only), "blocks.0" ... "blocks.{L-1}" (LlamaBlock), "norm"
// (RMSNorm), "head" (no bias).
std::unique_ptr<Model> build_llama(const LlamaConfig& config);
// Top-level layers: "embed" (patch_embedding: class token, patches, learned positions),
// "blocks.0" ... "blocks.{L-1}" (pre-LayerNorm GPT blocks with bidirectional attention, GELU),
// "ln_f", "pool" (class_token), "head"; loss: cross-entropy over the classes.
std::unique_ptr<Model> build_vit(const VitConfig& config);
// Top-level layers: "stem" (3x3 conv, padding 1), "stem_norm" (GroupNorm), "stem_act" (ReLU),
// "blocks.0" ... (each a Sequential of "blocks.<i>.res", a Residual whose body is conv 3x3 (stride
// 2 where a stage starts), GroupNorm, ReLU, conv 3x3, GroupNorm, with a shortcut of a 1x1 conv and
// a GroupNorm where the shape changes, and "blocks.<i>.act", a ReLU), "pool" (global average),
// "head"; convolutions before a GroupNorm have no bias; loss: cross-entropy over the classes.
std::unique_ptr<Model> build_resnet(const ResNetConfig& config);

// Builds from model JSON: either {"preset": "mlp"|"gpt"|"llama"|"vit"|"resnet", ...config fields} or
// {"input": {...}, "layers": [...], "loss": "cross_entropy"}. Unknown fields, unknown layer types
// and bad values are kInvalidArgument errors that name the field (as a JSON path). Sizes are bounded
// as runtime/core/limits.h says (dimensions, layer count and nesting, JSON size and depth); a model
// whose parameters would pass limits::max_parameter_bytes() is refused with kOutOfMemory before any
// of it is allocated. build_mlp and build_gpt check the same.
std::unique_ptr<Model> build_model_from_json(const nlohmann::json& description);
std::unique_ptr<Model> build_model_from_json_text(const std::string& text);

}  // namespace pf

// PipeForge models in Hugging Face Transformers' terms: a folder with `config.json` and
// `model.safetensors` (or shards listed by `model.safetensors.index.json`) that
// `from_pretrained(DIR)` loads, and the reverse.
//
// Families (`--names`): "hf-llama", LlamaForCausalLM, for the Llama preset (runtime/models/
// builders.h build_llama: embed, blocks.i, norm, head). The names:
//   embed.token_weight              model.embed_tokens.weight
//   blocks.i.attn_norm.weight       model.layers.i.input_layernorm.weight
//   blocks.i.attn.qkv.weight        model.layers.i.self_attn.{q,k,v}_proj.weight (its row blocks:
//                                   heads x hd, then kv_heads x hd twice; rotate_half layout both)
//   blocks.i.attn.proj.weight       model.layers.i.self_attn.o_proj.weight
//   blocks.i.mlp_norm.weight        model.layers.i.post_attention_layernorm.weight
//   blocks.i.mlp.gate_up.weight     model.layers.i.mlp.{gate,up}_proj.weight (rows: gate, then up)
//   blocks.i.mlp.down.weight        model.layers.i.mlp.down_proj.weight
//   norm.weight                     model.norm.weight
//   head.weight                     lm_head.weight
// Linear weights are [out, in] in both. "hf-gpt2" (GPT2LMHeadModel) needs a head tied to the token
// embedding without a bias, which PipeForge's GPT does not have yet: it is refused, saying so.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/layers/parameter.h"
#include "runtime/models/model.h"

namespace pf {

enum class HfFamily { kLlama };

// "hf-llama"; `what` names the option in errors (kInvalidArgument; kUnimplemented for hf-gpt2).
HfFamily parse_hf_family(const std::string& name, const std::string& what);

// One Transformers tensor: rows [row_begin, row_begin + rows) of the PipeForge parameter `param`
// (all of its columns).
struct HfTensor {
  std::string hf_name;
  std::string param;
  int64_t row_begin = 0, rows = 0;
};

// The tensors of `model` in `family`'s names, in Transformers' order. kInvalidArgument naming the
// layer when the model is not of the family.
std::vector<HfTensor> hf_tensor_map(const Model& model, HfFamily family);

// The config.json of `model` for `family`.
nlohmann::ordered_json hf_config_of(const Model& model, HfFamily family);

// The PipeForge model JSON of a Transformers config.json (`path` names it in errors): its
// model_type picks the family. Refused naming the field (kInvalidArgument): another model type,
// what PipeForge cannot compute the same way (tied embeddings, biases, another activation, RoPE
// scaling, a head_dim other than hidden_size / heads), missing or bad sizes.
nlohmann::json model_json_from_hf_config(const nlohmann::json& config, const std::string& path);

// DIR/config.json read (a regular file, size-checked) and converted.
nlohmann::json model_json_from_hf_folder(const std::string& dir);

// Writes DIR/model.safetensors (f32, the parameters' values; metadata {"format": "pt"} as
// Transformers writes it) and DIR/config.json, each atomically (runtime/core/output_file.h).
// Every parameter of the model must be allocated in this process.
void export_hf_folder(const Model& model, HfFamily family, const std::string& dir);

// Loads the weights of DIR (model.safetensors, or the shards model.safetensors.index.json lists:
// relative file names inside DIR) into those of `params` (parameters of `model` this process
// holds) that the family's map names. Checked before any parameter changes: every tensor the map
// names is in the folder with its shape, and the folder holds no other tensor (rotary inv_freq
// buffers of old Transformers excepted); kInvalidArgument naming the tensor and the file,
// kDataLoss for a damaged file, kNotFound for a missing one. F32, F16, BF16 and F64 are read.
void load_hf_weights(const Model& model, const std::vector<Parameter*>& params, const std::string& dir);

}  // namespace pf

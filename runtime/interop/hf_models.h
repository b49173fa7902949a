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
// Linear weights are [out, in] in both. A Llama whose head is tied to the token embedding
// (tie_embeddings; Transformers' tie_word_embeddings) has no lm_head in the file, as
// save_pretrained leaves it out.
//
// "hf-gpt2", GPT2LMHeadModel, for the GPT preset with tie_embeddings (GPT-2's form: the head is the
// token embedding, no bias; tanh GELU = Transformers' gelu_new; LayerNorm eps 1e-5):
//   embed.token_weight / position_weight   transformer.wte.weight / transformer.wpe.weight
//   blocks.i.ln1 / ln2 (weight, bias)      transformer.h.i.ln_1 / ln_2
//   blocks.i.attn.qkv (weight, bias)       transformer.h.i.attn.c_attn (weight transposed: Conv1D
//                                          stores [in, out]; the same q | k | v column blocks)
//   blocks.i.attn.proj                     transformer.h.i.attn.c_proj (transposed)
//   blocks.i.mlp.fc / proj                 transformer.h.i.mlp.c_fc / c_proj (transposed)
//   ln_f                                   transformer.ln_f
// and no lm_head (tied).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/layers/parameter.h"
#include "runtime/models/model.h"

namespace pf {

enum class HfFamily { kLlama, kGpt2 };

// "hf-llama" or "hf-gpt2"; `what` names the option in errors (kInvalidArgument).
HfFamily parse_hf_family(const std::string& name, const std::string& what);

// One Transformers tensor: rows [row_begin, row_begin + rows) of the PipeForge parameter `param`
// (all of its columns), transposed when `transpose` (GPT-2's Conv1D weights).
struct HfTensor {
  std::string hf_name;
  std::string param;
  int64_t row_begin = 0, rows = 0;
  bool transpose = false;
};

// The family `model` has the form of (kInvalidArgument naming the layer that fits none).
HfFamily hf_family_of(const Model& model);

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
// holds) that the map of the model's family names; a tied copy gets its primary's tensor. Checked
// before any parameter changes: every tensor the map names is in the folder with its shape, and the
// folder holds no other tensor (what older Transformers saved besides excepted: rotary inv_freq,
// GPT-2's attn.bias / attn.masked_bias masks, the lm_head of a tied model); kInvalidArgument
// naming the tensor and the file, kDataLoss for a damaged file, kNotFound for a missing one. F32,
// F16, BF16 and F64 are read.
void load_hf_weights(const Model& model, const std::vector<Parameter*>& params, const std::string& dir);

}  // namespace pf

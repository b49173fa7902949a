// Safetensors (runtime/checkpoint/safetensors.h) and the Transformers folders of runtime/interop:
// what is written reads back bitwise, damaged files are refused naming the file and the entry, and
// the Llama's names, row blocks and config are those of Transformers' LlamaForCausalLM (written
// out here from its modeling code). The comparison with the real `transformers` is
// transformers_test.cc.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/core/error.h"
#include "runtime/interop/hf_models.h"
#include "runtime/models/builders.h"
#include "tests/util/temp_files.h"

namespace pf {
namespace {

using nlohmann::json;

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

Tensor iota(const Shape& shape, float start) {
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = start + 0.5f * static_cast<float>(i);
  return t;
}

// A file of a hand-written header and `data` bytes.
std::string with_header(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

// The error of opening `bytes` as a safetensors file: its code and message.
std::pair<ErrorCode, std::string> open_error(const std::string& bytes) {
  const std::string path = pftest::write_temp_file("bad.safetensors", bytes);
  try {
    SafetensorsFile::open(path);
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  return {ErrorCode::kOk, ""};
}

TEST(Safetensors, WrittenFilesReadBackBitwise) {
  const Tensor a = iota({2, 3}, -1.0f), b = iota({4}, 7.0f), empty = Tensor::empty({0, 5});
  const std::string bytes = encode_safetensors({{"a", &a}, {"b.weight", &b}, {"nothing", &empty}}, {{"format", "pt"}});
  ASSERT_EQ((bytes.size() - 8 - 6 * 4 - 4 * 4) % 8, 0u);  // the header padded to 8 bytes
  const std::string path = pftest::write_temp_file("ok.safetensors", bytes);
  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->header().metadata.at("format"), "pt");
  ASSERT_EQ(f->header().entries.size(), 3u);
  EXPECT_EQ(f->header().entries[1].name, "b.weight");
  EXPECT_EQ(f->header().entries[1].shape, (Shape{4}));
  const Tensor a2 = f->read_f32(*f->find("a"));
  EXPECT_EQ(0, std::memcmp(a2.f32(), a.f32(), 24));
  EXPECT_EQ(f->read_f32(*f->find("nothing")).shape(), (Shape{0, 5}));
  EXPECT_EQ(f->find("c"), nullptr);
  EXPECT_THROW(encode_safetensors({{"a", &a}, {"a", &b}}, {}), Error);
}

// BF16 is the top half of an f32, F16 IEEE half precision, F64 rounded: values written as bytes here.
TEST(Safetensors, HalfAndDoublePrecisionAreConverted) {
  std::string data;
  auto put16 = [&](uint16_t v) { data += static_cast<char>(v & 0xff), data += static_cast<char>(v >> 8); };
  put16(0x3f80), put16(0xc040);          // bf16 1.0, -3.0
  put16(0x3c00), put16(0x0001), put16(0xfc00);  // f16 1.0, 2^-24 (subnormal), -inf
  const double d[2] = {0.1, -2.5};
  data.append(reinterpret_cast<const char*>(d), 16);
  const std::string header = R"({"b":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},)"
                             R"("h":{"dtype":"F16","shape":[3],"data_offsets":[4,10]},)"
                             R"("d":{"dtype":"F64","shape":[2],"data_offsets":[10,26]},)"
                             R"("i":{"dtype":"I32","shape":[],"data_offsets":[26,30]}})";
  data.append(4, '\0');
  auto f = SafetensorsFile::open(pftest::write_temp_file("mixed.safetensors", with_header(header, data)));
  EXPECT_EQ(f->read_f32(*f->find("b")).to_vector(), (std::vector<float>{1.0f, -3.0f}));
  const std::vector<float> h = f->read_f32(*f->find("h")).to_vector();
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(h[2]) && h[2] < 0);
  EXPECT_EQ(f->read_f32(*f->find("d")).to_vector(), (std::vector<float>{0.1f, -2.5f}));
  try {
    f->read_f32(*f->find("i"));
    ADD_FAILURE() << "an I32 tensor read as f32";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'i' is I32"), std::string::npos) << e.what();
  }
}

TEST(Safetensors, DamagedFilesAreRefusedNamingTheEntry) {
  const std::string four(16, '\0');
  const std::string good = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  ASSERT_EQ(open_error(with_header(good, four)).first, ErrorCode::kOk);
  struct Case {
    std::string bytes, says;
  } cases[] = {
      {"abc", "fewer than the 8"},
      {std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}", "more than the limit"},
      {std::string("\x40\x00\x00\x00\x00\x00\x00\x00", 8) + "{}", "a header of 64 bytes, but the file holds 2"},
      {with_header("[1]", ""), "does not start with '{'"},
      {with_header("{\"w\": ", ""), "header"},
      {with_header(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                   std::string(8, '\0')),
       "names 'w' twice"},
      {with_header(R"({"w":{"dtype":"Q4","shape":[2,2],"data_offsets":[0,16]}})", four), "unknown dtype 'Q4'"},
      {with_header(R"({"w":{"dtype":"F32","shape":[3,2],"data_offsets":[0,16]}})", four), "tensor 'w': shape [3, 2]"},
      {with_header(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16],"x":1}})", four), "unknown field 'x'"},
      {with_header(R"({"w":{"dtype":"F32","shape":[2,-2],"data_offsets":[0,16]}})", four), "tensor 'w': a dimension"},
      {with_header(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})", four), "dimension"},
      {with_header(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,32]}})", four), "outside the 16 bytes"},
      {with_header(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"v":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                   std::string(12, '\0')),
       "starts at byte 4 of the data, expected 0"},
      {with_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                   std::string(12, '\0')),
       "tensor 'v' starts at byte 4 of the data, expected 8"},
      {with_header(good, four + "xx"), "cover 16 bytes of data but the file holds 18"},
      {with_header(R"({"__metadata__":{"a":1},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})", four),
       "__metadata__ 'a' is not a string"},
      {with_header(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0]}})", four), "data_offsets is not [begin, end]"},
  };
  for (const Case& c : cases) {
    const auto [code, message] = open_error(c.bytes);
    EXPECT_EQ(code, ErrorCode::kDataLoss) << c.says << ": " << message;
    EXPECT_NE(message.find(c.says), std::string::npos) << message;
    EXPECT_NE(message.find("bad.safetensors"), std::string::npos) << message;
  }
  EXPECT_EQ(open_error("").first, ErrorCode::kDataLoss);
}

std::unique_ptr<Model> tiny_llama(uint64_t seed, int64_t layers = 2) {
  LlamaConfig c;
  c.vocab = 11;
  c.seq_len = 8;
  c.d_model = 8;
  c.heads = 4;
  c.kv_heads = 2;
  c.layers = layers;
  c.mlp_hidden = 12;
  c.rope_theta = 500000.0f;
  c.norm_eps = 1e-6f;
  auto m = build_llama(c);
  for (Parameter* p : m->parameters()) {
    uint64_t x = seed + std::hash<std::string>()(p->name);
    for (int64_t i = 0; i < p->value.numel(); ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      p->value.f32()[i] = static_cast<float>(static_cast<int64_t>(x >> 40) % 2001 - 1000) / 1000.0f;
    }
  }
  return m;
}

// LlamaForCausalLM's names and shapes (modeling_llama.py): q_proj [heads hd, hidden], k_proj and
// v_proj [kv_heads hd, hidden], gate_proj and up_proj [intermediate, hidden], down_proj [hidden,
// intermediate], lm_head [vocab, hidden]; and the config fields its LlamaConfig reads.
TEST(HfLlama, NamesShapesAndConfigAreTransformers) {
  auto model = tiny_llama(1);
  const std::string dir = pftest::fresh_temp_dir("hf_export");
  export_hf_folder(*model, HfFamily::kLlama, dir);
  auto f = SafetensorsFile::open(dir + "/model.safetensors");
  std::map<std::string, Shape> shapes;
  for (const SafetensorsEntry& e : f->header().entries) shapes[e.name] = e.shape;
  std::map<std::string, Shape> expected = {{"model.embed_tokens.weight", {11, 8}}, {"model.norm.weight", {8}},
                                           {"lm_head.weight", {11, 8}}};
  for (int i = 0; i < 2; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    expected[l + "input_layernorm.weight"] = {8};
    expected[l + "post_attention_layernorm.weight"] = {8};
    expected[l + "self_attn.q_proj.weight"] = {8, 8};
    expected[l + "self_attn.k_proj.weight"] = {4, 8};
    expected[l + "self_attn.v_proj.weight"] = {4, 8};
    expected[l + "self_attn.o_proj.weight"] = {8, 8};
    expected[l + "mlp.gate_proj.weight"] = {12, 8};
    expected[l + "mlp.up_proj.weight"] = {12, 8};
    expected[l + "mlp.down_proj.weight"] = {8, 12};
  }
  EXPECT_EQ(shapes, expected);
  // k_proj is rows [8, 12) of the fused qkv, up_proj rows [12, 24) of gate_up.
  const Tensor k = f->read_f32(*f->find("model.layers.1.self_attn.k_proj.weight"));
  EXPECT_EQ(0, std::memcmp(k.f32(), model->find_parameter("blocks.1.attn.qkv.weight")->value.f32() + 8 * 8, 4 * 8 * 4));
  const Tensor up = f->read_f32(*f->find("model.layers.0.mlp.up_proj.weight"));
  EXPECT_EQ(0, std::memcmp(up.f32(), model->find_parameter("blocks.0.mlp.gate_up.weight")->value.f32() + 12 * 8, 12 * 8 * 4));
  std::ifstream in(dir + "/config.json");
  const json config = json::parse(in);
  EXPECT_EQ(config["model_type"], "llama");
  EXPECT_EQ(config["num_key_value_heads"], 2);
  EXPECT_EQ(config["intermediate_size"], 12);
  EXPECT_EQ(config["rms_norm_eps"], 1e-6);  // the shortest decimal of the f32, as Python writes it
  EXPECT_EQ(config["rope_parameters"]["rope_theta"], 500000.0);
  EXPECT_EQ(config["tie_word_embeddings"], false);
}

TEST(HfLlama, ExportThenImportIsBitwise) {
  auto model = tiny_llama(2);
  const std::string dir = pftest::fresh_temp_dir("hf_round_trip");
  export_hf_folder(*model, HfFamily::kLlama, dir);
  const json description = model_json_from_hf_folder(dir);
  auto copy = build_model_from_json(description);
  EXPECT_EQ(copy->to_json(), model->to_json());
  load_hf_weights(*copy, copy->parameters(), dir);
  for (size_t i = 0; i < model->parameters().size(); ++i) {
    const Parameter* a = model->parameters()[i];
    const Parameter* b = copy->parameters()[i];
    ASSERT_EQ(0, std::memcmp(a->value.f32(), b->value.f32(), a->value.numel() * 4)) << a->name;
  }
  // A process holding some parameters loads those only.
  auto part = tiny_llama(3);
  const std::vector<float> before = part->find_parameter("head.weight")->value.to_vector();
  load_hf_weights(*part, {part->find_parameter("norm.weight")}, dir);
  EXPECT_EQ(part->find_parameter("norm.weight")->value.to_vector(), model->find_parameter("norm.weight")->value.to_vector());
  EXPECT_EQ(part->find_parameter("head.weight")->value.to_vector(), before);
}

// Refusals name the tensor or field, and leave the parameters as they were.
TEST(HfLlama, MismatchesAreRefused) {
  auto model = tiny_llama(4);
  const std::string dir = pftest::fresh_temp_dir("hf_mismatch");
  export_hf_folder(*model, HfFamily::kLlama, dir);
  auto other = tiny_llama(5, 3);  // one layer more
  const std::vector<float> before = other->find_parameter("norm.weight")->value.to_vector();
  try {
    load_hf_weights(*other, other->parameters(), dir);
    ADD_FAILURE() << "a 2-layer folder loaded into 3 layers";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'model.layers.2.input_layernorm.weight'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(other->find_parameter("norm.weight")->value.to_vector(), before);
  auto fewer = tiny_llama(5, 1);
  try {
    load_hf_weights(*fewer, fewer->parameters(), dir);
    ADD_FAILURE() << "a 2-layer folder loaded into 1 layer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'model.layers.1."), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("has no place in the model"), std::string::npos) << e.what();
  }
  GptConfig g;
  g.vocab = 11;
  g.layers = 1;
  g.d_model = 8;
  g.heads = 2;
  try {
    export_hf_folder(*build_gpt(g), HfFamily::kLlama, dir);
    ADD_FAILURE() << "a GPT exported as a Llama";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 'embed' is a embedding"), std::string::npos) << e.what();
  }
  try {  // GPT-2's head is the token embedding: an untied GPT has no GPT-2 form
    export_hf_folder(*build_gpt(g), HfFamily::kGpt2, dir);
    ADD_FAILURE() << "an untied GPT exported as GPT-2";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not tied to the token embedding"), std::string::npos) << e.what();
  }
  auto config_error = [](const json& c) {
    try {
      model_json_from_hf_config(c, "c.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const json base = {{"model_type", "llama"}, {"vocab_size", 11}, {"hidden_size", 8}, {"intermediate_size", 12},
                     {"num_hidden_layers", 1}, {"num_attention_heads", 4}};
  EXPECT_EQ(build_model_from_json(model_json_from_hf_config(base, "c.json"))->layers().size(), 4u);
  auto with = [&](const char* key, json value) {
    json c = base;
    c[key] = std::move(value);
    return c;
  };
  EXPECT_NE(config_error(with("model_type", "mistral")).find("model_type 'mistral'"), std::string::npos);
  EXPECT_EQ(build_model_from_json(model_json_from_hf_config(with("tie_word_embeddings", true), "c.json"))
                ->tied_pairs()
                .size(),
            1u);
  EXPECT_NE(config_error(with("attention_bias", true)).find("attention_bias"), std::string::npos);
  EXPECT_NE(config_error(with("hidden_act", "gelu")).find("hidden_act 'gelu'"), std::string::npos);
  EXPECT_NE(config_error(with("head_dim", 4)).find("head_dim"), std::string::npos);
  EXPECT_NE(config_error(with("rope_scaling", json{{"rope_type", "llama3"}, {"factor", 8}})).find("'llama3'"),
            std::string::npos);
  EXPECT_NE(config_error(with("num_attention_heads", 3)).find("not divisible"), std::string::npos);
  EXPECT_NE(config_error(with("vocab_size", -1)).find("vocab_size"), std::string::npos);
  const json gpt2 = {{"model_type", "gpt2"}, {"vocab_size", 11}, {"n_positions", 8}, {"n_embd", 8}, {"n_layer", 1},
                     {"n_head", 2}};
  EXPECT_EQ(build_model_from_json(model_json_from_hf_config(gpt2, "c.json"))->tied_pairs().size(), 1u);
  auto gpt2_with = [&](const char* key, json value) {
    json c = gpt2;
    c[key] = std::move(value);
    return c;
  };
  EXPECT_NE(config_error(gpt2_with("tie_word_embeddings", false)).find("tie_word_embeddings false"), std::string::npos);
  EXPECT_NE(config_error(gpt2_with("activation_function", "relu")).find("'relu'"), std::string::npos);
  EXPECT_NE(config_error(gpt2_with("layer_norm_epsilon", 1e-6)).find("layer_norm_epsilon"), std::string::npos);
  EXPECT_NE(config_error(gpt2_with("scale_attn_by_inverse_layer_idx", true)).find("scale_attn"), std::string::npos);
  json no_vocab = base;
  no_vocab.erase("vocab_size");
  EXPECT_NE(config_error(no_vocab).find("missing required field \"vocab_size\""), std::string::npos);
}

// GPT-2: Conv1D weights transposed ([in, out]), no lm_head (tied); the round trip is bitwise, and
// the tied copy loads from transformer.wte.
TEST(HfGpt2, TransposedWeightsAndTiedHead) {
  GptConfig c;
  c.vocab = 11;
  c.seq_len = 6;
  c.d_model = 8;
  c.heads = 2;
  c.layers = 1;
  c.tie_embeddings = true;
  auto model = build_gpt(c);
  for (Parameter* p : model->parameters())
    for (int64_t i = 0; i < p->value.numel(); ++i) p->value.f32()[i] = 0.001f * static_cast<float>(i % 997) - 0.3f;
  model->find_parameter("head.weight")->value.copy_from(model->find_parameter("embed.token_weight")->value);
  const std::string dir = pftest::fresh_temp_dir("hf_gpt2");
  export_hf_folder(*model, HfFamily::kGpt2, dir);
  auto f = SafetensorsFile::open(dir + "/model.safetensors");
  EXPECT_EQ(f->find("lm_head.weight"), nullptr);
  const SafetensorsEntry* c_attn = f->find("transformer.h.0.attn.c_attn.weight");
  ASSERT_NE(c_attn, nullptr);
  EXPECT_EQ(c_attn->shape, (Shape{8, 24}));  // [in, out]
  const Tensor t = f->read_f32(*c_attn);
  const Parameter* qkv = model->find_parameter("blocks.0.attn.qkv.weight");  // [24, 8]
  EXPECT_EQ(t.f32()[3 * 24 + 17], qkv->value.f32()[17 * 8 + 3]);
  GptConfig other = c;
  auto copy = build_gpt(other);
  load_hf_weights(*copy, copy->parameters(), dir);
  for (size_t i = 0; i < model->parameters().size(); ++i)
    ASSERT_EQ(model->parameters()[i]->value.to_vector(), copy->parameters()[i]->value.to_vector())
        << model->parameters()[i]->name;
  EXPECT_EQ(model_json_from_hf_folder(dir)["tie_embeddings"], true);
}

// Transformers' sharded form: model.safetensors.index.json names a file per tensor, inside the folder.
TEST(HfLlama, ShardedFolders) {
  auto model = tiny_llama(6, 1);
  const std::string dir = pftest::fresh_temp_dir("hf_shards");
  export_hf_folder(*model, HfFamily::kLlama, dir);
  auto whole = SafetensorsFile::open(dir + "/model.safetensors");
  std::vector<Tensor> kept;
  std::vector<std::pair<std::string, const Tensor*>> first, second;
  json map;
  for (const SafetensorsEntry& e : whole->header().entries) kept.push_back(whole->read_f32(e));
  for (size_t i = 0; i < kept.size(); ++i) {
    const std::string& name = whole->header().entries[i].name;
    (i % 2 ? second : first).emplace_back(name, &kept[i]);
    map[name] = i % 2 ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
  }
  write_file(dir + "/model-00001-of-00002.safetensors", encode_safetensors(first, {}));
  write_file(dir + "/model-00002-of-00002.safetensors", encode_safetensors(second, {}));
  std::remove((dir + "/model.safetensors").c_str());
  write_file(dir + "/model.safetensors.index.json", json{{"metadata", json::object()}, {"weight_map", map}}.dump());
  auto copy = tiny_llama(7, 1);
  load_hf_weights(*copy, copy->parameters(), dir);
  for (size_t i = 0; i < model->parameters().size(); ++i)
    ASSERT_EQ(model->parameters()[i]->value.to_vector(), copy->parameters()[i]->value.to_vector());
  map["lm_head.weight"] = "../elsewhere.safetensors";
  write_file(dir + "/model.safetensors.index.json", json{{"weight_map", map}}.dump());
  try {
    load_hf_weights(*copy, copy->parameters(), dir);
    ADD_FAILURE() << "a shard outside the folder was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'../elsewhere.safetensors', which is not a file inside the folder"),
              std::string::npos)
        << e.what();
  }
  std::remove((dir + "/model.safetensors.index.json").c_str());
  try {
    load_hf_weights(*copy, copy->parameters(), dir);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
}

}  // namespace
}  // namespace pf

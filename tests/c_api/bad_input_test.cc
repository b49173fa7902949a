// Every exported function against bad input: NULL handles and out-params, wrong shapes and dtypes,
// malformed JSON, unknown fields and layers, struct_size mistakes. Each must return the right code
// and a message naming the problem, leave out-params untouched, and leak nothing (this binary runs
// under AddressSanitizer's leak checker).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "c_api/pipeforge.h"
#include "runtime/core/log.h"
#include "tests/c_api/test_util.h"

namespace {

using pftest::kClasses;
using pftest::kFeatures;
using pftest::MakeMlp;
using pftest::MakeRows;
using pftest::Options;
using pftest::Rows;
using pftest::Views;

pf_model* const kModelSentinel = reinterpret_cast<pf_model*>(uintptr_t{0x5eed});
pf_trainer* const kTrainerSentinel = reinterpret_cast<pf_trainer*>(uintptr_t{0x5eed});
pf_model_builder* const kBuilderSentinel = reinterpret_cast<pf_model_builder*>(uintptr_t{0x5eed});
const char* const kStringSentinel = "untouched";

// A model and a trainer on it, created and destroyed per test.
class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = MakeMlp();
    ASSERT_NE(model_, nullptr);
    const pf_trainer_options options = Options();
    ASSERT_PF_OK(pf_trainer_create(model_, &options, &trainer_));
  }
  void TearDown() override {
    pf_trainer_destroy(trainer_);
    pf_model_destroy(model_);
  }
  // Asserts a failed call left the trainer as it was.
  void ExpectUnchanged(const std::string& checksum) {
    EXPECT_EQ(pftest::Checksum(trainer_), checksum);
    pf_metrics metrics{};
    metrics.struct_size = sizeof(metrics);
    EXPECT_PF_OK(pf_trainer_get_metrics(trainer_, &metrics));
    EXPECT_EQ(metrics.step, 0);
    EXPECT_EQ(metrics.data_position, 0);
  }

  pf_model* model_ = nullptr;
  pf_trainer* trainer_ = nullptr;
};

// ---- version and status -------------------------------------------------------------------------

TEST(Version, MatchesHeader) {
  EXPECT_EQ(pf_get_abi_version(), static_cast<uint32_t>(PF_ABI_VERSION));
  EXPECT_STREQ(pf_get_version_string(), PF_VERSION_STRING);
  EXPECT_STREQ(pf_get_version_string(), "0.19.0");
  EXPECT_EQ(PF_VERSION_MAJOR, 0);
  EXPECT_EQ(PF_VERSION_MINOR, 19);
  EXPECT_EQ(PF_VERSION_PATCH, 0);
  EXPECT_EQ(PF_ABI_VERSION, 1);
}

TEST(Status, NullIsOk) {
  EXPECT_EQ(pf_status_code(nullptr), PF_OK);
  EXPECT_STREQ(pf_status_message(nullptr), "");
  pf_status_destroy(nullptr);
}

TEST(Status, CreateAndRead) {
  EXPECT_EQ(pf_status_create(PF_OK, "ignored"), nullptr);
  pf_status* status = pf_status_create(PF_IO_ERROR, "disk on fire");
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(pf_status_code(status), PF_IO_ERROR);
  EXPECT_STREQ(pf_status_message(status), "disk on fire");
  pf_status_destroy(status);
  status = pf_status_create(PF_INTERNAL, nullptr);
  EXPECT_STREQ(pf_status_message(status), "");
  pf_status_destroy(status);
}

TEST(Status, CodeNames) {
  EXPECT_STREQ(pf_code_name(PF_OK), "OK");
  EXPECT_STREQ(pf_code_name(PF_INVALID_ARGUMENT), "INVALID_ARGUMENT");
  EXPECT_STREQ(pf_code_name(PF_CALLBACK_ERROR), "CALLBACK_ERROR");
  EXPECT_STREQ(pf_code_name(PF_INTERNAL), "INTERNAL");
  EXPECT_STREQ(pf_code_name(static_cast<pf_code>(16)), "UNKNOWN");
  EXPECT_STREQ(pf_code_name(static_cast<pf_code>(1000)), "UNKNOWN");
}

TEST(Status, CodesMirrorRuntime) {
  // The values are part of the ABI.
  EXPECT_EQ(PF_FAILED_PRECONDITION, 2);
  EXPECT_EQ(PF_OUT_OF_MEMORY, 3);
  EXPECT_EQ(PF_NOT_FOUND, 4);
  EXPECT_EQ(PF_DATA_LOSS, 6);
  EXPECT_EQ(PF_CALLBACK_ERROR, 11);
  EXPECT_EQ(PF_UNIMPLEMENTED, 14);
  EXPECT_EQ(PF_INTERNAL, 15);
}

// ---- destroy(NULL) ------------------------------------------------------------------------------

TEST(Destroy, NullIsNoOp) {
  pf_status_destroy(nullptr);
  pf_model_destroy(nullptr);
  pf_model_builder_destroy(nullptr);
  pf_trainer_destroy(nullptr);
  pf_mlp_config_init(nullptr);
  pf_gpt_config_init(nullptr);
  pf_trainer_options_init(nullptr);
}

// ---- pf_model_create_from_json ------------------------------------------------------------------

TEST(ModelFromJson, NullArguments) {
  pf_model* model = kModelSentinel;
  EXPECT_PF_ERROR(pf_model_create_from_json(nullptr, &model), PF_INVALID_ARGUMENT,
                  "pf_model_create_from_json", "argument 'json' is NULL");
  EXPECT_EQ(model, kModelSentinel);
  EXPECT_PF_ERROR(pf_model_create_from_json("{\"preset\": \"mlp\"}", nullptr), PF_INVALID_ARGUMENT,
                  "argument 'out' is NULL");
}

TEST(ModelFromHf, NullAndEmptyArguments) {
  pf_model* model = kModelSentinel;
  EXPECT_PF_ERROR(pf_model_create_from_hf(nullptr, &model), PF_INVALID_ARGUMENT, "pf_model_create_from_hf",
                  "argument 'dir' is NULL");
  EXPECT_PF_ERROR(pf_model_create_from_hf("", &model), PF_INVALID_ARGUMENT, "argument 'dir' is empty");
  EXPECT_PF_ERROR(pf_model_create_from_hf("/nonexistent", nullptr), PF_INVALID_ARGUMENT, "argument 'out' is NULL");
  EXPECT_EQ(model, kModelSentinel);
}

TEST(ModelFromJson, MalformedJson) {
  pf_model* model = kModelSentinel;
  EXPECT_PF_ERROR(pf_model_create_from_json("{\"preset\": ", &model), PF_INVALID_ARGUMENT, "malformed");
  EXPECT_PF_ERROR(pf_model_create_from_json("", &model), PF_INVALID_ARGUMENT, "malformed");
  EXPECT_PF_ERROR(pf_model_create_from_json("[1, 2]", &model), PF_INVALID_ARGUMENT, "expected a JSON object");
  EXPECT_EQ(model, kModelSentinel);
}

TEST(ModelFromJson, UnknownFields) {
  pf_model* model = kModelSentinel;
  EXPECT_PF_ERROR(pf_model_create_from_json("{\"preset\": \"mlp\", \"colour\": 3}", &model),
                  PF_INVALID_ARGUMENT, "colour");
  EXPECT_PF_ERROR(pf_model_create_from_json(
                      R"({"input": {"kind": "features", "features": 4, "classes": 2},
                          "layers": [{"type": "linear", "in": 4, "out": 2, "colour": 1}]})",
                      &model),
                  PF_INVALID_ARGUMENT, "layers[0]", "colour");
  EXPECT_PF_ERROR(pf_model_create_from_json(
                      R"({"input": {"kind": "features", "features": 4, "classes": 2, "extra": 1},
                          "layers": [{"type": "linear", "in": 4, "out": 2}]})",
                      &model),
                  PF_INVALID_ARGUMENT, "input", "extra");
  EXPECT_EQ(model, kModelSentinel);
}

TEST(ModelFromJson, UnknownLayerAndPreset) {
  pf_model* model = kModelSentinel;
  EXPECT_PF_ERROR(pf_model_create_from_json(
                      R"({"input": {"kind": "features", "features": 4, "classes": 2},
                          "layers": [{"type": "linear", "in": 4, "out": 2}, {"type": "frobnicate"}]})",
                      &model),
                  PF_INVALID_ARGUMENT, "layers[1]", "frobnicate");
  EXPECT_PF_ERROR(pf_model_create_from_json("{\"preset\": \"densenet\"}", &model), PF_INVALID_ARGUMENT,
                  "densenet");
  EXPECT_PF_ERROR(pf_model_create_from_json(
                      R"({"input": {"kind": "features", "features": -4, "classes": 2},
                          "layers": [{"type": "relu"}]})",
                      &model),
                  PF_INVALID_ARGUMENT, "features");
  EXPECT_EQ(model, kModelSentinel);
}

TEST(ModelFromJson, RoundTripsThroughToJson) {
  pf_model* model = nullptr;
  ASSERT_PF_OK(pf_model_create_from_json("{\"preset\": \"mlp\", \"input_dim\": 4, \"hidden\": [8]}", &model));
  const char* json = nullptr;
  ASSERT_PF_OK(pf_model_to_json(model, &json));
  const std::string text = json;
  EXPECT_NE(text.find("pipeforge.model/1"), std::string::npos) << text;
  pf_model* copy = nullptr;
  ASSERT_PF_OK(pf_model_create_from_json(text.c_str(), &copy));
  const char* copy_json = nullptr;
  ASSERT_PF_OK(pf_model_to_json(copy, &copy_json));
  EXPECT_EQ(text, copy_json);
  pf_model_destroy(copy);
  pf_model_destroy(model);
}

// ---- presets ------------------------------------------------------------------------------------

TEST(MlpPreset, NullArguments) {
  pf_mlp_config config;
  pf_mlp_config_init(&config);
  pf_model* model = kModelSentinel;
  EXPECT_PF_ERROR(pf_model_create_mlp(nullptr, &model), PF_INVALID_ARGUMENT, "pf_model_create_mlp",
                  "argument 'config' is NULL");
  EXPECT_PF_ERROR(pf_model_create_mlp(&config, nullptr), PF_INVALID_ARGUMENT, "argument 'out' is NULL");
  EXPECT_EQ(model, kModelSentinel);
}

TEST(MlpPreset, StructSizeTooSmall) {
  pf_mlp_config config;
  pf_mlp_config_init(&config);
  pf_model* model = kModelSentinel;
  for (uint32_t size : {0u, 4u, static_cast<uint32_t>(sizeof(config) - 8)}) {
    config.struct_size = size;
    EXPECT_PF_ERROR(pf_model_create_mlp(&config, &model), PF_INVALID_ARGUMENT, "struct_size",
                    "pf_mlp_config");
  }
  EXPECT_EQ(model, kModelSentinel);
}

TEST(MlpPreset, NewerStructNeedsZeroTail) {
  // A caller compiled against a newer header: extra fields this library does not know.
  struct Newer {
    pf_mlp_config v1;
    int64_t future_field;
  } newer;
  std::memset(&newer, 0, sizeof(newer));
  pf_mlp_config_init(&newer.v1);
  newer.v1.struct_size = sizeof(newer);
  newer.future_field = 5;
  pf_model* model = kModelSentinel;
  EXPECT_PF_ERROR(pf_model_create_mlp(&newer.v1, &model), PF_INVALID_ARGUMENT, "struct_size", "older");
  EXPECT_EQ(model, kModelSentinel);
  newer.future_field = 0;
  ASSERT_PF_OK(pf_model_create_mlp(&newer.v1, &model));
  pf_model_destroy(model);
}

TEST(MlpPreset, BadFields) {
  pf_mlp_config config;
  pf_mlp_config_init(&config);
  pf_model* model = kModelSentinel;
  config.hidden = nullptr;
  config.num_hidden = 2;
  EXPECT_PF_ERROR(pf_model_create_mlp(&config, &model), PF_INVALID_ARGUMENT, "hidden is NULL");
  pf_mlp_config_init(&config);
  config.activation = nullptr;
  EXPECT_PF_ERROR(pf_model_create_mlp(&config, &model), PF_INVALID_ARGUMENT, "activation is NULL");
  config.activation = "tanh";
  EXPECT_PF_ERROR(pf_model_create_mlp(&config, &model), PF_INVALID_ARGUMENT, "activation", "tanh");
  pf_mlp_config_init(&config);
  config.input_dim = 0;
  EXPECT_PF_ERROR(pf_model_create_mlp(&config, &model), PF_INVALID_ARGUMENT, "input_dim");
  pf_mlp_config_init(&config);
  const int64_t hidden[] = {8, -1};
  config.hidden = hidden;
  EXPECT_PF_ERROR(pf_model_create_mlp(&config, &model), PF_INVALID_ARGUMENT, "hidden[1]");
  EXPECT_EQ(model, kModelSentinel);
}

TEST(MlpPreset, Defaults) {
  pf_mlp_config config;
  pf_mlp_config_init(&config);
  EXPECT_EQ(config.struct_size, sizeof(config));
  EXPECT_EQ(config.input_dim, 32);
  ASSERT_EQ(config.num_hidden, 2u);
  EXPECT_EQ(config.hidden[0], 64);
  EXPECT_STREQ(config.activation, "relu");
  pf_model* model = nullptr;
  ASSERT_PF_OK(pf_model_create_mlp(&config, &model));
  size_t count = 0;
  ASSERT_PF_OK(pf_model_num_parameters(model, &count));
  EXPECT_EQ(count, 6u);  // fc0, fc1, head: weight and bias each
  const char* name = nullptr;
  ASSERT_PF_OK(pf_model_parameter_name(model, 0, &name));
  EXPECT_STREQ(name, "fc0.weight");
  int64_t elements = 0;
  ASSERT_PF_OK(pf_model_num_parameter_elements(model, &elements));
  EXPECT_EQ(elements, 32 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10);
  pf_model_destroy(model);
}

TEST(GptPreset, BadArguments) {
  pf_gpt_config config;
  pf_gpt_config_init(&config);
  pf_model* model = kModelSentinel;
  EXPECT_PF_ERROR(pf_model_create_gpt(nullptr, &model), PF_INVALID_ARGUMENT, "argument 'config' is NULL");
  EXPECT_PF_ERROR(pf_model_create_gpt(&config, nullptr), PF_INVALID_ARGUMENT, "argument 'out' is NULL");
  config.struct_size = 8;
  EXPECT_PF_ERROR(pf_model_create_gpt(&config, &model), PF_INVALID_ARGUMENT, "struct_size", "pf_gpt_config");
  pf_gpt_config_init(&config);
  config.heads = 5;
  EXPECT_PF_ERROR(pf_model_create_gpt(&config, &model), PF_INVALID_ARGUMENT, "heads");
  pf_gpt_config_init(&config);
  config.vocab = 0;
  EXPECT_PF_ERROR(pf_model_create_gpt(&config, &model), PF_INVALID_ARGUMENT, "vocab");
  EXPECT_EQ(model, kModelSentinel);
}

TEST(GptPreset, Builds) {
  pf_gpt_config config;
  pf_gpt_config_init(&config);
  config.vocab = 16;
  config.seq_len = 8;
  config.d_model = 16;
  config.heads = 2;
  config.layers = 1;
  pf_model* model = nullptr;
  ASSERT_PF_OK(pf_model_create_gpt(&config, &model));
  const char* name = nullptr;
  ASSERT_PF_OK(pf_model_parameter_name(model, 0, &name));
  EXPECT_EQ(std::string(name).rfind("embed", 0), 0u) << name;
  pf_model_destroy(model);
}

// ---- model queries ------------------------------------------------------------------------------

TEST(ModelQueries, BadArguments) {
  pf_model* model = MakeMlp();
  const char* text = kStringSentinel;
  size_t count = 777;
  int64_t elements = 777;
  EXPECT_PF_ERROR(pf_model_to_json(nullptr, &text), PF_INVALID_ARGUMENT, "pf_model_to_json", "'model'");
  EXPECT_PF_ERROR(pf_model_to_json(model, nullptr), PF_INVALID_ARGUMENT, "'out'");
  EXPECT_PF_ERROR(pf_model_num_parameters(nullptr, &count), PF_INVALID_ARGUMENT, "'model'");
  EXPECT_PF_ERROR(pf_model_num_parameters(model, nullptr), PF_INVALID_ARGUMENT, "'out'");
  EXPECT_PF_ERROR(pf_model_num_parameter_elements(nullptr, &elements), PF_INVALID_ARGUMENT, "'model'");
  EXPECT_PF_ERROR(pf_model_num_parameter_elements(model, nullptr), PF_INVALID_ARGUMENT, "'out'");
  EXPECT_PF_ERROR(pf_model_parameter_name(nullptr, 0, &text), PF_INVALID_ARGUMENT, "'model'");
  EXPECT_PF_ERROR(pf_model_parameter_name(model, 0, nullptr), PF_INVALID_ARGUMENT, "'out'");
  EXPECT_PF_ERROR(pf_model_parameter_name(model, 4, &text), PF_INVALID_ARGUMENT, "index 4", "4 parameters");
  EXPECT_EQ(text, kStringSentinel);
  EXPECT_EQ(count, 777u);
  EXPECT_EQ(elements, 777);
  pf_model_destroy(model);
}

// ---- builder ------------------------------------------------------------------------------------

TEST(Builder, NullArguments) {
  EXPECT_PF_ERROR(pf_model_builder_create(nullptr), PF_INVALID_ARGUMENT, "pf_model_builder_create", "'out'");
  EXPECT_PF_ERROR(pf_model_builder_set_input_features(nullptr, 4, 2), PF_INVALID_ARGUMENT, "'builder'");
  EXPECT_PF_ERROR(pf_model_builder_set_input_tokens(nullptr, 4, 4, 4), PF_INVALID_ARGUMENT, "'builder'");
  EXPECT_PF_ERROR(pf_model_builder_add_layer(nullptr, "relu", nullptr), PF_INVALID_ARGUMENT, "'builder'");
  EXPECT_PF_ERROR(pf_model_builder_set_loss(nullptr, "cross_entropy"), PF_INVALID_ARGUMENT, "'builder'");
  pf_model* model = kModelSentinel;
  EXPECT_PF_ERROR(pf_model_builder_build(nullptr, &model), PF_INVALID_ARGUMENT, "'builder'");
  EXPECT_EQ(model, kModelSentinel);

  pf_model_builder* builder = nullptr;
  ASSERT_PF_OK(pf_model_builder_create(&builder));
  EXPECT_PF_ERROR(pf_model_builder_add_layer(builder, nullptr, nullptr), PF_INVALID_ARGUMENT, "'type' is NULL");
  EXPECT_PF_ERROR(pf_model_builder_add_layer(builder, "", nullptr), PF_INVALID_ARGUMENT, "'type' is empty");
  EXPECT_PF_ERROR(pf_model_builder_set_loss(builder, nullptr), PF_INVALID_ARGUMENT, "'loss' is NULL");
  EXPECT_PF_ERROR(pf_model_builder_build(builder, nullptr), PF_INVALID_ARGUMENT, "'out'");
  pf_model_builder_destroy(builder);
}

TEST(Builder, BadValues) {
  pf_model_builder* builder = kBuilderSentinel;
  ASSERT_PF_OK(pf_model_builder_create(&builder));
  ASSERT_NE(builder, kBuilderSentinel);
  EXPECT_PF_ERROR(pf_model_builder_set_input_features(builder, 0, 2), PF_INVALID_ARGUMENT, "'features'", "> 0");
  EXPECT_PF_ERROR(pf_model_builder_set_input_features(builder, 4, -2), PF_INVALID_ARGUMENT, "'classes'");
  EXPECT_PF_ERROR(pf_model_builder_set_input_tokens(builder, 0, 4, 4), PF_INVALID_ARGUMENT, "'vocab'");
  EXPECT_PF_ERROR(pf_model_builder_set_input_tokens(builder, 4, 0, 4), PF_INVALID_ARGUMENT, "'seq_len'");
  EXPECT_PF_ERROR(pf_model_builder_add_layer(builder, "linear", "{\"in\": 4,"), PF_INVALID_ARGUMENT,
                  "options_json", "malformed");
  EXPECT_PF_ERROR(pf_model_builder_add_layer(builder, "linear", "[4]"), PF_INVALID_ARGUMENT, "options_json",
                  "expected a JSON object");
  EXPECT_PF_ERROR(pf_model_builder_add_layer(builder, "linear", "{\"type\": \"relu\"}"), PF_INVALID_ARGUMENT,
                  "options_json", "\"type\"");
  pf_model* model = kModelSentinel;
  EXPECT_PF_ERROR(pf_model_builder_build(builder, &model), PF_FAILED_PRECONDITION, "no input set");
  EXPECT_EQ(model, kModelSentinel);
  pf_model_builder_destroy(builder);
}

TEST(Builder, ErrorsFromTheModelJsonNameTheLayer) {
  pf_model_builder* builder = nullptr;
  ASSERT_PF_OK(pf_model_builder_create(&builder));
  ASSERT_PF_OK(pf_model_builder_set_input_features(builder, 4, 2));
  pf_model* model = kModelSentinel;
  EXPECT_PF_ERROR(pf_model_builder_build(builder, &model), PF_INVALID_ARGUMENT, "layers");
  ASSERT_PF_OK(pf_model_builder_add_layer(builder, "linear", "{\"in\": 4, \"out\": 8}"));
  ASSERT_PF_OK(pf_model_builder_add_layer(builder, "wormhole", nullptr));
  EXPECT_PF_ERROR(pf_model_builder_build(builder, &model), PF_INVALID_ARGUMENT, "layers[1]", "wormhole");
  pf_model_builder_destroy(builder);

  ASSERT_PF_OK(pf_model_builder_create(&builder));
  ASSERT_PF_OK(pf_model_builder_set_input_features(builder, 4, 2));
  ASSERT_PF_OK(pf_model_builder_add_layer(builder, "linear", "{\"in\": 4, \"out\": 2, \"colour\": 1}"));
  EXPECT_PF_ERROR(pf_model_builder_build(builder, &model), PF_INVALID_ARGUMENT, "layers[0]", "colour");
  pf_model_builder_destroy(builder);

  ASSERT_PF_OK(pf_model_builder_create(&builder));
  ASSERT_PF_OK(pf_model_builder_set_input_features(builder, 4, 2));
  ASSERT_PF_OK(pf_model_builder_add_layer(builder, "linear", "{\"in\": 4, \"out\": 2}"));
  ASSERT_PF_OK(pf_model_builder_set_loss(builder, "hinge"));
  EXPECT_PF_ERROR(pf_model_builder_build(builder, &model), PF_INVALID_ARGUMENT, "loss", "hinge");
  EXPECT_EQ(model, kModelSentinel);
  pf_model_builder_destroy(builder);
}

TEST(Builder, BuildsAndStaysUsable) {
  pf_model_builder* builder = nullptr;
  ASSERT_PF_OK(pf_model_builder_create(&builder));
  ASSERT_PF_OK(pf_model_builder_set_input_features(builder, kFeatures, kClasses));
  ASSERT_PF_OK(pf_model_builder_add_layer(builder, "linear", "{\"name\": \"fc\", \"in\": 8, \"out\": 16}"));
  ASSERT_PF_OK(pf_model_builder_add_layer(builder, "gelu", nullptr));
  ASSERT_PF_OK(pf_model_builder_add_layer(builder, "linear", "{\"name\": \"out\", \"in\": 16, \"out\": 4}"));
  pf_model* a = nullptr;
  pf_model* b = nullptr;
  ASSERT_PF_OK(pf_model_builder_build(builder, &a));
  ASSERT_PF_OK(pf_model_builder_build(builder, &b));
  pf_model_builder_destroy(builder);
  const char* name = nullptr;
  ASSERT_PF_OK(pf_model_parameter_name(a, 0, &name));
  EXPECT_STREQ(name, "fc.weight");
  const char* json_a = nullptr;
  const char* json_b = nullptr;
  ASSERT_PF_OK(pf_model_to_json(a, &json_a));
  ASSERT_PF_OK(pf_model_to_json(b, &json_b));
  EXPECT_STREQ(json_a, json_b);
  pf_model_destroy(a);
  pf_model_destroy(b);
}

// ---- logging ------------------------------------------------------------------------------------

struct SinkState {
  std::vector<std::string> messages;
  int destroyed = 0;
};

void SinkLog(void* user_data, pf_log_level level, const char* message) {
  static_cast<SinkState*>(user_data)->messages.push_back(std::to_string(level) + ":" + message);
}
void SinkDestroy(void* user_data) { static_cast<SinkState*>(user_data)->destroyed += 1; }

TEST(LogSink, BadArguments) {
  SinkState state;
  pf_log_sink sink{sizeof(pf_log_sink), &state, SinkLog, SinkDestroy};
  sink.struct_size = 4;
  EXPECT_PF_ERROR(pf_set_log_sink(&sink, PF_LOG_INFO), PF_INVALID_ARGUMENT, "pf_set_log_sink", "struct_size");
  sink.struct_size = sizeof(pf_log_sink);
  sink.log = nullptr;
  EXPECT_PF_ERROR(pf_set_log_sink(&sink, PF_LOG_INFO), PF_INVALID_ARGUMENT, "sink->log is NULL");
  sink.log = SinkLog;
  EXPECT_PF_ERROR(pf_set_log_sink(&sink, static_cast<pf_log_level>(9)), PF_INVALID_ARGUMENT, "min_level 9");
  EXPECT_EQ(state.destroyed, 0);  // on error the caller keeps user_data
}

TEST(LogSink, DeliversAndIsDestroyedWhenReplaced) {
  SinkState state;
  const pf_log_sink sink{sizeof(pf_log_sink), &state, SinkLog, SinkDestroy};
  ASSERT_PF_OK(pf_set_log_sink(&sink, PF_LOG_INFO));
  pf::log(pf::LogLevel::kDebug, "dropped");
  pf::log(pf::LogLevel::kWarning, "kept");
  ASSERT_EQ(state.messages.size(), 1u);
  EXPECT_EQ(state.messages[0], "2:kept");
  EXPECT_EQ(state.destroyed, 0);
  ASSERT_PF_OK(pf_set_log_sink(nullptr, PF_LOG_WARNING));
  EXPECT_EQ(state.destroyed, 1);
}

// ---- trainer creation ---------------------------------------------------------------------------

TEST(TrainerCreate, BadArguments) {
  pf_model* model = MakeMlp();
  pf_trainer_options options = Options();
  pf_trainer* trainer = kTrainerSentinel;
  EXPECT_PF_ERROR(pf_trainer_create(nullptr, &options, &trainer), PF_INVALID_ARGUMENT, "pf_trainer_create",
                  "'model'");
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, nullptr), PF_INVALID_ARGUMENT, "'out'");
  options.struct_size = 12;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &trainer), PF_INVALID_ARGUMENT, "options->struct_size is 12",
                  "pf_trainer_options");
  // An unset struct_size (all ones) is refused before a byte past the struct is read (it read up
  // to 4 GiB of the caller's memory); so is one past the cap on every struct's growth.
  options.struct_size = 0xFFFFFFFFu;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &trainer), PF_INVALID_ARGUMENT,
                  "options->struct_size is 4294967295, larger than any version of pf_trainer_options will be (at "
                  "most 4096 bytes)");
  options.struct_size = 4097;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &trainer), PF_INVALID_ARGUMENT, "options->struct_size is 4097");
  options = Options();
  options.optimizer = 7;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &trainer), PF_INVALID_ARGUMENT, "options->optimizer");
  options = Options();
  options.micro_batches = -1;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &trainer), PF_INVALID_ARGUMENT,
                  "options->micro_batches is -1: expected m >= 1");
  options = Options();
  options.lr = -1.0f;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &trainer), PF_INVALID_ARGUMENT, "lr");
  options = Options();
  options.beta1 = 1.5f;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &trainer), PF_INVALID_ARGUMENT, "beta1");
  EXPECT_EQ(trainer, kTrainerSentinel);
  pf_model_destroy(model);
}

TEST(TrainerCreate, OneLiveTrainerPerModel) {
  pf_model* model = MakeMlp();
  pf_trainer* first = nullptr;
  ASSERT_PF_OK(pf_trainer_create(model, nullptr, &first));  // NULL options = defaults
  pf_trainer* second = kTrainerSentinel;
  EXPECT_PF_ERROR(pf_trainer_create(model, nullptr, &second), PF_FAILED_PRECONDITION, "another trainer");
  EXPECT_EQ(second, kTrainerSentinel);
  pf_trainer_destroy(first);
  ASSERT_PF_OK(pf_trainer_create(model, nullptr, &second));
  pf_trainer_destroy(second);
  pf_model_destroy(model);
}

TEST(TrainerCreate, ModelHandleMayGoFirst) {
  pf_model* model = MakeMlp();
  pf_trainer* trainer = nullptr;
  const pf_trainer_options options = Options();
  ASSERT_PF_OK(pf_trainer_create(model, &options, &trainer));
  pf_model_destroy(model);
  Rows rows = MakeRows(0, 8);
  Views views(rows);
  EXPECT_PF_OK(pf_trainer_step(trainer, &views.inputs, &views.targets, nullptr));
  pf_trainer_destroy(trainer);
}

TEST(TrainerOptions, Defaults) {
  pf_trainer_options options;
  std::memset(&options, 0xab, sizeof(options));
  pf_trainer_options_init(&options);
  EXPECT_EQ(options.struct_size, sizeof(options));
  EXPECT_EQ(options.micro_batches, 0);  // the default: 1, or 2 x the pipeline ranks with a schedule
  EXPECT_EQ(options.blas_threads, 1);
  EXPECT_EQ(options.optimizer, PF_OPTIMIZER_ADAMW);
  EXPECT_FLOAT_EQ(options.lr, 1e-3f);
  EXPECT_FLOAT_EQ(options.beta2, 0.999f);
  EXPECT_EQ(options.clip_norm, 0.0f);
  EXPECT_EQ(options.stages, 1);
  // Since 0.3.
  EXPECT_EQ(options.processes, PF_PROCESSES_AUTO);
  EXPECT_EQ(options.data_parallel, 1);
  EXPECT_EQ(options.gradient_reduction, nullptr);
  EXPECT_EQ(options.ranks, 0);
}

// ---- pf_trainer_step ----------------------------------------------------------------------------

TEST_F(TrainerTest, StepNullArguments) {
  Rows rows = MakeRows(0, 8);
  Views v(rows);
  const std::string before = pftest::Checksum(trainer_);
  EXPECT_PF_ERROR(pf_trainer_step(nullptr, &v.inputs, &v.targets, nullptr), PF_INVALID_ARGUMENT,
                  "pf_trainer_step: argument 'trainer' is NULL");
  EXPECT_PF_ERROR(pf_trainer_step(trainer_, nullptr, &v.targets, nullptr), PF_INVALID_ARGUMENT,
                  "pf_trainer_step: argument 'inputs' is NULL");
  EXPECT_PF_ERROR(pf_trainer_step(trainer_, &v.inputs, nullptr, nullptr), PF_INVALID_ARGUMENT,
                  "pf_trainer_step: argument 'targets' is NULL");
  ExpectUnchanged(before);
}

TEST_F(TrainerTest, StepWrongShapesAndDtypes) {
  Rows rows = MakeRows(0, 8);
  const std::string before = pftest::Checksum(trainer_);
  pf_step_result result;
  std::memset(&result, 0x5a, sizeof(result));
  result.struct_size = sizeof(result);
  const pf_step_result untouched = result;
  {
    Views v(rows);
    v.targets.dtype = PF_DTYPE_F32;
    EXPECT_PF_ERROR(pf_trainer_step(trainer_, &v.inputs, &v.targets, &result), PF_INVALID_ARGUMENT, "targets",
                    "expected i32 [8]", "got f32 [8]");
  }
  {
    Views v(rows);
    v.inputs.dtype = PF_DTYPE_I32;
    EXPECT_PF_ERROR(pf_trainer_step(trainer_, &v.inputs, &v.targets, &result), PF_INVALID_ARGUMENT, "inputs",
                    "expected f32", "got i32 [8, 8]");
  }
  {
    Views v(rows);
    v.input_shape[0] = 4;
    v.input_shape[1] = 16;
    EXPECT_PF_ERROR(pf_trainer_step(trainer_, &v.inputs, &v.targets, &result), PF_INVALID_ARGUMENT, "inputs",
                    "[4, 16]");
  }
  {
    Views v(rows);
    v.target_shape[0] = 4;
    EXPECT_PF_ERROR(pf_trainer_step(trainer_, &v.inputs, &v.targets, &result), PF_INVALID_ARGUMENT, "targets",
                    "got i32 [4]");
  }
  {
    Rows odd = MakeRows(0, 7);  // 7 rows do not split into 2 micro-batches
    Views v(odd);
    EXPECT_PF_ERROR(pf_trainer_step(trainer_, &v.inputs, &v.targets, &result), PF_INVALID_ARGUMENT, "7 rows",
                    "micro_batches");
  }
  {
    Rows bad = MakeRows(0, 8);
    bad.targets[3] = kClasses;
    Views v(bad);
    EXPECT_PF_ERROR(pf_trainer_step(trainer_, &v.inputs, &v.targets, &result), PF_INVALID_ARGUMENT, "targets",
                    "class 4");
  }
  EXPECT_EQ(std::memcmp(&result, &untouched, sizeof(result)), 0);
  ExpectUnchanged(before);
}

TEST_F(TrainerTest, StepBadViews) {
  Rows rows = MakeRows(0, 8);
  const std::string before = pftest::Checksum(trainer_);
  {
    Views v(rows);
    v.inputs.dtype = 42;
    EXPECT_PF_ERROR(pf_trainer_step(trainer_, &v.inputs, &v.targets, nullptr), PF_INVALID_ARGUMENT,
                    "inputs: dtype 42 is not a pf_dtype");
  }
  {
    Views v(rows);
    v.targets.ndim = 0;
    EXPECT_PF_ERROR(pf_trainer_step(trainer_, &v.inputs, &v.targets, nullptr), PF_INVALID_ARGUMENT,
                    "targets: ndim must be in [1, 8], got 0");
    v.targets.ndim = 9;
    EXPECT_PF_ERROR(pf_trainer_step(trainer_, &v.inputs, &v.targets, nullptr), PF_INVALID_ARGUMENT,
                    "targets: ndim");
  }
  {
    Views v(rows);
    v.inputs.shape = nullptr;
    EXPECT_PF_ERROR(pf_trainer_step(trainer_, &v.inputs, &v.targets, nullptr), PF_INVALID_ARGUMENT,
                    "inputs: shape is NULL");
  }
  {
    Views v(rows);
    v.input_shape[1] = -8;
    EXPECT_PF_ERROR(pf_trainer_step(trainer_, &v.inputs, &v.targets, nullptr), PF_INVALID_ARGUMENT,
                    "inputs: shape[1] is negative");
  }
  {
    Views v(rows);
    v.input_shape[0] = int64_t{1} << 40;
    v.input_shape[1] = int64_t{1} << 40;
    EXPECT_PF_ERROR(pf_trainer_step(trainer_, &v.inputs, &v.targets, nullptr), PF_INVALID_ARGUMENT,
                    "too many elements");
  }
  {
    Views v(rows);
    v.inputs.data = nullptr;
    EXPECT_PF_ERROR(pf_trainer_step(trainer_, &v.inputs, &v.targets, nullptr), PF_INVALID_ARGUMENT,
                    "inputs: data is NULL");
  }
  {
    Views v(rows);
    const int64_t strides[] = {1, 8};  // column-major
    v.inputs.strides = strides;
    EXPECT_PF_ERROR(pf_trainer_step(trainer_, &v.inputs, &v.targets, nullptr), PF_INVALID_ARGUMENT,
                    "inputs: strides [1, 8]", "contiguous");
  }
  {
    Views v(rows);
    v.targets.device_kind = PF_DEVICE_CUDA;
    EXPECT_PF_ERROR(pf_trainer_step(trainer_, &v.inputs, &v.targets, nullptr), PF_UNIMPLEMENTED,
                    "targets: device cuda:0", "CPU only");
    v.targets.device_kind = 5;
    EXPECT_PF_ERROR(pf_trainer_step(trainer_, &v.inputs, &v.targets, nullptr), PF_INVALID_ARGUMENT,
                    "device_kind 5");
    v.targets.device_kind = PF_DEVICE_CPU;
    v.targets.device_ordinal = 1;
    EXPECT_PF_ERROR(pf_trainer_step(trainer_, &v.inputs, &v.targets, nullptr), PF_INVALID_ARGUMENT,
                    "device_ordinal");
  }
  {
    Views v(rows);
    v.input_shape[0] = 0;
    v.target_shape[0] = 0;
    EXPECT_PF_ERROR(pf_trainer_step(trainer_, &v.inputs, &v.targets, nullptr), PF_INVALID_ARGUMENT,
                    "at least one row");
  }
  ExpectUnchanged(before);
}

TEST(TokenModel, StepChecksTokenIds) {
  pf_gpt_config config;
  pf_gpt_config_init(&config);
  config.vocab = 16;
  config.seq_len = 8;
  config.d_model = 16;
  config.heads = 2;
  config.layers = 1;
  pf_model* model = nullptr;
  ASSERT_PF_OK(pf_model_create_gpt(&config, &model));
  pf_trainer* trainer = nullptr;
  ASSERT_PF_OK(pf_trainer_create(model, nullptr, &trainer));
  std::vector<int32_t> tokens(2 * 8);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i % 16);
  const int64_t shape[2] = {2, 8};
  pf_tensor_view inputs{tokens.data(), PF_DTYPE_I32, PF_DEVICE_CPU, 0, 2, shape, nullptr};
  pf_tensor_view targets = inputs;
  pf_step_result result{};
  result.struct_size = sizeof(result);
  ASSERT_PF_OK(pf_trainer_step(trainer, &inputs, &targets, &result));
  EXPECT_EQ(result.tokens, 16);
  std::vector<int32_t> bad = tokens;
  bad[5] = 16;
  inputs.data = bad.data();
  EXPECT_PF_ERROR(pf_trainer_step(trainer, &inputs, &targets, nullptr), PF_INVALID_ARGUMENT, "inputs",
                  "token id 16", "outside [0, 16)");
  const float floats[16] = {0};
  inputs.data = floats;
  inputs.dtype = PF_DTYPE_F32;
  EXPECT_PF_ERROR(pf_trainer_step(trainer, &inputs, &targets, nullptr), PF_INVALID_ARGUMENT, "inputs",
                  "expected i32", "got f32 [2, 8]");
  pf_trainer_destroy(trainer);
  pf_model_destroy(model);
}

TEST_F(TrainerTest, StepResultStructSize) {
  Rows rows = MakeRows(0, 8);
  Views v(rows);
  const std::string before = pftest::Checksum(trainer_);
  pf_step_result result{};
  result.struct_size = 8;
  result.loss = -3.0;
  EXPECT_PF_ERROR(pf_trainer_step(trainer_, &v.inputs, &v.targets, &result), PF_INVALID_ARGUMENT,
                  "out->struct_size is 8", "pf_step_result");
  EXPECT_EQ(result.loss, -3.0);
  ExpectUnchanged(before);  // checked before the step ran
  // Past the cap: refused before the step, instead of zeroing up to 4 GiB after the struct.
  result.struct_size = 0xFFFFFFFFu;
  EXPECT_PF_ERROR(pf_trainer_step(trainer_, &v.inputs, &v.targets, &result), PF_INVALID_ARGUMENT,
                  "out->struct_size is 4294967295, larger than any version of pf_step_result will be");
  EXPECT_EQ(result.loss, -3.0);
  ExpectUnchanged(before);

  // A longer (newer) result struct gets zeros beyond what this library knows.
  struct Newer {
    pf_step_result v1;
    double future;
  } newer;
  newer.v1.struct_size = sizeof(newer);
  newer.future = 99.0;
  ASSERT_PF_OK(pf_trainer_step(trainer_, &v.inputs, &v.targets, &newer.v1));
  EXPECT_EQ(newer.v1.struct_size, sizeof(newer));
  EXPECT_EQ(newer.future, 0.0);
  EXPECT_GT(newer.v1.loss, 0.0);
  EXPECT_EQ(newer.v1.samples, 8);
}

TEST_F(TrainerTest, ContiguousStridesAreAccepted) {
  Rows rows = MakeRows(0, 8);
  Views v(rows);
  const int64_t strides[] = {kFeatures, 1};
  v.inputs.strides = strides;
  const int64_t target_strides[] = {1};
  v.targets.strides = target_strides;
  EXPECT_PF_OK(pf_trainer_step(trainer_, &v.inputs, &v.targets, nullptr));
}

// ---- data loader --------------------------------------------------------------------------------

struct LoaderState {
  int destroyed = 0;
  int calls = 0;
  Rows rows;
  int64_t input_shape[2] = {0, 0};
  int64_t target_shape[1] = {0};
  bool bad_shape = false;
};

pf_status* LoaderNext(void* user_data, int64_t position, pf_micro_batch* out) {
  auto* s = static_cast<LoaderState*>(user_data);
  s->calls += 1;
  s->rows = MakeRows(position, 4);
  s->input_shape[0] = 4;
  s->input_shape[1] = s->bad_shape ? 3 : kFeatures;
  s->target_shape[0] = 4;
  out->inputs = pf_tensor_view{s->rows.inputs.data(), PF_DTYPE_F32, PF_DEVICE_CPU, 0, 2, s->input_shape, nullptr};
  out->targets = pf_tensor_view{s->rows.targets.data(), PF_DTYPE_I32, PF_DEVICE_CPU, 0, 1, s->target_shape, nullptr};
  return nullptr;
}
void LoaderDestroy(void* user_data) { static_cast<LoaderState*>(user_data)->destroyed += 1; }

TEST_F(TrainerTest, SetDataLoaderBadArguments) {
  LoaderState state;
  pf_data_loader loader{sizeof(pf_data_loader), &state, LoaderNext, nullptr, LoaderDestroy};
  EXPECT_PF_ERROR(pf_trainer_set_data_loader(nullptr, &loader), PF_INVALID_ARGUMENT,
                  "pf_trainer_set_data_loader", "'trainer'");
  loader.struct_size = 16;
  EXPECT_PF_ERROR(pf_trainer_set_data_loader(trainer_, &loader), PF_INVALID_ARGUMENT, "loader->struct_size is 16");
  loader.struct_size = sizeof(pf_data_loader);
  loader.next = nullptr;
  EXPECT_PF_ERROR(pf_trainer_set_data_loader(trainer_, &loader), PF_INVALID_ARGUMENT, "loader->next is NULL");
  EXPECT_EQ(state.destroyed, 0);  // rejected loaders stay the caller's
  EXPECT_PF_ERROR(pf_trainer_step_from_loader(trainer_, nullptr), PF_FAILED_PRECONDITION, "no data loader");
}

TEST_F(TrainerTest, StepFromLoaderBadArguments) {
  EXPECT_PF_ERROR(pf_trainer_step_from_loader(nullptr, nullptr), PF_INVALID_ARGUMENT,
                  "pf_trainer_step_from_loader", "'trainer'");
  LoaderState state;
  const pf_data_loader loader{sizeof(pf_data_loader), &state, LoaderNext, nullptr, LoaderDestroy};
  ASSERT_PF_OK(pf_trainer_set_data_loader(trainer_, &loader));
  const std::string before = pftest::Checksum(trainer_);
  pf_step_result result{};
  result.struct_size = 4;
  EXPECT_PF_ERROR(pf_trainer_step_from_loader(trainer_, &result), PF_INVALID_ARGUMENT, "out->struct_size");
  EXPECT_EQ(state.calls, 0);
  state.bad_shape = true;
  EXPECT_PF_ERROR(pf_trainer_step_from_loader(trainer_, nullptr), PF_INVALID_ARGUMENT, "micro-batch 0",
                  "inputs", "[4, 3]");
  ExpectUnchanged(before);
  state.bad_shape = false;
  EXPECT_PF_OK(pf_trainer_step_from_loader(trainer_, nullptr));
  // Replacing the loader destroys the old one; removing it too.
  LoaderState second;
  const pf_data_loader other{sizeof(pf_data_loader), &second, LoaderNext, nullptr, LoaderDestroy};
  ASSERT_PF_OK(pf_trainer_set_data_loader(trainer_, &other));
  EXPECT_EQ(state.destroyed, 1);
  ASSERT_PF_OK(pf_trainer_set_data_loader(trainer_, nullptr));
  EXPECT_EQ(second.destroyed, 1);
  EXPECT_PF_ERROR(pf_trainer_step_from_loader(trainer_, nullptr), PF_FAILED_PRECONDITION, "no data loader");
}

TEST(DataLoader, DestroyedWithTheTrainer) {
  pf_model* model = MakeMlp();
  pf_trainer* trainer = nullptr;
  ASSERT_PF_OK(pf_trainer_create(model, nullptr, &trainer));
  LoaderState state;
  const pf_data_loader loader{sizeof(pf_data_loader), &state, LoaderNext, nullptr, LoaderDestroy};
  ASSERT_PF_OK(pf_trainer_set_data_loader(trainer, &loader));
  pf_model_destroy(model);
  EXPECT_EQ(state.destroyed, 0);
  pf_trainer_destroy(trainer);
  EXPECT_EQ(state.destroyed, 1);
}

// ---- metrics, parameters, checksum, memory ------------------------------------------------------

TEST_F(TrainerTest, MetricsBadArguments) {
  pf_metrics metrics;
  std::memset(&metrics, 0x11, sizeof(metrics));
  metrics.struct_size = sizeof(metrics);
  EXPECT_PF_ERROR(pf_trainer_get_metrics(nullptr, &metrics), PF_INVALID_ARGUMENT, "pf_trainer_get_metrics",
                  "'trainer'");
  EXPECT_PF_ERROR(pf_trainer_get_metrics(trainer_, nullptr), PF_INVALID_ARGUMENT, "'out'");
  metrics.struct_size = 3;
  EXPECT_PF_ERROR(pf_trainer_get_metrics(trainer_, &metrics), PF_INVALID_ARGUMENT, "out->struct_size is 3",
                  "pf_metrics");
  EXPECT_EQ(metrics.struct_size, 3u);
  EXPECT_EQ(metrics.step, 0x1111111111111111);
}

TEST_F(TrainerTest, GetParameterBadArguments) {
  std::vector<float> buffer(kFeatures * 16, 42.0f);
  EXPECT_PF_ERROR(pf_trainer_get_parameter(nullptr, "fc0.weight", buffer.data(), buffer.size()),
                  PF_INVALID_ARGUMENT, "pf_trainer_get_parameter", "'trainer'");
  EXPECT_PF_ERROR(pf_trainer_get_parameter(trainer_, nullptr, buffer.data(), buffer.size()), PF_INVALID_ARGUMENT,
                  "'name' is NULL");
  EXPECT_PF_ERROR(pf_trainer_get_parameter(trainer_, "fc9.weight", buffer.data(), buffer.size()), PF_NOT_FOUND,
                  "no parameter named 'fc9.weight'");
  EXPECT_PF_ERROR(pf_trainer_get_parameter(trainer_, "fc0.weight", nullptr, buffer.size()), PF_INVALID_ARGUMENT,
                  "'buffer' is NULL");
  EXPECT_PF_ERROR(pf_trainer_get_parameter(trainer_, "fc0.weight", buffer.data(), 10), PF_INVALID_ARGUMENT,
                  "count is 10", "fc0.weight", "[16, 8]", "128 elements");
  for (float x : buffer) ASSERT_EQ(x, 42.0f);
  ASSERT_PF_OK(pf_trainer_get_parameter(trainer_, "fc0.weight", buffer.data(), buffer.size()));
  EXPECT_NE(buffer[0], 42.0f);
}

TEST_F(TrainerTest, SetParameterBadArguments) {
  const std::string before = pftest::Checksum(trainer_);
  std::vector<float> values(16, 0.5f);
  EXPECT_PF_ERROR(pf_trainer_set_parameter(nullptr, "fc0.bias", values.data(), 16), PF_INVALID_ARGUMENT,
                  "pf_trainer_set_parameter", "'trainer'");
  EXPECT_PF_ERROR(pf_trainer_set_parameter(trainer_, nullptr, values.data(), 16), PF_INVALID_ARGUMENT, "'name'");
  EXPECT_PF_ERROR(pf_trainer_set_parameter(trainer_, "nope", values.data(), 16), PF_NOT_FOUND, "'nope'");
  EXPECT_PF_ERROR(pf_trainer_set_parameter(trainer_, "fc0.bias", nullptr, 16), PF_INVALID_ARGUMENT, "'values'");
  EXPECT_PF_ERROR(pf_trainer_set_parameter(trainer_, "fc0.bias", values.data(), 15), PF_INVALID_ARGUMENT,
                  "count is 15", "16 elements");
  ExpectUnchanged(before);
  ASSERT_PF_OK(pf_trainer_set_parameter(trainer_, "fc0.bias", values.data(), 16));
  EXPECT_NE(pftest::Checksum(trainer_), before);
  std::vector<float> back(16);
  ASSERT_PF_OK(pf_trainer_get_parameter(trainer_, "fc0.bias", back.data(), back.size()));
  EXPECT_EQ(back, values);
}

TEST_F(TrainerTest, ParameterShapeBadArguments) {
  int64_t shape[2] = {-7, -7};
  size_t ndim = 99;
  EXPECT_PF_ERROR(pf_trainer_parameter_shape(nullptr, "fc0.weight", shape, 2, &ndim), PF_INVALID_ARGUMENT,
                  "pf_trainer_parameter_shape", "'trainer'");
  EXPECT_PF_ERROR(pf_trainer_parameter_shape(trainer_, nullptr, shape, 2, &ndim), PF_INVALID_ARGUMENT, "'name'");
  EXPECT_PF_ERROR(pf_trainer_parameter_shape(trainer_, "x", shape, 2, &ndim), PF_NOT_FOUND, "'x'");
  EXPECT_PF_ERROR(pf_trainer_parameter_shape(trainer_, "fc0.weight", shape, 2, nullptr), PF_INVALID_ARGUMENT,
                  "'ndim'");
  EXPECT_PF_ERROR(pf_trainer_parameter_shape(trainer_, "fc0.weight", nullptr, 2, &ndim), PF_INVALID_ARGUMENT,
                  "'shape'");
  EXPECT_PF_ERROR(pf_trainer_parameter_shape(trainer_, "fc0.weight", shape, 1, &ndim), PF_INVALID_ARGUMENT,
                  "max_dims is 1", "rank 2");
  EXPECT_EQ(shape[0], -7);
  EXPECT_EQ(ndim, 99u);
  ASSERT_PF_OK(pf_trainer_parameter_shape(trainer_, "fc0.weight", nullptr, 0, &ndim));
  EXPECT_EQ(ndim, 2u);
  ASSERT_PF_OK(pf_trainer_parameter_shape(trainer_, "fc0.weight", shape, 2, &ndim));
  EXPECT_EQ(shape[0], 16);
  EXPECT_EQ(shape[1], kFeatures);
}

TEST_F(TrainerTest, ChecksumBadArguments) {
  char hex[65];
  std::memset(hex, 'z', sizeof(hex));
  EXPECT_PF_ERROR(pf_trainer_parameter_checksum(nullptr, hex), PF_INVALID_ARGUMENT,
                  "pf_trainer_parameter_checksum", "'trainer'");
  EXPECT_PF_ERROR(pf_trainer_parameter_checksum(trainer_, nullptr), PF_INVALID_ARGUMENT, "'out_hex'");
  EXPECT_EQ(hex[0], 'z');
  const std::string checksum = pftest::Checksum(trainer_);
  ASSERT_EQ(checksum.size(), 64u);
  EXPECT_EQ(checksum.find_first_not_of("0123456789abcdef"), std::string::npos);
}

TEST_F(TrainerTest, MemoryStatsBadArguments) {
  pf_memory_stats stats;
  std::memset(&stats, 0x22, sizeof(stats));
  stats.struct_size = sizeof(stats);
  EXPECT_PF_ERROR(pf_trainer_memory_stats(nullptr, &stats), PF_INVALID_ARGUMENT, "pf_trainer_memory_stats",
                  "'trainer'");
  EXPECT_PF_ERROR(pf_trainer_memory_stats(trainer_, nullptr), PF_INVALID_ARGUMENT, "'out'");
  stats.struct_size = 2;
  EXPECT_PF_ERROR(pf_trainer_memory_stats(trainer_, &stats), PF_INVALID_ARGUMENT, "out->struct_size is 2");
  EXPECT_EQ(stats.parameters_current, 0x2222222222222222);
  stats.struct_size = sizeof(stats);
  ASSERT_PF_OK(pf_trainer_memory_stats(trainer_, &stats));
  const int64_t params = (kFeatures * 16 + 16 + 16 * kClasses + kClasses) * 4;
  EXPECT_GE(stats.parameters_current, params);
  EXPECT_GE(stats.gradients_current, params);
  EXPECT_GE(stats.total_peak, stats.total_current);
}

// ---- checkpoints --------------------------------------------------------------------------------

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST_F(TrainerTest, CheckpointBadArguments) {
  EXPECT_PF_ERROR(pf_trainer_save_checkpoint(nullptr, "x"), PF_INVALID_ARGUMENT, "pf_trainer_save_checkpoint",
                  "'trainer'");
  EXPECT_PF_ERROR(pf_trainer_save_checkpoint(trainer_, nullptr), PF_INVALID_ARGUMENT, "'path' is NULL");
  EXPECT_PF_ERROR(pf_trainer_save_checkpoint(trainer_, ""), PF_INVALID_ARGUMENT, "'path' is empty");
  EXPECT_PF_ERROR(pf_trainer_save_checkpoint(trainer_, "/nonexistent-dir/ckpt"), PF_IO_ERROR,
                  "/nonexistent-dir/ckpt");
  EXPECT_PF_ERROR(pf_trainer_load_checkpoint(nullptr, "x"), PF_INVALID_ARGUMENT, "pf_trainer_load_checkpoint",
                  "'trainer'");
  EXPECT_PF_ERROR(pf_trainer_load_checkpoint(trainer_, nullptr), PF_INVALID_ARGUMENT, "'path' is NULL");
  const std::string missing = TempPath("missing.ckpt");
  EXPECT_PF_ERROR(pf_trainer_load_checkpoint(trainer_, missing.c_str()), PF_NOT_FOUND, missing.c_str());
  const std::string garbage = TempPath("garbage.ckpt");
  FILE* f = std::fopen(garbage.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fputs("this is not a checkpoint, but it is long enough to have a header and a digest.......", f);
  std::fclose(f);
  const std::string before = pftest::Checksum(trainer_);
  EXPECT_PF_ERROR(pf_trainer_load_checkpoint(trainer_, garbage.c_str()), PF_DATA_LOSS, garbage.c_str());
  ExpectUnchanged(before);
}

TEST_F(TrainerTest, HfFolderBadArguments) {
  EXPECT_PF_ERROR(pf_trainer_load_hf_weights(nullptr, "x"), PF_INVALID_ARGUMENT, "pf_trainer_load_hf_weights",
                  "argument 'trainer' is NULL");
  EXPECT_PF_ERROR(pf_trainer_load_hf_weights(trainer_, nullptr), PF_INVALID_ARGUMENT, "argument 'dir' is NULL");
  EXPECT_PF_ERROR(pf_trainer_load_hf_weights(trainer_, ""), PF_INVALID_ARGUMENT, "argument 'dir' is empty");
  EXPECT_PF_ERROR(pf_trainer_export_hf(nullptr, "hf-llama", "x"), PF_INVALID_ARGUMENT, "pf_trainer_export_hf",
                  "argument 'trainer' is NULL");
  EXPECT_PF_ERROR(pf_trainer_export_hf(trainer_, nullptr, "x"), PF_INVALID_ARGUMENT, "argument 'names' is NULL");
  EXPECT_PF_ERROR(pf_trainer_export_hf(trainer_, "hf-llama", nullptr), PF_INVALID_ARGUMENT,
                  "argument 'dir' is NULL");
  EXPECT_PF_ERROR(pf_trainer_export_hf(trainer_, "hf-llama", ""), PF_INVALID_ARGUMENT, "argument 'dir' is empty");
  // This trainer's MLP is no Llama: refused before any file is written, the parameters unchanged.
  const std::string before = pftest::Checksum(trainer_);
  const std::string dir = TempPath("mlp-as-llama");
  EXPECT_PF_ERROR(pf_trainer_export_hf(trainer_, "hf-llama", dir.c_str()), PF_INVALID_ARGUMENT, "hf-llama",
                  "layer 'fc0'");
  EXPECT_FALSE(std::filesystem::exists(dir + "/config.json"));
  EXPECT_PF_ERROR(pf_trainer_load_hf_weights(trainer_, dir.c_str()), PF_INVALID_ARGUMENT, "layer 'fc0'");
  ExpectUnchanged(before);
}

TEST_F(TrainerTest, CheckpointOfAnotherModelIsRejected) {
  pf_mlp_config config;
  pf_mlp_config_init(&config);
  config.input_dim = 3;
  pf_model* other = nullptr;
  ASSERT_PF_OK(pf_model_create_mlp(&config, &other));
  pf_trainer* other_trainer = nullptr;
  ASSERT_PF_OK(pf_trainer_create(other, nullptr, &other_trainer));
  const std::string path = TempPath("other.ckpt");
  ASSERT_PF_OK(pf_trainer_save_checkpoint(other_trainer, path.c_str()));
  const std::string before = pftest::Checksum(trainer_);
  EXPECT_PF_ERROR(pf_trainer_load_checkpoint(trainer_, path.c_str()), PF_INVALID_ARGUMENT, path.c_str());
  ExpectUnchanged(before);
  pf_trainer_destroy(other_trainer);
  pf_model_destroy(other);
}

}  // namespace

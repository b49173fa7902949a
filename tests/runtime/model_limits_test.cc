// Hostile model descriptions: sizes that would overflow, models too large for memory, deep nesting
// and huge or odd fields are refused with an error naming the field and the limit, before any
// parameter memory is allocated.

#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/core/limits.h"
#include "runtime/layers/parameter.h"
#include "runtime/models/builders.h"
#include "runtime/tensor/memory_tracker.h"
#include "tests/util/catch_error.h"

namespace pf {
namespace {

using pftest::catch_error;

int64_t parameter_bytes_now() {
  return memory_tracker(Device::cpu()).stats().current[static_cast<int>(MemoryCategory::kParameters)];
}

// Builds `json` expecting a refusal with `code` whose message contains `fragment`, and checks that
// no parameter memory was left behind or allocated on the way (the peak did not move).
void expect_refused(const std::string& json, ErrorCode code, const std::string& fragment) {
  MemoryTracker& tracker = memory_tracker(Device::cpu());
  tracker.reset_peaks();
  const int64_t before = parameter_bytes_now();
  const Error e = catch_error([&] { build_model_from_json_text(json); });
  EXPECT_EQ(e.code(), code) << json.substr(0, 200) << "\n" << e.what();
  EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  EXPECT_EQ(parameter_bytes_now(), before);
  EXPECT_LE(tracker.stats().peak[static_cast<int>(MemoryCategory::kParameters)], before + (int64_t{64} << 20))
      << "allocated before refusing: " << json.substr(0, 200);
}

TEST(ModelLimits, PresetSizesThatWouldOverflowAreRefusedByField) {
  // d_model * 4 and vocab * d_model wrap int64 without the range checks.
  expect_refused(R"({"preset": "gpt", "d_model": 4611686018427387904})", ErrorCode::kInvalidArgument, "d_model");
  expect_refused(R"({"preset": "gpt", "vocab": 18446744073709551615})", ErrorCode::kInvalidArgument, "vocab");
  expect_refused(R"({"preset": "gpt", "d_model": 1073741824, "heads": 1})", ErrorCode::kInvalidArgument,
                 "mlp_hidden");
  expect_refused(R"({"preset": "mlp", "input_dim": -5})", ErrorCode::kInvalidArgument, "input_dim");
  expect_refused(R"({"preset": "mlp", "hidden": [3000000000]})", ErrorCode::kInvalidArgument, "hidden[0]");
  expect_refused(R"({"preset": "gpt", "layers": 1000000000})", ErrorCode::kInvalidArgument, "layers");
}

TEST(ModelLimits, ModelsLargerThanTheMemoryLimitAreRefusedBeforeAllocating) {
  // 200 blocks of d_model 4096: about 40 G parameters; refused with the byte count and the limit.
  expect_refused(R"({"preset": "gpt", "d_model": 4096, "heads": 8, "layers": 200})", ErrorCode::kOutOfMemory,
                 "more than the limit of " + std::to_string(limits::max_parameter_bytes()));
  // One linear layer with dimensions in range whose weight needs 800 TB.
  expect_refused(R"({"input": {"kind": "features", "features": 4, "classes": 2},
                     "layers": [{"type": "linear", "in": 2147483647, "out": 100000}]})",
                 ErrorCode::kOutOfMemory, "parameters would take");
  // (2^31 - 1)^2 weights: the byte count itself would wrap.
  expect_refused(R"({"input": {"kind": "features", "features": 4, "classes": 2},
                     "layers": [{"type": "linear", "in": 2147483647, "out": 2147483647}]})",
                 ErrorCode::kInvalidArgument, "layers[0]: parameter 'layers.0.weight' bytes");
  expect_refused(R"({"preset": "mlp", "input_dim": 2000000, "hidden": [2000000]})", ErrorCode::kOutOfMemory,
                 "mlp");
}

TEST(ModelLimits, SizingCountsExactlyWhatBuildingAllocates) {
  for (const char* json : {R"({"preset": "gpt", "d_model": 32, "layers": 3})",
                           R"({"preset": "mlp", "hidden": [7, 9]})",
                           R"({"input": {"kind": "tokens", "vocab": 11, "seq_len": 5, "classes": 11},
                               "layers": [{"type": "embedding", "vocab": 11, "seq_len": 5, "dim": 8},
                                          {"type": "residual", "layers": [{"type": "layernorm", "dim": 8},
                                                                          {"type": "attention", "dim": 8, "heads": 2}]},
                                          {"type": "transformer_block", "dim": 8, "heads": 2},
                                          {"type": "linear", "in": 8, "out": 11, "bias": false}]})"}) {
    int64_t sized = 0;
    {
      ParameterSizing sizing;
      build_model_from_json_text(json);  // its own sizing pass runs nested; this one sees the real build
      sized = sizing.bytes();
    }
    auto model = build_model_from_json_text(json);
    EXPECT_EQ(sized, model->num_parameter_elements() * 4) << json;
    EXPECT_GT(sized, 0);
  }
}

TEST(ModelLimits, DeepJsonIsRefusedBeforeParsingWithItsPosition) {
  std::string deep = "{\"preset\": \"gpt\", \"x\": ";
  deep += std::string(100000, '[') + std::string(100000, ']') + "}";
  expect_refused(deep, ErrorCode::kInvalidArgument, "nested deeper than 64 levels at line 1");
  // Brackets inside strings do not count.
  expect_refused(R"({"preset": "gpt", "name": ")" + std::string(1000, '[') + "\"}", ErrorCode::kInvalidArgument,
                 "unknown field 'name'");
}

TEST(ModelLimits, DeepLayerNestingIsRefusedNamingThePath) {
  // Built as a C++ value, so the JSON text depth check does not see it: the layer check does.
  nlohmann::json layer = {{"type", "relu"}};
  for (int i = 0; i < 40; ++i) layer = {{"type", "sequential"}, {"layers", {layer}}};
  const nlohmann::json model = {{"input", {{"kind", "features"}, {"features", 4}, {"classes", 4}}},
                                {"layers", {layer}}};
  const Error e = catch_error([&] { build_model_from_json(model); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("nested deeper than the limit of 32"), std::string::npos) << e.what();
  EXPECT_EQ(std::string(e.what()).rfind("layers[0].layers[0]", 0), 0u) << e.what();
}

TEST(ModelLimits, TooManyLayersAreRefusedBeforeBuilding) {
  std::string json = R"({"input": {"kind": "features", "features": 4, "classes": 4}, "layers": [)";
  for (int64_t i = 0; i <= limits::kMaxLayers; ++i) json += i ? ",{\"type\":\"relu\"}" : "{\"type\":\"relu\"}";
  json += "]}";
  expect_refused(json, ErrorCode::kInvalidArgument, "more than the limit of 100000 layers");
}

TEST(ModelLimits, OddFieldsAreRefusedByName) {
  expect_refused(R"({"input": {"kind": "features", "features": 4, "classes": 2},
                     "layers": [{"type": "relu", "name": "a\rb"}]})",
                 ErrorCode::kInvalidArgument, "layers[0].name: contains a control character");
  expect_refused(R"({"input": {"kind": "features", "features": 4, "classes": 2},
                     "layers": [{"type": "relu", "name": ")" + std::string(300, 'n') + "\"}]}",
                 ErrorCode::kInvalidArgument, "layers[0].name: 300 bytes");
  expect_refused(R"({"input": {"kind": "features", "features": 18446744073709551615, "classes": 2},
                     "layers": [{"type": "relu"}]})",
                 ErrorCode::kInvalidArgument, "input.features");
  expect_refused(std::string(limits::kMaxModelJsonBytes + 1, ' '), ErrorCode::kInvalidArgument,
                 "more than the limit of");
}

}  // namespace
}  // namespace pf

// libFuzzer target: model JSON (runtime/models/builders.h, runtime/layers/layer_factory.h).
// Input: model JSON text. Oracles, besides "no crash, no exception other than pf::Error":
//  * a model that builds prints (to_json), and that JSON, as a value and as dumped text, builds a
//    model with the same JSON and the same parameters (names and element counts);
//  * a model small enough to train cheaply takes one training step on a 2-row batch that fits its
//    input spec (shape-overflow bugs show up there as ASan heap overflows).
// The runtime accepts models up to a quarter of the machine's memory, far above the fuzzer's 2 GiB:
// each input is first built under ParameterSizing (which allocates nothing) and models whose
// parameters the runtime accepts but that would not fit the fuzzer's memory are skipped.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/layers/parameter.h"
#include "runtime/models/builders.h"
#include "runtime/train/sequential_trainer.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using nlohmann::json;
constexpr const char* kTarget = "model_json";

// Parameter values (gradients take as much again) that fit the fuzzer's -rss_limit_mb=2048 with ASan.
constexpr int64_t kMaxParameterBytes = int64_t{128} << 20;
// Above these a step costs too much per input (no bug in itself: the limits are the runtime's job).
constexpr int64_t kStepMaxParameters = 1 << 20;
constexpr int64_t kStepMaxWidth = 4096;   // features, vocab, classes
constexpr int64_t kStepMaxSeqLen = 128;

std::string parameter_list(const pf::Model& m) {
  std::string out;
  for (const pf::Parameter* p : m.parameters()) out += p->name + ":" + std::to_string(p->value.numel()) + " ";
  return out;
}

void check_rebuilds(const pf::Model& model, const json& j, const std::unique_ptr<pf::Model>& again,
                    const std::string& how) {
  const json j2 = again->to_json();
  FUZZ_CHECK(kTarget, j2 == j, how + ": to_json differs: " + j.dump() + " vs " + j2.dump());
  FUZZ_CHECK(kTarget, parameter_list(*again) == parameter_list(model), how + ": parameters differ");
}

bool small_enough_to_step(const pf::Model& m) {
  const pf::InputSpec& in = m.input_spec();
  const int64_t n = m.num_parameter_elements();
  return n >= 0 && n <= kStepMaxParameters && in.classes <= kStepMaxWidth &&
         (in.kind == pf::InputSpec::Kind::kFeatures ? in.features <= kStepMaxWidth
                                                    : in.vocab <= kStepMaxWidth && in.seq_len <= kStepMaxSeqLen);
}

pf::Batch batch_for(const pf::InputSpec& in) {
  constexpr int64_t rows = 2;
  if (in.kind == pf::InputSpec::Kind::kFeatures) {
    std::vector<float> x(static_cast<size_t>(rows * in.features));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) * 0.25f - 0.75f;
    return {pf::Tensor::from_vector({rows, in.features}, x), pf::Tensor::from_ints({rows}, {0, static_cast<int32_t>(in.classes - 1)})};
  }
  std::vector<int32_t> tokens(static_cast<size_t>(rows * in.seq_len)), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>(i % static_cast<size_t>(in.vocab));
    targets[i] = static_cast<int32_t>((i + 1) % static_cast<size_t>(in.classes));
  }
  return {pf::Tensor::from_ints({rows, in.seq_len}, tokens), pf::Tensor::from_ints({rows, in.seq_len}, targets)};
}

void fuzz_one(const std::string& text) {
  {
    pf::ParameterSizing sizing;
    pf::build_model_from_json_text(text);  // refusals (pf::Error) end here
    if (sizing.bytes() > kMaxParameterBytes) return;
  }
  std::unique_ptr<pf::Model> model = pf::build_model_from_json_text(text);
  const json j = pf::fuzz::must_succeed(kTarget, "to_json of a built model", [&] { return model->to_json(); });
  check_rebuilds(*model, j, pf::fuzz::must_succeed(kTarget, "rebuilding from to_json", [&] { return pf::build_model_from_json(j); }),
                 "rebuilt from the JSON value");
  const std::string dumped = pf::fuzz::must_succeed(kTarget, "dumping to_json", [&] { return j.dump(); });
  check_rebuilds(*model, j,
                 pf::fuzz::must_succeed(kTarget, "rebuilding from the dumped text", [&] { return pf::build_model_from_json_text(dumped); }),
                 "rebuilt from the dumped text");

  if (!small_enough_to_step(*model)) return;
  const pf::Batch batch = batch_for(model->input_spec());
  pf::TrainerOptions options;
  options.optimizer.lr = 0.01f;
  pf::SequentialTrainer trainer(std::shared_ptr<pf::Model>(std::move(model)), options);
  trainer.step(batch);  // a pf::Error (e.g. layer shapes that do not chain) is a refusal
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  pf::fuzz::run_input(kTarget, [&] { fuzz_one(text); });
  return 0;
}

// Helpers for the C API tests: status assertions, small models and deterministic data.
#pragma once

#include <cmath>

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "c_api/pipeforge.h"

namespace pftest {

// Asserts `status` (taken over and destroyed) is an error with `code` whose message contains every
// one of `parts`.
inline void ExpectError(pf_status* status, pf_code code, std::initializer_list<const char*> parts) {
  ASSERT_NE(status, nullptr) << "expected " << pf_code_name(code) << ", got success";
  const std::string message = pf_status_message(status);
  EXPECT_EQ(pf_status_code(status), code)
      << "got " << pf_code_name(pf_status_code(status)) << ": " << message;
  for (const char* part : parts) EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  pf_status_destroy(status);
}

inline void ExpectOk(pf_status* status) {
  EXPECT_EQ(status, nullptr) << pf_code_name(pf_status_code(status)) << ": " << pf_status_message(status);
  pf_status_destroy(status);
}

}  // namespace pftest

#define EXPECT_PF_ERROR(expr, code, ...)          \
  do {                                            \
    SCOPED_TRACE(#expr);                          \
    ::pftest::ExpectError((expr), (code), {__VA_ARGS__}); \
  } while (0)

#define EXPECT_PF_OK(expr)       \
  do {                           \
    SCOPED_TRACE(#expr);         \
    ::pftest::ExpectOk((expr));  \
  } while (0)

#define ASSERT_PF_OK(expr)                                                                  \
  do {                                                                                      \
    pf_status* status_ = (expr);                                                            \
    if (status_ != nullptr) {                                                               \
      std::string message_ = pf_status_message(status_);                                    \
      pf_status_destroy(status_);                                                           \
      FAIL() << #expr << " failed: " << message_;                                           \
    }                                                                                       \
  } while (0)

namespace pftest {

// A small MLP classifier: 8 features, hidden {16}, 4 classes.
constexpr int64_t kFeatures = 8;
constexpr int64_t kClasses = 4;

inline pf_model* MakeMlp() {
  pf_mlp_config config;
  pf_mlp_config_init(&config);
  const int64_t hidden[] = {16};
  config.input_dim = kFeatures;
  config.hidden = hidden;
  config.num_hidden = 1;
  config.classes = kClasses;
  pf_model* model = nullptr;
  pf_status* status = pf_model_create_mlp(&config, &model);
  EXPECT_EQ(status, nullptr) << pf_status_message(status);
  pf_status_destroy(status);
  return model;
}

// An MLP with three hidden layers of `width` (7 top-level layers): enough to split over 2 or 4
// ranks; width 256 makes its layers' times more than noise (adaptation tests).
inline pf_model* MakeDeepMlp(int64_t width = 16) {
  pf_mlp_config config;
  pf_mlp_config_init(&config);
  const int64_t hidden[] = {width, width, width};
  config.input_dim = kFeatures;
  config.hidden = hidden;
  config.num_hidden = 3;
  config.classes = kClasses;
  pf_model* model = nullptr;
  EXPECT_PF_OK(pf_model_create_mlp(&config, &model));
  return model;
}

// A trainer on a new MakeDeepMlp() (the trainer keeps the model; its handle is released here).
inline pf_trainer* MakeTrainer(const pf_trainer_options& options) {
  pf_model* model = MakeDeepMlp();
  pf_trainer* trainer = nullptr;
  EXPECT_PF_OK(pf_trainer_create(model, &options, &trainer));
  pf_model_destroy(model);
  return trainer;
}

inline pf_trainer_options Options(int micro_batches = 2, uint64_t seed = 7) {
  pf_trainer_options options;
  pf_trainer_options_init(&options);
  options.micro_batches = micro_batches;
  options.seed = seed;
  options.lr = 0.01f;
  return options;
}

// Rows of a learnable task: class = argmax of four fixed projections of x. Row r of "position"
// p is generated from (p, r) alone, so any source of the same positions sees the same data.
struct Rows {
  std::vector<float> inputs;
  std::vector<int32_t> targets;
  int64_t rows = 0;
};

inline uint32_t Hash(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

inline Rows MakeRows(int64_t position, int64_t rows) {
  Rows out;
  out.rows = rows;
  for (int64_t r = 0; r < rows; ++r) {
    float best = -1e30f;
    int32_t label = 0;
    std::vector<float> x(kFeatures);
    for (int64_t f = 0; f < kFeatures; ++f) {
      x[f] = static_cast<float>(Hash((position * 1000 + r) * 64 + f) % 2001) / 1000.0f - 1.0f;
      out.inputs.push_back(x[f]);
    }
    for (int32_t c = 0; c < kClasses; ++c) {
      float score = 0;
      for (int64_t f = 0; f < kFeatures; ++f) score += x[f] * ((f + c) % 3 == 0 ? 1.0f : -0.5f);
      if (score > best) best = score, label = c;
    }
    out.targets.push_back(label);
  }
  return out;
}

// Views over `rows` (valid while `rows` and `shapes` live).
struct Views {
  int64_t input_shape[2];
  int64_t target_shape[1];
  pf_tensor_view inputs;
  pf_tensor_view targets;

  explicit Views(const Rows& rows) {
    input_shape[0] = rows.rows;
    input_shape[1] = kFeatures;
    target_shape[0] = rows.rows;
    inputs = pf_tensor_view{rows.inputs.data(), PF_DTYPE_F32, PF_DEVICE_CPU, 0, 2, input_shape, nullptr};
    targets = pf_tensor_view{rows.targets.data(), PF_DTYPE_I32, PF_DEVICE_CPU, 0, 1, target_shape, nullptr};
  }
  Views(const Views&) = delete;
};

// A data loader whose micro-batch `position` is MakeRows(position, rows); `fail_at` (>= 0) makes
// that position fail once with PF_IO_ERROR. Install with pf_trainer_set_data_loader(t, &vtable());
// the object must outlive the trainer (destroy is not set).
struct PositionLoader {
  int64_t rows = 4;
  int64_t fail_at = -1;
  Rows served;
  int64_t input_shape[2] = {0, kFeatures};
  int64_t target_shape[1] = {0};

  static pf_status* Next(void* user_data, int64_t position, pf_micro_batch* out) {
    auto* l = static_cast<PositionLoader*>(user_data);
    if (position == l->fail_at) {
      l->fail_at = -1;
      return pf_status_create(PF_IO_ERROR, "position loader: asked to fail");
    }
    l->served = MakeRows(position, l->rows);
    l->input_shape[0] = l->rows;
    l->target_shape[0] = l->rows;
    out->inputs = pf_tensor_view{l->served.inputs.data(), PF_DTYPE_F32, PF_DEVICE_CPU, 0, 2, l->input_shape, nullptr};
    out->targets =
        pf_tensor_view{l->served.targets.data(), PF_DTYPE_I32, PF_DEVICE_CPU, 0, 1, l->target_shape, nullptr};
    return nullptr;
  }
  pf_data_loader vtable() { return pf_data_loader{sizeof(pf_data_loader), this, Next, nullptr, nullptr}; }
};

// The model's parameter names, in model order.
inline std::vector<std::string> ParameterNames(const pf_model* model) {
  size_t n = 0;
  EXPECT_PF_OK(pf_model_num_parameters(model, &n));
  std::vector<std::string> names;
  for (size_t i = 0; i < n; ++i) {
    const char* name = nullptr;
    EXPECT_PF_OK(pf_model_parameter_name(model, i, &name));
    names.push_back(name != nullptr ? name : "");
  }
  return names;
}

inline std::string Checksum(const pf_trainer* trainer) {
  char hex[65] = {0};
  pf_status* status = pf_trainer_parameter_checksum(trainer, hex);
  EXPECT_EQ(status, nullptr) << pf_status_message(status);
  pf_status_destroy(status);
  return hex;
}

// `steps` steps on MakeRows(step, rows), the same data for every trainer; the losses must be finite.
inline void TrainSteps(pf_trainer* trainer, int steps, int64_t rows = 12) {
  for (int step = 0; step < steps; ++step) {
    const Rows batch = MakeRows(step, rows);
    Views views(batch);
    pf_step_result result;
    result.struct_size = sizeof(result);
    ASSERT_PF_OK(pf_trainer_step(trainer, &views.inputs, &views.targets, &result));
    EXPECT_TRUE(std::isfinite(result.loss)) << "step " << step;
  }
}

// Three steps (TrainSteps), then pf_trainer_drain: the checksum of the final parameters ("" when
// the trainer cannot be made).
inline std::string TrainAndDrain(const pf_trainer_options& options) {
  pf_trainer* t = MakeTrainer(options);
  EXPECT_NE(t, nullptr) << (options.schedule ? options.schedule : "(no schedule)");
  if (t == nullptr) return "";
  TrainSteps(t, 3);
  EXPECT_PF_OK(pf_trainer_drain(t));
  const std::string sum = Checksum(t);
  pf_trainer_destroy(t);
  return sum;
}

}  // namespace pftest

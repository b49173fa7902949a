#include "runtime/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/core/suggest.h"

namespace pf {

const std::vector<std::string>& lr_schedule_names() {
  static const std::vector<std::string> names = {"constant", "cosine", "linear"};
  return names;
}

LrSchedule::Kind parse_lr_schedule_kind(const std::string& name) {
  if (name == "constant") return LrSchedule::Kind::kConstant;
  if (name == "cosine") return LrSchedule::Kind::kCosine;
  if (name == "linear") return LrSchedule::Kind::kLinear;
  fail(ErrorCode::kInvalidArgument, "unknown learning-rate schedule '", name, "'",
       did_you_mean(name, lr_schedule_names()), " (known: constant, cosine, linear)");
}

const char* lr_schedule_kind_name(LrSchedule::Kind kind) {
  switch (kind) {
    case LrSchedule::Kind::kCosine:
      return "cosine";
    case LrSchedule::Kind::kLinear:
      return "linear";
    case LrSchedule::Kind::kConstant:
      break;
  }
  return "constant";
}

float LrSchedule::lr_at(float lr, int64_t steps_taken) const {
  const double base = lr;
  if (steps_taken < warmup_steps)
    return static_cast<float>(base * static_cast<double>(steps_taken + 1) / static_cast<double>(warmup_steps));
  if (kind == Kind::kConstant) return lr;
  const double t = std::min(1.0, static_cast<double>(steps_taken - warmup_steps) / static_cast<double>(decay_steps));
  const double factor = kind == Kind::kCosine ? 0.5 * (1.0 + std::cos(M_PI * t)) : 1.0 - t;
  return static_cast<float>(min_lr + (base - min_lr) * factor);
}

void LrSchedule::validate(float lr) const {
  PF_CHECK_ARG(warmup_steps >= 0, "lr_schedule.warmup_steps must be >= 0, got ", warmup_steps);
  PF_CHECK_ARG(std::isfinite(min_lr) && min_lr >= 0.0, "lr_schedule.min_lr must be finite and >= 0, got ", min_lr);
  if (kind == Kind::kConstant) {
    PF_CHECK_ARG(decay_steps == 0 && min_lr == 0.0, "lr_schedule.decay_steps and lr_schedule.min_lr apply to the "
                 "cosine and linear schedules only, not to constant");
    return;
  }
  PF_CHECK_ARG(decay_steps >= 1, "lr_schedule.decay_steps must be >= 1 for the ", lr_schedule_kind_name(kind),
               " schedule (the steps after the warm-up over which the rate decays), got ", decay_steps);
  PF_CHECK_ARG(min_lr <= lr, "lr_schedule.min_lr ", min_lr, " is above the learning rate ", lr);
}

nlohmann::json LrSchedule::to_json() const {
  nlohmann::json j = {{"kind", lr_schedule_kind_name(kind)}, {"warmup_steps", warmup_steps}};
  if (kind != Kind::kConstant) {
    j["decay_steps"] = decay_steps;
    j["min_lr"] = min_lr;
  }
  return j;
}

}  // namespace pf

// Learning-rate schedules: the learning rate of every optimizer step as a pure function of the
// step number, so a run resumed from a checkpoint (which restores the step) follows the same
// schedule bitwise.
//
//   constant: lr at every step.
//   cosine:   linear warm-up from lr / warmup_steps to lr over the first warmup_steps steps, then
//             lr_min + (lr - lr_min) * (1 + cos(pi * t)) / 2 with t = (step - warmup) / decay,
//             held at lr_min after decay_steps.
//   linear:   the same warm-up, then lr - (lr - lr_min) * t, held at lr_min after decay_steps.
// Warm-up applies to constant too (lr / warmup_steps * (step + 1) for the first warmup_steps).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace pf {

struct LrSchedule {
  enum class Kind { kConstant, kCosine, kLinear } kind = Kind::kConstant;
  int64_t warmup_steps = 0;  // >= 0
  int64_t decay_steps = 0;   // cosine, linear: steps after the warm-up over which lr decays (>= 1)
  double min_lr = 0.0;       // cosine, linear: the rate the decay ends at (0 <= min_lr <= lr)

  // The learning rate of the step that follows `steps_taken` steps (0 for the first step).
  float lr_at(float lr, int64_t steps_taken) const;
  bool is_constant() const { return kind == Kind::kConstant && warmup_steps == 0; }
  void validate(float lr) const;  // kInvalidArgument naming the field
  nlohmann::json to_json() const;
};

// "constant", "cosine", "linear".
const std::vector<std::string>& lr_schedule_names();
// The kind of a name; kInvalidArgument listing the names (with the closest one) otherwise.
LrSchedule::Kind parse_lr_schedule_kind(const std::string& name);
const char* lr_schedule_kind_name(LrSchedule::Kind kind);

}  // namespace pf

// The metrics log of a run: JSON Lines, one object per optimizer step —
//   {"step": 12, "loss": 2.31, "lr": 0.003, "grad_norm": 1.4, "tokens": 512, "seconds": 0.01,
//    "tokens_per_s": 51200, "bubble_rate": 0.21, "peak_activation_bytes": [r0, r1, ...],
//    "eval_loss": 2.4, "eval_accuracy": 0.31}           (eval_* on the steps that evaluated)
// and whatever fields the caller adds to a step's line (an adaptive trainer's "adaptation").
// A run resumed at step S keeps the lines of steps <= S and drops the later ones (what the
// interrupted run logged after its last checkpoint), so the log of a resumed run reads as one run.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/train/trainer.h"

namespace pf {

class MetricsLog {
 public:
  // Opens (creates, with its folder) `path` for appending after dropping the lines of steps > first_step. kIoError
  // naming the file when it cannot be written; kDataLoss naming the line when a kept line is not a
  // JSON object with a "step".
  MetricsLog(const std::string& path, int64_t first_step);

  // Writes one line and flushes it (a killed run keeps every finished step's line). `extra`: an
  // object whose fields follow the others (null: none).
  void write(int64_t step, const StepResult& result, const std::optional<EvalResult>& eval,
             const nlohmann::json& extra = nullptr);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace pf

// Training progress on stderr. On a terminal: one bar redrawn in place ("\r"); otherwise (logs,
// CI) a plain line about every tenth of the run, so a log file does not fill with carriage returns.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace pf::cli {

class ProgressBar {
 public:
  // total: steps in this run; first_step: the trainer's step before it (non-zero after --resume).
  ProgressBar(int64_t total, int64_t first_step, bool enabled, std::FILE* out = stderr);
  ~ProgressBar();
  // After local step `done` (1-based) of `total`.
  void update(int64_t done, double loss, double tokens_per_second);
  void finish();

  static std::string format_rate(double per_second);

 private:
  int64_t total_, first_step_;
  bool enabled_, interactive_;
  bool open_line_ = false;
  std::FILE* out_;
};

}  // namespace pf::cli

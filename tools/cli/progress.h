// Training progress on stderr. On a terminal: one bar redrawn in place ("\r") with the elapsed
// time and an estimate of the time left; notes (evaluations) print above it without leaving a
// stale bar behind. Otherwise (logs, CI): a plain line about every tenth of the run, and every
// note, so a log file does not fill with carriage returns.
#pragma once

#include <chrono>
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
  // A line of its own (the bar, when drawn, is redrawn below it by the next update).
  void note(const std::string& line);
  void finish();

  static std::string format_rate(double per_second);
  // "42s", "3m07s", "2h05m".
  static std::string format_duration(double seconds);

 private:
  int64_t total_, first_step_;
  bool enabled_, interactive_;
  bool open_line_ = false;
  std::FILE* out_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// A number for messages: 4 significant digits ("2.317", "0.3125").
std::string format_number(double x);

}  // namespace pf::cli

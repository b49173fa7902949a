#include "tools/cli/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace pf::cli {

ProgressBar::ProgressBar(int64_t total, int64_t first_step, bool enabled, std::FILE* out)
    : total_(std::max<int64_t>(total, 1)),
      first_step_(first_step),
      enabled_(enabled),
      interactive_(enabled && isatty(fileno(out)) == 1),
      out_(out) {}

ProgressBar::~ProgressBar() { finish(); }

std::string ProgressBar::format_rate(double per_second) {
  char text[32];
  if (!std::isfinite(per_second)) {
    std::snprintf(text, sizeof(text), "-");
  } else if (per_second >= 1e6) {
    std::snprintf(text, sizeof(text), "%.2fM", per_second / 1e6);
  } else if (per_second >= 1e3) {
    std::snprintf(text, sizeof(text), "%.1fk", per_second / 1e3);
  } else {
    std::snprintf(text, sizeof(text), "%.0f", per_second);
  }
  return text;
}

std::string ProgressBar::format_duration(double seconds) {
  char text[32];
  const long long s = static_cast<long long>(std::llround(std::max(0.0, seconds)));
  if (s < 60) {
    std::snprintf(text, sizeof(text), "%llds", s);
  } else if (s < 3600) {
    std::snprintf(text, sizeof(text), "%lldm%02llds", s / 60, s % 60);
  } else {
    std::snprintf(text, sizeof(text), "%lldh%02lldm", s / 3600, (s % 3600) / 60);
  }
  return text;
}

std::string format_number(double x) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.4g", x);
  return text;
}

void ProgressBar::update(int64_t done, double loss, double tokens_per_second) {
  if (!enabled_) return;
  const std::string rate = format_rate(tokens_per_second);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double left = done > 0 ? elapsed * static_cast<double>(total_ - std::min(done, total_)) / done : 0.0;
  const std::string times = format_duration(elapsed) + " elapsed, " + format_duration(left) + " left";
  if (interactive_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * std::min(done, total_) / total_);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(kWidth - filled), '.');
    std::fprintf(out_, "\r[%s] step %lld/%lld  loss %.4f  %s tok/s  %s\033[K", bar.c_str(),
                 static_cast<long long>(first_step_ + done), static_cast<long long>(first_step_ + total_),
                 loss, rate.c_str(), times.c_str());
    open_line_ = true;
  } else {
    const int64_t every = std::max<int64_t>(1, total_ / 10);
    if (done != 1 && done % every != 0 && done != total_) return;
    std::fprintf(out_, "step %lld/%lld  loss %.4f  %s tok/s  %s\n", static_cast<long long>(first_step_ + done),
                 static_cast<long long>(first_step_ + total_), loss, rate.c_str(), times.c_str());
  }
  std::fflush(out_);
}

void ProgressBar::note(const std::string& line) {
  if (!enabled_) return;
  // On a terminal the bar's line is cleared first; the next update draws the bar again.
  std::fprintf(out_, "%s%s\n", open_line_ ? "\r\033[K" : "", line.c_str());
  open_line_ = false;
  std::fflush(out_);
}

void ProgressBar::finish() {
  if (open_line_) {
    std::fputc('\n', out_);
    std::fflush(out_);
    open_line_ = false;
  }
}

}  // namespace pf::cli

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

void ProgressBar::update(int64_t done, double loss, double tokens_per_second) {
  if (!enabled_) return;
  const std::string rate = format_rate(tokens_per_second);
  if (interactive_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * std::min(done, total_) / total_);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(kWidth - filled), '.');
    std::fprintf(out_, "\r[%s] step %lld/%lld  loss %.4f  %s tok/s\033[K", bar.c_str(),
                 static_cast<long long>(first_step_ + done), static_cast<long long>(first_step_ + total_),
                 loss, rate.c_str());
    open_line_ = true;
  } else {
    const int64_t every = std::max<int64_t>(1, total_ / 10);
    if (done != 1 && done % every != 0 && done != total_) return;
    std::fprintf(out_, "step %lld/%lld  loss %.4f  %s tok/s\n", static_cast<long long>(first_step_ + done),
                 static_cast<long long>(first_step_ + total_), loss, rate.c_str());
  }
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

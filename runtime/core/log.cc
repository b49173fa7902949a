#include "runtime/core/log.h"

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>

namespace pf {
namespace {

struct LogState {
  std::mutex mutex;
  std::shared_ptr<LogSink> sink;  // null = stderr
  std::atomic<int> min_level{static_cast<int>(LogLevel::kWarning)};
};

LogState& state() {
  static LogState* s = new LogState();  // never destroyed: logging may happen during exit
  return *s;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
    default: return "?";
  }
}

}  // namespace

void set_log_sink(LogSink sink, LogLevel min_level) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.sink = sink ? std::make_shared<LogSink>(std::move(sink)) : nullptr;
  s.min_level = static_cast<int>(min_level);
}

bool log_enabled(LogLevel level) {
  return static_cast<int>(level) >= state().min_level.load() && level != LogLevel::kOff;
}

void log(LogLevel level, const std::string& message) {
  if (!log_enabled(level)) return;
  auto& s = state();
  std::shared_ptr<LogSink> sink;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    sink = s.sink;
  }
  if (sink) {
    (*sink)(level, message);
  } else {
    std::fprintf(stderr, "[pipeforge %s] %s\n", level_name(level), message.c_str());
  }
}

}  // namespace pf

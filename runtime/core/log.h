// Process-wide log sink. The runtime logs through pf::log(); the C API installs a user sink.
// Messages below the minimum level are dropped before formatting work is done by the caller.
#pragma once

#include <functional>
#include <string>

namespace pf {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kOff = 4 };

using LogSink = std::function<void(LogLevel, const std::string&)>;

// Installs `sink` (empty = default sink writing to stderr) and the minimum level. Thread-safe.
void set_log_sink(LogSink sink, LogLevel min_level);
bool log_enabled(LogLevel level);
void log(LogLevel level, const std::string& message);

}  // namespace pf

// pf_set_log_sink: routes the runtime's log (pf::log) to a caller's callback.
#include <memory>

#include "c_api/guard.h"
#include "c_api/struct_io.h"
#include "runtime/core/log.h"

namespace {

constexpr size_t kLogSinkV1Size = sizeof(pf_log_sink);
static_assert(kLogSinkV1Size == 32, "a v1 struct layout changed");
static_assert(static_cast<int>(PF_LOG_DEBUG) == static_cast<int>(pf::LogLevel::kDebug) &&
                  static_cast<int>(PF_LOG_ERROR) == static_cast<int>(pf::LogLevel::kError) &&
                  static_cast<int>(PF_LOG_OFF) == static_cast<int>(pf::LogLevel::kOff),
              "pf_log_level must mirror pf::LogLevel");

// Shared by every copy of the installed std::function; the last copy to go (after the sink was
// replaced and no log call is still running) calls the caller's destroy.
struct SinkHolder {
  pf_log_sink sink;
  bool adopted = false;  // set once installing succeeded: before that, user_data is the caller's
  ~SinkHolder() {
    if (adopted && sink.destroy != nullptr) sink.destroy(sink.user_data);
  }
};

}  // namespace

extern "C" {

pf_status* pf_set_log_sink(const pf_log_sink* sink, pf_log_level min_level) {
  return pf::capi::guard(__func__, [&] {
    const int level = static_cast<int>(min_level);
    PF_CHECK_ARG(level >= PF_LOG_DEBUG && level <= PF_LOG_OFF, "min_level ", level, " is not a pf_log_level");
    if (sink == nullptr) {
      pf::set_log_sink(nullptr, static_cast<pf::LogLevel>(level));
      return;
    }
    const pf_log_sink copy = pf::capi::read_struct(*sink, kLogSinkV1Size, "sink", "pf_log_sink", pf_log_sink{});
    PF_CHECK_ARG(copy.log != nullptr, "sink->log is NULL");
    auto holder = std::make_shared<SinkHolder>();
    holder->sink = copy;
    pf::set_log_sink(
        [holder](pf::LogLevel lvl, const std::string& message) {
          holder->sink.log(holder->sink.user_data, static_cast<pf_log_level>(lvl), message.c_str());
        },
        static_cast<pf::LogLevel>(level));
    holder->adopted = true;
  });
}

}  // extern "C"

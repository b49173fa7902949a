// pf_status_* and pf_code_name.
#include "c_api/guard.h"

extern "C" {

pf_status* pf_status_create(pf_code code, const char* message) {
  if (code == PF_OK) return nullptr;
  try {
    return pf::capi::make_status(code, message != nullptr ? std::string(message) : std::string());
  } catch (...) {
    return pf::capi::make_status(PF_OUT_OF_MEMORY, std::string());
  }
}

pf_code pf_status_code(const pf_status* status) { return status != nullptr ? status->code : PF_OK; }

const char* pf_status_message(const pf_status* status) {
  return status != nullptr ? status->message.c_str() : "";
}

void pf_status_destroy(pf_status* status) {
  if (status != nullptr && !pf::capi::is_static_status(status)) delete status;
}

const char* pf_code_name(pf_code code) {
  const int value = static_cast<int>(code);
  if (value < PF_OK || value > PF_INTERNAL) return "UNKNOWN";
  return pf::error_code_name(static_cast<pf::ErrorCode>(value));
}

}  // extern "C"

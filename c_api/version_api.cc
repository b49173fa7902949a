// pf_get_abi_version and pf_get_version_string: the values pipeforge.h was generated with.
#include "c_api/pipeforge.h"

extern "C" {

uint32_t pf_get_abi_version(void) { return PF_ABI_VERSION; }

const char* pf_get_version_string(void) { return PF_VERSION_STRING; }

}  // extern "C"

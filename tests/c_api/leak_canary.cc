// Leaks a status on purpose. leak_checker_test runs this to prove that the leak checker the other
// tests rely on is really active in this build and environment (a silent checker passes anything).
#include <cstdio>

#include "c_api/pipeforge.h"

int main() {
  pf_status* leaked = pf_status_create(PF_INTERNAL, "deliberately leaked");
  std::printf("leaked status at %p\n", static_cast<void*>(leaked));
  leaked = nullptr;
  return 0;
}

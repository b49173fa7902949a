// pf_trainer_adaptations_json: the moves of a trainer created with options->adapt (since 0.9).
#include "c_api/guard.h"
#include "c_api/handles.h"
#include "runtime/planner/fail_slow.h"

extern "C" {

pf_status* pf_trainer_adaptations_json(pf_trainer* trainer, const char** out) {
  return pf::capi::guard(__func__, [&] {
    pf::capi::require(trainer, "trainer");
    pf::capi::require(out, "out");
    const pf::plan::AdaptiveTrainer* adaptive = trainer->adaptive();
    trainer->adaptations = adaptive ? pf::plan::adaptations_to_json(adaptive->adaptations()).dump() : "[]";
    *out = trainer->adaptations.c_str();
  });
}

}  // extern "C"

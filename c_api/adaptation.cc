// What a trainer did besides its steps: pf_trainer_adaptations_json, the moves of a trainer created
// with options->adapt (since 0.9); pf_trainer_fill_report_json, its fill job's work (since 0.14).
#include "c_api/guard.h"
#include "c_api/handles.h"
#include "runtime/planner/fail_slow.h"
#include "runtime/run/make_trainer.h"

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

pf_status* pf_trainer_fill_report_json(pf_trainer* trainer, const char** out) {
  return pf::capi::guard(__func__, [&] {
    pf::capi::require(trainer, "trainer");
    pf::capi::require(out, "out");
    const pf::FillJob* fill = pf::fill_job_of(*trainer->trainer);
    trainer->fill_report = fill ? fill->report().dump() : "null";
    *out = trainer->fill_report.c_str();
  });
}

}  // extern "C"

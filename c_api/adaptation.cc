#include "c_api/adaptation.h"

#include <memory>
#include <string>
#include <utility>

#include "c_api/guard.h"
#include "c_api/profile_copy.h"
#include "runtime/core/error.h"
#include "runtime/schedules/async_schedules.h"

namespace pf::capi {

std::optional<pf::plan::FailSlowOptions> check_adaptation(const pf_trainer_options& o,
                                                          const pf::exec::PipelineTrainer* pipeline) {
  PF_CHECK_ARG(o.adapt == 0 || o.adapt == 1, "options->adapt is ", o.adapt, ": expected 0 (off, the default) or 1");
  pf::plan::FailSlowOptions f;
  PF_CHECK_ARG(o.adapt_threshold == 0 || o.adapt_threshold > 1, "options->adapt_threshold is ", o.adapt_threshold,
               ": expected > 1, or 0 for the default (", f.threshold, ")");
  PF_CHECK_ARG(o.adapt_patience >= 0, "options->adapt_patience is ", o.adapt_patience,
               ": expected >= 1 steps, or 0 for the default (", f.patience, ")");
  if (o.adapt == 0) return std::nullopt;
  PF_CHECK_ARG(pipeline != nullptr, "options->adapt is 1 but no schedule is set: adaptation re-partitions a pipeline "
                                    "(set options->schedule to a synchronous schedule, e.g. \"1f1b\")");
  PF_CHECK_ARG(o.data_parallel == 1, "options->adapt is not supported with data_parallel ", o.data_parallel, " yet");
  const pf::sched::Schedule& s = pipeline->schedule();
  PF_CHECK_ARG(!pf::sched::is_asynchronous(s) && s.pipelines == 1, "options->adapt is not supported with schedule '",
               s.name, "': it needs a synchronous schedule with one pipeline");
  if (o.adapt_threshold != 0) f.threshold = o.adapt_threshold;
  if (o.adapt_patience != 0) f.patience = o.adapt_patience;
  return f;
}

void convert_slow_rank(const pf_trainer_options& o, int ranks, pf::exec::PipelineOptions* p) {
  PF_CHECK_ARG(o.slow_factor == 0 || o.slow_factor >= 1, "options->slow_factor is ", o.slow_factor,
               ": expected >= 1, or 0 for the default (1)");
  const double factor = o.slow_factor == 0 ? 1.0 : o.slow_factor;
  if (factor == 1) return;  // no rank is slowed, whatever slow_rank says (a zeroed tail)
  PF_CHECK_ARG(p != nullptr, "options->slow_factor is ", factor, " but no schedule is set: it slows a pipeline rank");
  PF_CHECK_ARG(o.slow_rank >= 0 && o.slow_rank < ranks, "options->slow_rank is ", o.slow_rank,
               " with slow_factor ", factor, ": expected a pipeline rank in [0, ", ranks, ")");
  p->slow_rank = o.slow_rank;
  p->slow_factor = factor;
}

namespace {

void become_adaptive(pf_trainer& t, const pf::Batch& micro_batch) {
  const pf::exec::PipelineTrainer& pipeline = *t.pipelined;
  const int64_t rows = micro_batch.rows();
  const pf::plan::ModelProfile profile =
      profile_model_copy(pipeline.model(), micro_batch, {rows}, pipeline.options().base.optimizer, 3);
  std::unique_ptr<pf::exec::PipelineTrainer> own(static_cast<pf::exec::PipelineTrainer*>(t.trainer.release()));
  t.pipelined = nullptr;
  auto adaptive = std::make_unique<pf::plan::AdaptiveTrainer>(std::move(own), profile.at_rows(rows), *t.adapt_pending);
  t.adapt_pending.reset();
  t.adaptive = adaptive.get();
  t.trainer = std::move(adaptive);
}

}  // namespace

void start_adapting(pf_trainer& t, const pf::Batch& batch) {
  if (!t.adapt_pending || batch.rows() % t.step_micro_batches != 0) return;
  become_adaptive(t, batch.micro_batch(0, t.step_micro_batches));
}

void start_adapting_from_loader(pf_trainer& t) {
  if (!t.adapt_pending || t.loader == nullptr) return;
  const int64_t position = t.trainer->metrics().data_position;
  t.loader->begin_step(position, t.step_micro_batches);
  const pf::Batch first = t.loader->next();
  t.loader->seek(position);
  become_adaptive(t, first);
}

}  // namespace pf::capi

extern "C" {

pf_status* pf_trainer_adaptations_json(pf_trainer* trainer, const char** out) {
  return pf::capi::guard(__func__, [&] {
    pf::capi::require(trainer, "trainer");
    pf::capi::require(out, "out");
    trainer->adaptations =
        trainer->adaptive ? pf::plan::adaptations_to_json(trainer->adaptive->adaptations()).dump() : "[]";
    *out = trainer->adaptations.c_str();
  });
}

}  // extern "C"

#include "runtime/schedules/schedule_request.h"

#include "runtime/core/error.h"
#include "runtime/core/limits.h"
#include "runtime/schedules/capped_v.h"
#include "runtime/schedules/generator_parts.h"
#include "runtime/schedules/generators.h"
#include "runtime/schedules/zb_auto.h"

namespace pf::sched {

CostModel UniformCosts::expand(int num_stages) const {
  CostModel c = CostModel::uniform(num_stages, t_f, t_b, t_w, t_comm, m_b, m_w);
  if (t_head > 0) c.t_head.assign(static_cast<size_t>(num_stages), t_head);
  c.check(num_stages);
  return c;
}

Schedule make_schedule(const ScheduleRequest& request) {
  PF_CHECK_ARG(request.ranks >= 1, "stages (pipeline ranks) must be >= 1, got ", request.ranks);
  PF_CHECK_ARG(request.micro_batches >= 1, "microbatches must be >= 1, got ", request.micro_batches);
  PF_CHECK_ARG(request.chunks >= 1 && request.chunks <= limits::kMaxStages, "chunks must be in [1, ",
               limits::kMaxStages, "], got ", request.chunks);
  check_schedule_size(request.ranks, static_cast<int64_t>(request.ranks) * request.chunks, request.micro_batches,
                      request.name);
  PF_CHECK_ARG(request.mem_limit >= 0, "mem-limit must be >= 0 (0 = the schedule's default cap), got ",
               request.mem_limit);
  const bool cost_driven = request.name == "zb-auto" || request.name == "v-half" || request.name == "v-min";
  PF_CHECK_ARG(!cost_driven || request.seq_slices == 1, request.name,
               " does not slice sequences: seq_slices must be 1, got ", request.seq_slices,
               " (seq1f1b takes seq_slices > 1)");
  if (request.name == "zb-auto") {
    PF_CHECK_ARG(request.chunks == 1, "zb-auto has one chunk per rank; got chunks ", request.chunks);
    const double cap = request.mem_limit > 0 ? request.mem_limit : request.ranks;
    return generate_zb_auto(request.ranks, request.micro_batches, request.costs.expand(request.ranks), cap);
  }
  if (request.name == "v-half" || request.name == "v-min") {
    const char* name = request.name.c_str();
    gen::require_v_chunks(name, request.chunks);
    const int default_cap = request.name == "v-half" ? v_half_cap(request.ranks) : v_min_cap(request.ranks);
    const double cap = request.mem_limit > 0 ? request.mem_limit : default_cap;
    return generate_capped_v(name, request.ranks, request.micro_batches, request.costs.expand(2 * request.ranks),
                             cap);
  }
  GeneratorOptions options;
  options.ranks = request.ranks;
  options.micro_batches = request.micro_batches;
  options.chunks = request.chunks;
  options.seq_slices = request.seq_slices;
  return generate_schedule(request.name, options);
}

}  // namespace pf::sched

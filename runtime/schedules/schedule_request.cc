#include "runtime/schedules/schedule_request.h"

#include <algorithm>

#include "runtime/core/error.h"
#include "runtime/core/limits.h"
#include "runtime/schedules/generators.h"

namespace pf::sched {

Schedule make_schedule(const ScheduleRequest& request) {
  PF_CHECK_ARG(request.ranks >= 1, "stages (pipeline ranks) must be >= 1, got ", request.ranks);
  PF_CHECK_ARG(request.micro_batches >= 1, "microbatches must be >= 1, got ", request.micro_batches);
  PF_CHECK_ARG(request.chunks >= 0 && request.chunks <= limits::kMaxStages, "chunks must be in [1, ",
               limits::kMaxStages, "] (or 0 for the schedule's default), got ", request.chunks);
  const int chunks =
      request.chunks == 0 && has_generator(request.name) ? schedule_traits(request.name).default_chunks() : request.chunks;
  check_schedule_size(request.ranks, static_cast<int64_t>(request.ranks) * std::max(chunks, 1), request.micro_batches,
                      request.name);
  PF_CHECK_ARG(request.mem_limit >= 0, "mem-limit must be >= 0 (0 = the schedule's default cap), got ",
               request.mem_limit);
  GeneratorOptions options;
  options.ranks = request.ranks;
  options.micro_batches = request.micro_batches;
  options.chunks = request.chunks;
  options.seq_slices = request.seq_slices;
  options.costs = request.costs;
  options.mem_limit = request.mem_limit;
  return generate_schedule(request.name, options);
}

}  // namespace pf::sched

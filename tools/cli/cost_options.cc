#include "tools/cli/cost_options.h"

#include <CLI/CLI.hpp>

#include "tools/cli/validators.h"

namespace pf::cli {

void add_cost_options(CLI::App* cmd, sched::UniformCosts& c, CostOptions which) {
  const struct {
    const char* name;
    double* value;
    const char* help;
  } options[] = {
      {"--t-f", &c.t_f, "forward time of one micro-batch on one stage"},
      {"--t-b", &c.t_b, "input-gradient backward (B) time"},
      {"--t-w", &c.t_w, "weight-gradient backward (W) time"},
      {"--t-comm", &c.t_comm, "latency of one stage-to-stage transfer"},
      {"--m-b", &c.m_b, "activation memory one micro-batch keeps until its B"},
      {"--m-w", &c.m_w, "memory one micro-batch keeps from B until its W"},
  };
  for (const auto& o : options) {
    const bool memory = o.value == &c.m_b || o.value == &c.m_w;
    if ((memory && which == CostOptions::kTimes) || (!memory && which == CostOptions::kMemory)) continue;
    cmd->add_option(o.name, *o.value, o.help)->check(non_negative_number())->capture_default_str();
  }
}

}  // namespace pf::cli

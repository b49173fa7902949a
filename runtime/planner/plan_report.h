// What the planner tells its user: the ranked table, the JSON of every prediction, and an SVG of
// step time against peak memory per rank with the Pareto front marked.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/planner/candidates.h"

namespace pf::plan {

nlohmann::json prediction_to_json(const Prediction& prediction);

// The plan as JSON ("pipeforge.plan/1"): the batch, the cluster, the memory limit, the counts, the
// first `top` fitting candidates and the choice (or, when nothing fits, the smallest memory that
// works). What `pipeforge plan` writes (with the model and the train config added) and
// pf_plan_to_json returns.
nlohmann::json plan_to_json(const Plan& plan, const PlanRequest& request, size_t top);

// The first `rows` of plan.ranked as a text table, with a line per omitted count and, when nothing
// fits, the smallest memory that works.
std::string ranked_table(const Plan& plan, double limit_bytes, size_t rows);

// Step time (y) against peak memory per rank (x) of every prediction, fitting and not, with the
// memory limit, the Pareto front and the choice (plan.ranked[0]) marked.
std::string plan_svg(const Plan& plan, double limit_bytes, const std::string& title);

}  // namespace pf::plan

// What the training-method benchmarks (bench/async, bench/local) share: evaluating a model on
// held-out batches, and the measured mean action costs of a pipeline's last step as a cost model.
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "runtime/comm/world.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/models/model.h"
#include "runtime/schedules/simulator.h"
#include "runtime/train/batch.h"

namespace pf::bench {

// Mean loss, and accuracy for feature classifiers (-1 for token models), of `model` over
// `batches`, forward only.
std::pair<double, double> evaluate(const Model& model, const std::vector<Batch>& batches);

// Mean duration (us) per (kind, stage) of F, BW, HEAD and UPDATE in the last step's timeline,
// over every process of `world` when it is set (a collective then).
std::map<std::pair<int, int>, double> mean_action_costs(const exec::PipelineTrainer& t, comm::World* world);

// The cost model of those means: t_f, t_b = BW, t_w = 0, t_head per stage, t_step = the slower
// stage's UPDATE.
sched::CostModel measured_cost_model(const std::map<std::pair<int, int>, double>& costs, int num_stages);

}  // namespace pf::bench

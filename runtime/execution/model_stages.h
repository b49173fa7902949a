// The model split as the plan says: each stage's layer range and its Stage (the one stage loop),
// and with two pipelines (Schedule::pipelines = 2, bitpipe) the second copy of the model whose
// stages the second pipeline runs.
#pragma once

#include <memory>
#include <vector>

#include "runtime/execution/partition.h"
#include "runtime/models/model.h"
#include "runtime/run/resolve.h"
#include "runtime/train/stage.h"

namespace pf::exec {

class ModelStages {
 public:
  ModelStages(const Model& model, const PipelinePlan& plan);

  // Per stage of the schedule: its layer range (the second pipeline's repeat the first's).
  const std::vector<StageRange>& ranges() const { return ranges_; }
  // Per stage of the schedule: the stage the executors run. Stable addresses (never resized).
  const std::vector<Stage>& stages() const { return stages_; }
  const Stage& stage(int index) const { return stages_[static_cast<size_t>(index)]; }
  // The second copy (null with one pipeline): same layer names, so the same initial values.
  Model* copy() const { return copy_.get(); }

 private:
  std::vector<StageRange> ranges_;
  std::unique_ptr<Model> copy_;
  std::vector<Stage> stages_;
};

}  // namespace pf::exec

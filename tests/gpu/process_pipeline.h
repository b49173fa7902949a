// What the tests of one GPU per process share (process_pipeline_gpu_test.cc: the ranks as threads of
// a ThreadWorld; mpirun_pipeline_gpu_test.cc: real processes under mpirun): the pipelines they train,
// a run of one, and the bitwise comparison with the one-process run.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/backend/cuda_backend.h"
#include "runtime/comm/world.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/layers/parameter.h"
#include "tests/devices/gpu_test_util.h"  // PF_REQUIRE_GPUS
#include "tests/execution/test_util.h"

namespace pf::exec::gpu_process_test {

// A pipeline case: the schedule, its ranks, the model.
struct Case {
  const char* schedule;
  int ranks;
  bool gpt;
};
inline std::string name_of(const Case& c) {
  return std::string(c.schedule) + " p=" + std::to_string(c.ranks) + (c.gpt ? " gpt" : " mlp");
}

// AdamW with clipping (so that the norm gathered over the processes is the one-process norm).
inline PipelineOptions options(const Case& c) {
  PipelineOptions o;
  o.schedule = c.schedule;
  o.ranks = c.ranks;
  o.base.micro_batches = 4;
  o.base.seed = 11;
  o.base.optimizer.kind = OptimizerConfig::Kind::kAdamW;
  o.base.optimizer.lr = 1e-2f;
  o.base.optimizer.clip_norm = 0.5f;
  o.recv_timeout_seconds = 120;
  return o;
}

// What a run leaves: every step's loss and gradient norm, the parameters' checksum.
struct PipelineRun {
  std::vector<double> losses, grad_norms;
  std::string checksum;
};

// `steps` steps of `c` with `o` (o.world set: this process, or thread, is rank world->rank(); every
// member calls it, the checksum is collective).
inline PipelineRun train(const Case& c, const PipelineOptions& o, int steps = 3) {
  std::shared_ptr<Model> model;
  {
    DeferParameterAllocation defer;  // as the CLI builds it: the trainer allocates what it holds
    model = c.gpt ? testing::tiny_gpt(4) : testing::tiny_mlp();
  }
  PipelineTrainer t(model, o);
  PipelineRun run;
  for (int step = 0; step < steps; ++step) {
    const StepResult r = t.step(testing::data_for(t.model(), o.base.micro_batches, step));
    run.losses.push_back(r.loss);
    run.grad_norms.push_back(r.grad_norm);
  }
  run.checksum = t.parameter_checksum();
  return run;
}

// "" when `got` is bitwise `want`; else the first difference.
inline std::string differences(const PipelineRun& got, const PipelineRun& want) {
  if (got.losses.size() != want.losses.size()) return "step count";
  for (size_t i = 0; i < want.losses.size(); ++i) {
    if (got.losses[i] != want.losses[i])
      return "loss of step " + std::to_string(i) + ": " + std::to_string(got.losses[i]) + " vs " +
             std::to_string(want.losses[i]);
    if (got.grad_norms[i] != want.grad_norms[i]) return "gradient norm of step " + std::to_string(i);
  }
  if (got.checksum != want.checksum) return "parameter checksum " + got.checksum + " vs " + want.checksum;
  return "";
}

}  // namespace pf::exec::gpu_process_test

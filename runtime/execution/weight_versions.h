// The weights one stage of an asynchronous schedule (runtime/schedules/async_schedules.h) uses for
// each forward and backward, its per-stage optimizer and the weight versions it keeps alive. The
// executor calls the hooks around F, BW and UPDATE of the stage's rank; `e` is the micro-batch's
// number since the pipeline was last filled from empty (0, 1, 2, ... across steps).
//
// Rules (docs/SCHEDULES.md, "Asynchronous schedules"; a version j is the weights after j updates):
//  * pipedream: F uses the newest version and stashes it; BW uses the stashed one (consistent
//    gradient). vertical_sync: F of e uses the version stage 0 used, max(0, e - (p - 1)).
//    Rank s keeps p - s versions (vertical sync: p); update after every BW.
//  * pipedream-2bw: gradients accumulate over a batch of m micro-batches (one step); the batch t
//    uses version max(0, t - 1) for F and BW; one update per batch: W(t+1) = W(t) - lr grad(W(t-1)).
//    Two versions.
//  * spectrain: one copy and SGD's momentum buffer v; F and BW use the prediction
//    W - s lr v (version 1, the paper: F s = floor(k/2) + N - k - 1, BW s = floor(k/2), k the stage,
//    N the stages; version 2: F s = N - k - 1, BW reuses F's prediction, kept per micro-batch).
//  * pipemare: one copy; F uses it; BW uses W - D d, D the updates since that micro-batch's F and d
//    the moving average of the per-update change (d <- g d + (1 - g)(W_new - W_old)); the learning
//    rate of update t is lr tau^-(1 - min(t / K, 1)), tau = max(1, the stage's update delay).
// Versions are copied on write: an update copies the current weights only when a micro-batch in
// flight (or, with vertical sync and 2BW, a later forward) still needs them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/optim/optimizer.h"
#include "runtime/run/training_config.h"
#include "runtime/schedules/schedule_traits.h"
#include "runtime/train/stage.h"

namespace pf::exec {

// The schedule's ScheduleTraits::weights. kLocal: local learning (ppll, local-updates): one version,
// the stage and its head updated together.
using AsyncMethod = sched::WeightVersioning;

// The asynchronous methods' options (runtime/run/training_config.h).
using AsyncOptions = pf::AsyncOptions;

struct StageWeightsConfig {
  AsyncMethod method = AsyncMethod::kPipeDream;
  AsyncOptions options;
  int stage = 0;
  int num_stages = 1;      // p (one stage per rank)
  int micro_batches = 1;   // m, the batch of pipedream-2bw
  int update_delay = 0;    // updates between F and BW of a micro-batch in the steady state
  OptimizerConfig optimizer;
};

class StageWeights {
 public:
  // The stage's parameters (and `extra`, e.g. a local head's) must be allocated on the CPU and
  // outlive this object; UPDATE steps all of them.
  StageWeights(const Stage& stage, const StageWeightsConfig& config, std::vector<Parameter*> extra = {});
  ~StageWeights();
  StageWeights(const StageWeights&) = delete;
  StageWeights& operator=(const StageWeights&) = delete;

  // The pipeline refills from empty (the first step, or after a drain): e counts from 0 again.
  void restart();
  void before_forward(int64_t e);
  void after_forward(int64_t e);
  // RECOMPUTE reruns F(e) with the weights F used (stashing methods only: the others keep no copy).
  void before_recompute(int64_t e);
  void after_recompute(int64_t e);
  void before_backward(int64_t e);
  void after_backward(int64_t e);
  // Applies the accumulated gradient (and zeroes it).
  void update(int64_t e);

  int64_t updates() const { return current_; }
  // A checkpoint's stage (pipeline empty): `updates` applied so far (the optimizer's steps).
  void restore_updates(int64_t updates);
  // False for pipemare: its discrepancy average is state a checkpoint does not hold yet.
  bool checkpointable() const { return config_.method != AsyncMethod::kPipeMare; }
  Optimizer& optimizer() { return *optimizer_; }
  // Weight versions alive now and at most so far, counting the current weights: versions kept for
  // micro-batches in flight (spectrain 2: their predictions) plus one.
  int versions_alive() const { return materialized_ + 1; }
  int peak_versions() const { return peak_versions_; }
  size_t version_bytes() const { return version_bytes_; }  // bytes of one version of the stage
  void reset_peak() { peak_versions_ = versions_alive(); }

 private:
  struct Version;
  struct InFlight;
  int64_t forward_version(int64_t e) const;          // stashing methods
  std::shared_ptr<Version> version_object(int64_t v);
  bool stashing() const {  // pipedream and 2BW keep the versions their forwards used
    return config_.method == AsyncMethod::kPipeDream || config_.method == AsyncMethod::kPipeDream2BW;
  }
  std::shared_ptr<Version> new_version(int64_t id);  // without values: the current weights
  void copy_parameters_into(Version& v);            // v keeps a copy of the parameters' values
  std::shared_ptr<Version> materialize_copy();      // a new version holding a copy of the values
  void swap_in(const std::vector<Tensor>& values);  // the parameters now hold `values`
  void swap_out();                                  // back to the current weights
  // Into scratch_: W - scale * buffer[i] per parameter (buffer: a slot name or the discrepancy).
  void predict(float scale, const std::vector<const float*>& buffers, std::vector<Tensor>* out);
  std::vector<const float*> momentum_buffers();     // empty before SGD's first update
  void prune();
  void note_peak();

  StageWeightsConfig config_;
  std::vector<Parameter*> params_;
  std::unique_ptr<Optimizer> optimizer_;
  size_t version_bytes_ = 0;
  int64_t current_ = 0;          // updates applied
  int64_t start_version_ = 0;    // current_ at the last restart
  int64_t next_forward_ = 0;     // e of the next F
  std::shared_ptr<Version> live_;                      // the current version (its values are the parameters)
  std::map<int64_t, std::shared_ptr<Version>> kept_;   // versions later forwards will use
  std::map<int64_t, InFlight> in_flight_;              // e -> what its BW needs
  std::vector<Tensor> saved_;    // the current values while another version is swapped in
  std::vector<Tensor> scratch_;  // predictions (spectrain, pipemare)
  std::vector<Tensor> delta_;    // pipemare: the discrepancy average
  std::vector<Tensor> before_update_;  // pipemare: the weights before the update
  int materialized_ = 0;
  int peak_versions_ = 1;
};

}  // namespace pf::exec

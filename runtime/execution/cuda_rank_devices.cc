// Ranks on CUDA devices. The main thread issues its device work (gradient zeroing, micro-batch
// copies, clipping, the optimizer) on the legacy default stream of each device; the workers'
// streams are non-blocking, so the step boundaries are host waits: before the workers start, and
// after they finish. With one process per rank (plan.rank_device -1 for the others' ranks) only
// this process's rank has a device, a stream and parameters here.
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "runtime/core/error.h"
#include "runtime/execution/rank_devices.h"
#include "runtime/tensor/allocator.h"
#include "runtime/tensor/memory_tracker.h"

namespace pf::exec {
namespace {

class CudaRankDevices : public RankDevices {
 public:
  CudaRankDevices(const PipelinePlan& plan, Model& model, const ModelStages& stages)
      : rank_device_(plan.rank_device),
        timeout_(std::max(600.0, plan.config.recv_timeout_seconds)),
        first_rank_(plan.schedule.placement.rank_of(0)),
        last_rank_(plan.schedule.placement.rank_of(plan.schedule.num_stages() - 1)) {
    for (int d : rank_device_)
      if (d >= 0 && std::find(used_.begin(), used_.end(), d) == used_.end()) used_.push_back(d);
    if (plan.placement == RankPlacement::kProcesses) {
      place_own_parameters(model);
    } else {
      place_parameters(plan, model, stages);
    }
    for (int d : rank_device_) streams_.push_back(d >= 0 ? cuda_backend().new_stream(d) : nullptr);
  }

  Device device(int rank) const override { return Device::cuda(ordinal(rank)); }

  std::vector<std::unique_ptr<BackendScope>> enter(int rank) override {
    std::vector<std::unique_ptr<BackendScope>> scopes;
    scopes.push_back(cuda_backend().device_scope(ordinal(rank)));
    scopes.push_back(cuda_backend().stream_scope(*streams_[static_cast<size_t>(rank)]));
    return scopes;
  }

  void zero_gradients(const std::vector<Parameter*>& first, const std::vector<Parameter*>&) override {
    for (Parameter* p : first) {
      if (p->grad.device().kind == DeviceKind::kCuda) {
        auto scope = cuda_backend().device_scope(p->grad.device().ordinal);
        zero_bytes(p->grad.data<char>(), p->grad.device(), p->grad.nbytes(), "zeroing the gradients");
      } else {
        std::memset(p->grad.data<char>(), 0, p->grad.nbytes());
      }
    }
  }

  // Inputs go where stage 0 runs, targets where the last stage runs (a rank of another process
  // reads neither here: they stay as they are).
  const std::vector<Batch>& to_devices(const std::vector<Batch>& micro, std::vector<Batch>* storage) override {
    storage->clear();
    storage->reserve(micro.size());
    auto to_rank = [&](const Tensor& t, int rank) {
      if (!here(rank) || t.device() == device(rank)) return t;
      auto scope = cuda_backend().device_scope(ordinal(rank));
      return t.to_device(device(rank));
    };
    for (const Batch& b : micro) {
      Batch d;
      d.inputs = to_rank(b.inputs, first_rank_);
      d.targets = to_rank(b.targets, last_rank_);
      storage->push_back(std::move(d));
    }
    return *storage;
  }

  void sync(const std::string& what) override {
    for (int d : used_) {
      auto scope = cuda_backend().device_scope(d);
      const std::unique_ptr<DeviceEvent> done = cuda_backend().new_event(d);
      done->record(nullptr);  // the main thread has no current stream: the legacy default stream
      done->synchronize(timeout_, "pipeline trainer: " + what + " on cuda:" + std::to_string(d));
    }
  }

  void sync_ranks() override {
    for (size_t r = 0; r < streams_.size(); ++r) {
      if (!streams_[r]) continue;  // a rank of another process
      auto scope = cuda_backend().device_scope(streams_[r]->device());
      streams_[r]->synchronize(timeout_, "pipeline trainer: rank " + std::to_string(r) + "'s compute stream on cuda:" +
                                             std::to_string(streams_[r]->device()));
    }
  }

  void move_to_rank(int rank, Tensor& t, std::unique_ptr<BackendScope>& scope) override {
    const int d = ordinal(rank);
    scope.reset();
    scope = cuda_backend().device_scope(d);
    if (t.defined() && t.device() != Device::cuda(d)) t = t.to_device(Device::cuda(d));
  }

 private:
  bool here(int rank) const { return rank_device_[static_cast<size_t>(rank)] >= 0; }
  int ordinal(int rank) const {
    PF_CHECK_ARG(here(rank), "pipeline trainer: rank ", rank, " runs in another process");
    return rank_device_[static_cast<size_t>(rank)];
  }

  // One process per rank: the parameters it holds (ParameterOwnership allocated its rank's and
  // released the others', which Model::to_device leaves alone) go to its device.
  void place_own_parameters(Model& model) {
    PF_CHECK_ARG(used_.size() == 1, "pipeline trainer: one process per rank runs on one device");
    auto scope = cuda_backend().device_scope(used_[0]);
    model.to_device(Device::cuda(used_[0]));
    sync("moving this process's parameters to its device");
  }

  void place_parameters(const PipelinePlan& plan, Model& model, const ModelStages& stages) {
    if (used_.size() == 1) {
      // Every rank on one device: the whole model goes there (Model::device() then says so).
      auto scope = cuda_backend().device_scope(used_[0]);
      model.to_device(Device::cuda(used_[0]));
      sync("moving the model to its device");
      return;
    }
    // Ranks on several devices: each stage's parameters go to its rank's device.
    std::unordered_map<const Parameter*, int> placed;
    auto place = [&](Parameter* p, int ordinal, int stage) {
      auto [it, inserted] = placed.emplace(p, ordinal);
      if (!inserted) {
        PF_CHECK_ARG(it->second == ordinal, "pipeline trainer: parameter '", p->name, "' is used by stage ", stage,
                     " on cuda:", ordinal, " and by a stage on cuda:", it->second,
                     " (parameters shared across devices are not supported)");
        return;
      }
      const Device dev = Device::cuda(ordinal);
      auto scope = cuda_backend().device_scope(ordinal);
      if (p->value.device() != dev) {
        MemoryCategoryScope category(MemoryCategory::kParameters);
        p->value = p->value.to_device(dev);
      }
      if (p->grad.device() != dev) {
        MemoryCategoryScope category(MemoryCategory::kGradients);
        p->grad = p->grad.to_device(dev);
      }
    };
    const auto& layers = model.layers();
    const sched::Schedule& s = plan.schedule;
    for (int st = 0; st < static_cast<int>(stages.ranges().size()); ++st) {
      const int ordinal = rank_device_[static_cast<size_t>(s.placement.rank_of(st))];
      for (int i = stages.ranges()[st].begin; i < stages.ranges()[st].end; ++i)
        for (Parameter* p : layers[static_cast<size_t>(i)]->parameters()) place(p, ordinal, st);
    }
    // Anything not reached through a stage's layers (none in the built-in models) goes with the
    // last stage, where the loss runs.
    const int last = rank_device_[static_cast<size_t>(last_rank_)];
    for (Parameter* p : model.parameters())
      if (!placed.count(p)) place(p, last, s.num_stages() - 1);
    sync("moving the parameters to their devices");
  }

  std::vector<int> rank_device_;  // CUDA ordinal per rank (-1: a rank of another process)
  std::vector<int> used_;         // distinct ordinals
  double timeout_;
  int first_rank_, last_rank_;    // the ranks of the first and the last stage
  std::vector<std::unique_ptr<DeviceStream>> streams_;  // per rank: its compute stream (null: another process's)
};

}  // namespace

std::unique_ptr<RankDevices> make_cuda_rank_devices(const PipelinePlan& plan, Model& model, const ModelStages& stages) {
  return std::make_unique<CudaRankDevices>(plan, model, stages);
}

}  // namespace pf::exec

#include "runtime/execution/rank_devices.h"

#include <cstring>

namespace pf::exec {
namespace {

class CpuRankDevices : public RankDevices {
 public:
  Device device(int) const override { return Device::cpu(); }
  std::vector<std::unique_ptr<BackendScope>> enter(int) override { return {}; }
  void zero_gradients(const std::vector<Parameter*>& first, const std::vector<Parameter*>& copies) override {
    for (const std::vector<Parameter*>* list : {&first, &copies})
      for (Parameter* p : *list) std::memset(p->grad.data<char>(), 0, p->grad.nbytes());
  }
  const std::vector<Batch>& to_devices(const std::vector<Batch>& micro, std::vector<Batch>*) override { return micro; }
  void sync(const std::string&) override {}
  void sync_ranks() override {}
  void move_to_rank(int, Tensor&, std::unique_ptr<BackendScope>&) override {}
};

}  // namespace

std::unique_ptr<RankDevices> make_rank_devices(const PipelinePlan& plan, Model& model, const ModelStages& stages) {
  if (!plan.rank_device.empty()) return make_cuda_rank_devices(plan, model, stages);  // threads or processes
  return std::make_unique<CpuRankDevices>();
}

}  // namespace pf::exec

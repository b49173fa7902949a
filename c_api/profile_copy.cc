#include "c_api/profile_copy.h"

#include "runtime/models/builders.h"

namespace pf::capi {

pf::plan::ModelProfile profile_model_copy(const pf::Model& model, const pf::Batch& batch,
                                          const std::vector<int64_t>& rows, const pf::OptimizerConfig& optimizer,
                                          int repeats, std::shared_ptr<pf::Model>* copy) {
  std::shared_ptr<pf::Model> twin = pf::build_model_from_json_text(model.to_json().dump());
  pf::plan::ModelProfile profile = pf::plan::profile_model(
      *twin, rows, [&](int64_t r) { return batch.micro_batch(0, static_cast<int>(batch.rows() / r)); }, optimizer,
      repeats);
  if (copy != nullptr) *copy = std::move(twin);
  return profile;
}

}  // namespace pf::capi

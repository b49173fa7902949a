#include "c_api/loader_source.h"

#include <string>

#include "c_api/guard.h"
#include "c_api/struct_io.h"
#include "c_api/tensor_view.h"
#include "runtime/core/error.h"

namespace pf::capi {
namespace {

// Takes ownership of a status a callback returned and throws it as a kCallbackError.
[[noreturn]] void throw_callback_error(pf_status* status, const std::string& context) {
  std::string message = status->message;
  const pf_code code = status->code;
  if (!is_static_status(status)) delete status;
  fail(ErrorCode::kCallbackError, context, ": ", message, " [callback returned ", pf_code_name(code), "]");
}

}  // namespace

LoaderSource::~LoaderSource() {
  if (loader_.destroy != nullptr) loader_.destroy(loader_.user_data);
}

void LoaderSource::begin_step(int64_t position, int count) {
  position_ = position;
  step_start_ = position;
  step_count_ = count;
}

std::string LoaderSource::where() const {
  return "micro-batch " + std::to_string(position_ - step_start_) + " of " + std::to_string(step_count_) +
         " (data position " + std::to_string(position_) + ")";
}

Batch LoaderSource::next() {
  if (loader_next_ != position_ && loader_.seek != nullptr) {
    loader_next_ = -1;
    if (pf_status* status = loader_.seek(loader_.user_data, position_)) {
      throw_callback_error(status, "data loader seek(" + std::to_string(position_) + ") failed before " + where());
    }
  }
  loader_next_ = -1;
  pf_micro_batch batch{};
  batch.struct_size = sizeof(pf_micro_batch);
  if (pf_status* status = loader_.next(loader_.user_data, position_, &batch)) {
    throw_callback_error(status, "data loader failed at " + where());
  }
  loader_next_ = position_ + 1;
  Batch out{tensor_from_view(batch.inputs, "data loader " + where() + ": inputs"),
            tensor_from_view(batch.targets, "data loader " + where() + ": targets")};
  position_ += 1;
  return out;
}

std::unique_ptr<LoaderSource> adopt_loader(const pf_data_loader* loader) {
  if (loader == nullptr) return nullptr;
  const pf_data_loader copy = read_struct(*loader, kDataLoaderV1Size, "loader", "pf_data_loader", pf_data_loader{});
  PF_CHECK_ARG(copy.next != nullptr, "loader->next is NULL");
  return std::make_unique<LoaderSource>(copy);
}

}  // namespace pf::capi

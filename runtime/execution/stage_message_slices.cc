#include "runtime/execution/stage_message_slices.h"

#include <cstring>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/limits.h"

namespace pf::exec {
namespace {

constexpr int64_t kFloatsPerValue = sizeof(int64_t) / sizeof(float);  // a header value: two floats
constexpr int64_t kMaxRank = 8;

int64_t per_member(int64_t numel, int members) { return (numel + members - 1) / members; }

int64_t header_floats(size_t rank) { return kFloatsPerValue * (1 + static_cast<int64_t>(rank)); }

void put(float* header, int64_t index, int64_t value) {
  std::memcpy(header + kFloatsPerValue * index, &value, sizeof(value));
}

int64_t get(const float* header, int64_t index) {
  int64_t value;
  std::memcpy(&value, header + kFloatsPerValue * index, sizeof(value));
  return value;
}

}  // namespace

int64_t slice_message_bytes(const Shape& shape, int members) {
  return static_cast<int64_t>(sizeof(float)) * (header_floats(shape.size()) + per_member(shape_numel(shape), members));
}

Tensor slice_message(const Tensor& whole, const TensorParallelGroup& group) {
  PF_CHECK_ARG(whole.defined() && whole.dtype() == DType::kF32 && whole.rank() >= 1 && whole.rank() <= kMaxRank,
               "pipeline message slices: expected an f32 tensor of rank 1 to ", kMaxRank);
  if (whole.device().kind != DeviceKind::kCpu)  // a CUDA rank's: sliced on the host, sent from its device
    return slice_message(whole.to_device(Device::cpu()), group).to_device(whole.device());
  const int members = group.size();
  const int64_t numel = whole.numel(), part = per_member(numel, members);
  const int64_t header = header_floats(whole.shape().size());
  Tensor message = Tensor::empty({header + part});
  float* out = message.f32();
  put(out, 0, static_cast<int64_t>(whole.rank()));
  for (size_t d = 0; d < whole.shape().size(); ++d) put(out, 1 + static_cast<int64_t>(d), whole.shape()[d]);
  const int64_t begin = std::min(numel, part * group.rank()), end = std::min(numel, begin + part);
  if (end > begin) std::memcpy(out + header, whole.f32() + begin, static_cast<size_t>(end - begin) * sizeof(float));
  for (int64_t i = end - begin; i < part; ++i) out[header + i] = 0.0f;
  return message;
}

Tensor gather_slice_message(const Tensor& message, TensorParallelGroup& group, const std::string& what) {
  PF_CHECK_ARG(message.defined() && message.dtype() == DType::kF32 && message.rank() == 1 &&
                   message.numel() >= header_floats(1),
               what, ": expected a slice message (f32 [header + slice]), got ",
               message.defined() ? dtype_name(message.dtype()) : "undefined", " ", shape_to_string(message.shape()));
  if (message.device().kind != DeviceKind::kCpu)
    return gather_slice_message(message.to_device(Device::cpu()), group, what).to_device(message.device());
  const float* in = message.f32();
  const int64_t rank = get(in, 0);
  PF_CHECK_ARG(rank >= 1 && rank <= kMaxRank && message.numel() >= header_floats(static_cast<size_t>(rank)), what,
               ": a slice message's header names ", rank, " dimensions in ", message.numel(), " floats");
  Shape shape;
  int64_t numel = 1;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t extent = get(in, 1 + d);
    PF_CHECK_ARG(extent >= 1 && extent <= limits::kMaxDimension && numel <= limits::max_message_bytes() / extent, what,
                 ": a slice message's header has dimension ", d, " of ", extent);
    shape.push_back(extent);
    numel *= extent;
  }
  const int64_t header = header_floats(shape.size()), part = per_member(numel, group.size());
  PF_CHECK_ARG(message.numel() == header + part, what, ": a slice message of ", shape_to_string(shape), " over ",
               group.size(), " members holds ", part, " floats, this one ", message.numel() - header);
  const std::vector<char> all =
      group.all_gather(in + header, static_cast<size_t>(part) * sizeof(float), what + " (gathering its slices)");
  Tensor whole = Tensor::empty(shape);
  std::memcpy(whole.f32(), all.data(), static_cast<size_t>(numel) * sizeof(float));
  return whole;
}

}  // namespace pf::exec

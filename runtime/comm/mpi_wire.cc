#include "runtime/comm/mpi_wire.h"

#include "runtime/core/error.h"
#include "runtime/core/limits.h"

namespace pf::comm {

namespace {
constexpr int kKinds = 7;  // MessageKind's values

bool valid_dtype(int32_t d) {
  return d == static_cast<int32_t>(DType::kF32) || d == static_cast<int32_t>(DType::kBF16) ||
         d == static_cast<int32_t>(DType::kF16) || d == static_cast<int32_t>(DType::kI32);
}
}  // namespace

WireHeader make_wire_header(const MessageKey& key, const Tensor& tensor) {
  PF_CHECK_ARG(tensor.rank() <= kMaxWireDims, send_action_name(key), ": a tensor of ", tensor.rank(),
               " dimensions cannot be sent (at most ", kMaxWireDims, ")");
  WireHeader h;
  h.kind = static_cast<int32_t>(key.kind);
  h.micro_batch = key.micro_batch;
  h.stage = key.stage;
  h.dtype = static_cast<int32_t>(tensor.dtype());
  h.ndim = tensor.rank();
  for (int i = 0; i < tensor.rank(); ++i) h.dims[i] = tensor.shape()[i];
  h.payload_bytes = tensor.nbytes();
  return h;
}

WireTensor check_wire_header(const WireHeader& h, const MessageKey& expected, int64_t max_bytes,
                             const std::string& where) {
  if (h.magic != kWireMagic) {
    fail(ErrorCode::kDataLoss, where, ": the message header has magic 0x", std::hex, h.magic, " instead of 0x",
         kWireMagic, std::dec, " (not a PipeForge tensor, or another format version)");
  }
  if (h.kind != static_cast<int32_t>(expected.kind) || h.micro_batch != expected.micro_batch ||
      h.stage != expected.stage) {
    fail(ErrorCode::kDataLoss, where, ": the header is for kind ", h.kind, ", micro-batch ", h.micro_batch,
         ", stage ", h.stage, " but arrived on the tag of kind ", static_cast<int>(expected.kind), ", micro-batch ",
         expected.micro_batch, ", stage ", expected.stage);
  }
  if (!valid_dtype(h.dtype)) fail(ErrorCode::kDataLoss, where, ": the header has unknown dtype ", h.dtype);
  if (h.ndim < 0 || h.ndim > kMaxWireDims) {
    fail(ErrorCode::kDataLoss, where, ": the header has ", h.ndim, " dimensions (0 to ", kMaxWireDims, " allowed)");
  }
  WireTensor out;
  out.dtype = static_cast<DType>(h.dtype);
  int64_t bytes = static_cast<int64_t>(dtype_size(out.dtype));
  for (int i = 0; i < h.ndim; ++i) {
    const int64_t d = h.dims[i];
    if (d < 0 || d > limits::kMaxDimension) {
      fail(ErrorCode::kDataLoss, where, ": the header's dimension ", i, " is ", d, " (0 to ", limits::kMaxDimension,
           " allowed)");
    }
    if (__builtin_mul_overflow(bytes, d, &bytes) || bytes > max_bytes) {
      fail(ErrorCode::kDataLoss, where, ": the header's shape needs more than the limit of ", max_bytes,
           " bytes for one message");
    }
    out.shape.push_back(d);
  }
  if (bytes > max_bytes) {
    fail(ErrorCode::kDataLoss, where, ": the header's shape needs ", bytes, " bytes, more than the limit of ",
         max_bytes);
  }
  if (h.payload_bytes != static_cast<uint64_t>(bytes)) {
    fail(ErrorCode::kDataLoss, where, ": the header announces ", h.payload_bytes, " payload bytes but its shape ",
         shape_to_string(out.shape), " of ", dtype_name(out.dtype), " holds ", bytes);
  }
  out.bytes = static_cast<size_t>(bytes);
  return out;
}

TagLayout::TagLayout(int max_stages, int max_micro_batches, int64_t tag_ub)
    : max_stages_(max_stages), max_micro_batches_(max_micro_batches) {
  PF_CHECK_ARG(max_stages >= 1 && max_stages <= limits::kMaxStages, "MPI transport: max_stages must be in [1, ",
               limits::kMaxStages, "], got ", max_stages);
  PF_CHECK_ARG(max_micro_batches >= 1 && max_micro_batches <= limits::kMaxMicroBatches,
               "MPI transport: max_micro_batches must be in [1, ", limits::kMaxMicroBatches, "], got ",
               max_micro_batches);
  PF_CHECK_ARG(largest() <= tag_ub, "MPI transport: ", max_stages, " stages x ", max_micro_batches,
               " micro-batches need tags up to ", largest(), " but this MPI allows at most ", tag_ub,
               " (MPI_TAG_UB); lower max_stages or max_micro_batches");
}

int64_t TagLayout::largest() const {
  return (int64_t{max_micro_batches_} * max_stages_ * kKinds) * 2 - 1;
}

void TagLayout::check_key(const MessageKey& key, const std::string& where) const {
  const int kind = static_cast<int>(key.kind);
  PF_CHECK_ARG(kind >= 0 && kind < kKinds, where, ": unknown message kind ", kind);
  PF_CHECK_ARG(key.stage >= 0 && key.stage < max_stages_, where, ": stage ", key.stage,
               " is outside this transport's [0, ", max_stages_, ") (max_stages)");
  PF_CHECK_ARG(key.micro_batch >= 0 && key.micro_batch < max_micro_batches_, where, ": micro-batch ",
               key.micro_batch, " is outside this transport's [0, ", max_micro_batches_, ") (max_micro_batches)");
}

int TagLayout::tag(const MessageKey& key, int part) const {
  const int64_t t =
      ((int64_t{key.micro_batch} * max_stages_ + key.stage) * kKinds + static_cast<int>(key.kind)) * 2 + part;
  return static_cast<int>(t);
}

}  // namespace pf::comm

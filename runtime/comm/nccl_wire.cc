#include "runtime/comm/nccl_wire.h"

namespace pf::comm::nccl_wire {

Header make_header(int64_t seq, const MessageKey& key, const Tensor& t, int src_rank) {
  Header h{};
  h[kFieldMagic] = kMagic;
  h[kFieldSeq] = seq;
  h[kFieldKind] = static_cast<int64_t>(key.kind);
  h[kFieldMicroBatch] = key.micro_batch;
  h[kFieldStage] = key.stage;
  h[kFieldDType] = static_cast<int64_t>(t.dtype());
  h[kFieldSrcRank] = src_rank;
  h[kFieldNDim] = t.rank();
  h[kFieldBytes] = static_cast<int64_t>(t.nbytes());
  for (int i = 0; i < t.rank(); ++i) h[kFieldDims + i] = t.shape()[i];
  return h;
}

std::string check_header(const Header& h, int64_t expected_seq, int expected_src) {
  if (h[kFieldMagic] != kMagic) return "bad magic number";
  if (h[kFieldSeq] != expected_seq) {
    return "sequence number " + std::to_string(h[kFieldSeq]) + ", expected " + std::to_string(expected_seq);
  }
  if (h[kFieldSrcRank] != expected_src) return "source rank " + std::to_string(h[kFieldSrcRank]);
  if (h[kFieldKind] != 0 && h[kFieldKind] != 1) return "message kind " + std::to_string(h[kFieldKind]);
  if (h[kFieldDType] < 0 || h[kFieldDType] > static_cast<int64_t>(DType::kI32)) {
    return "dtype " + std::to_string(h[kFieldDType]);
  }
  if (h[kFieldNDim] < 0 || h[kFieldNDim] > kMaxDims) return "rank " + std::to_string(h[kFieldNDim]);
  int64_t numel = 1;
  for (int i = 0; i < h[kFieldNDim]; ++i) {
    if (h[kFieldDims + i] < 0) return "negative dimension";
    numel *= h[kFieldDims + i];
  }
  if (numel * static_cast<int64_t>(dtype_size(static_cast<DType>(h[kFieldDType]))) != h[kFieldBytes]) {
    return "payload size " + std::to_string(h[kFieldBytes]) + " does not match the shape";
  }
  return "";
}

MessageKey header_key(const Header& h) {
  MessageKey key;
  key.kind = static_cast<MessageKind>(h[kFieldKind]);
  key.micro_batch = static_cast<int>(h[kFieldMicroBatch]);
  key.stage = static_cast<int>(h[kFieldStage]);
  return key;
}

Shape header_shape(const Header& h) {
  return Shape(h.begin() + kFieldDims, h.begin() + kFieldDims + h[kFieldNDim]);
}

DType header_dtype(const Header& h) { return static_cast<DType>(h[kFieldDType]); }

}  // namespace pf::comm::nccl_wire

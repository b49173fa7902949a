// MpiTransport's wire format: a fixed 96-byte header, then the tensor's bytes in chunks of at most
// 1 GiB, each on its own tag derived from the message key. Both ends are the same build on the same
// architecture (the header is sent in host byte order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/comm/transport.h"
#include "runtime/tensor/tensor.h"

namespace pf::comm {

constexpr uint32_t kWireMagic = 0x31544650;  // "PFT1": format version 1
constexpr int kMaxWireDims = 8;
constexpr size_t kPayloadChunkBytes = size_t{1} << 30;

struct WireHeader {
  uint32_t magic = kWireMagic;
  int32_t kind = 0;
  int32_t micro_batch = 0;
  int32_t stage = 0;
  int32_t dtype = 0;
  int32_t ndim = 0;
  int64_t dims[kMaxWireDims] = {};
  uint64_t payload_bytes = 0;
};
static_assert(sizeof(WireHeader) == 96, "the header is sent as 96 bytes");

// The header announcing `tensor` for `key`. kInvalidArgument for more than kMaxWireDims dimensions.
WireHeader make_wire_header(const MessageKey& key, const Tensor& tensor);

struct WireTensor {
  DType dtype = DType::kF32;
  Shape shape;
  size_t bytes = 0;
};

// Checks a received header before anything is allocated: magic, the key it was expected for, the
// dtype, 0..kMaxWireDims dimensions each in [0, limits::kMaxDimension], the byte count equal to the
// shape's size (computed without overflow) and at most max_bytes. Throws kDataLoss naming `where`
// (e.g. "rank 1: 1RECV_F0 from rank 0") and the field.
WireTensor check_wire_header(const WireHeader& header, const MessageKey& expected, int64_t max_bytes,
                             const std::string& where);

// Tags on the point-to-point communicator: ((micro_batch * max_stages + stage) * 4 + kind) * 2 + part,
// part 0 for the header and 1 for the payload; distinct for every key and part.
class TagLayout {
 public:
  // kInvalidArgument unless max_stages, max_micro_batches >= 1 and the largest tag fits tag_ub
  // (the communicator's MPI_TAG_UB).
  TagLayout(int max_stages, int max_micro_batches, int64_t tag_ub);
  int header(const MessageKey& key) const { return tag(key, 0); }
  int payload(const MessageKey& key) const { return tag(key, 1); }
  int64_t largest() const;
  // kInvalidArgument naming `where` when the key's stage or micro-batch is outside the layout.
  void check_key(const MessageKey& key, const std::string& where) const;

 private:
  int tag(const MessageKey& key, int part) const;
  int max_stages_;
  int max_micro_batches_;
};

}  // namespace pf::comm

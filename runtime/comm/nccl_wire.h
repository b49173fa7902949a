// The message header of the NCCL transports (nccl_transport.h: the GPUs of one process;
// nccl_process_transport.h: one GPU per process): 16 int64 words, sent in the same NCCL group as
// the payload that follows (docs/CUDA.md, "The NCCL transport"). Both ends are the same build.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/comm/transport.h"
#include "runtime/tensor/tensor.h"

namespace pf::comm::nccl_wire {

constexpr int kHeaderWords = 16;
constexpr size_t kHeaderBytes = kHeaderWords * sizeof(int64_t);
constexpr int kMaxDims = 7;
constexpr int64_t kMagic = 0x5046'4E43'4831'0001;  // "PFNCH1", format 1

enum Field : int {
  kFieldMagic = 0,
  kFieldSeq = 1,  // per channel: 0, 1, 2, ... in sending order
  kFieldKind = 2,
  kFieldMicroBatch = 3,
  kFieldStage = 4,
  kFieldDType = 5,
  kFieldSrcRank = 6,
  kFieldNDim = 7,
  kFieldBytes = 8,
  kFieldDims = 9,  // kMaxDims words
};
static_assert(kFieldDims + kMaxDims == kHeaderWords, "header layout");

using Header = std::array<int64_t, kHeaderWords>;

// The header of `t` sent as message number `seq` of its channel by rank `src_rank`.
Header make_header(int64_t seq, const MessageKey& key, const Tensor& t, int src_rank);
// Empty when `h` is a well-formed header with the expected sequence number and source; else what is
// wrong with it ("sequence number 3, expected 2"). Only activations and gradients travel over NCCL.
std::string check_header(const Header& h, int64_t expected_seq, int expected_src);
// The parts of a checked header.
MessageKey header_key(const Header& h);
Shape header_shape(const Header& h);
DType header_dtype(const Header& h);

}  // namespace pf::comm::nccl_wire

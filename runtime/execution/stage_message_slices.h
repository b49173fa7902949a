// Pipeline messages between tensor-parallel stages (Megatron's scatter/gather; docs/COMM.md,
// "Pipeline messages at T > 1"). Every member of a stage's group holds the whole stage output, so
// member t sends only its 1/T of it to member t of the next stage's group (and the same for the
// input gradient going back), and the receiving group all-gathers the T slices into the whole
// tensor: each pipeline link carries 1/T of the bytes, the rest travels inside the group.
//
// A slice message is one f32 tensor: a header of (rank, dims...) as int64 values, two floats each,
// then ceil(n / T) floats of the flattened whole (the last member's zero-padded when T does not
// divide n). The receiver checks the header against what arrived before it allocates.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/tensor/tensor.h"
#include "runtime/tensor_parallel/group.h"

namespace pf::exec {

// Member group.rank()'s slice message of `whole` (f32; a CUDA tensor is sliced on the host and the
// message returned on its device, and gather_slice_message likewise).
Tensor slice_message(const Tensor& whole, const TensorParallelGroup& group);
// The whole tensor from this member's slice message `message`, all-gathering the members' slices
// over `group` (a collective: every member calls it for the same message, in the same order).
// kInvalidArgument naming `what` when the message is not a slice message of this group's size.
Tensor gather_slice_message(const Tensor& message, TensorParallelGroup& group, const std::string& what);
// The bytes of one slice message of a whole tensor of `shape` over a group of `members`.
int64_t slice_message_bytes(const Shape& shape, int members);

}  // namespace pf::exec

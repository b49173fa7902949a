// The transport of CUDA ranks in one process, as the executor sees it: one endpoint per rank, in
// process between ranks on one device (stream-ordered) and NCCL across devices. Implemented by the
// CUDA backend (runtime/comm/gpu_transport.h; made through pf::cuda_backend().new_gpu_transport).
#pragma once

#include <cstddef>
#include <string>

#include "runtime/comm/transport.h"

namespace pf::comm {

class GpuTransportGroup {
 public:
  virtual ~GpuTransportGroup() = default;
  // Rank `rank`'s endpoint, for that rank's worker thread, which must have a device scope for the
  // rank's device and (normally) its compute stream as the current stream.
  virtual Transport& endpoint(int rank) = 0;
  // True when messages between a and b go through NCCL (distinct devices), false in process.
  virtual bool uses_nccl(int a, int b) const = 0;
  virtual int nccl_pair_count() const = 0;
  virtual void cancel(const std::string& reason) = 0;
  virtual bool cancelled() const = 0;
  virtual void reset() = 0;
  virtual size_t pending_messages() const = 0;
};

}  // namespace pf::comm

#include "runtime/comm/gpu_transport.h"

#include <algorithm>

#include "runtime/core/error.h"
#include "runtime/devices/cuda/device_copy.h"
#include "runtime/devices/cuda/device_scope.h"
#include "runtime/comm/nccl_transport.h"
#include "runtime/devices/cuda/stream.h"
#include "runtime/tensor/memory_tracker.h"

namespace pf::comm {

GpuTransport::GpuTransport(std::vector<int> devices, const std::vector<std::pair<int, int>>& nccl_pairs,
                           Options options)
    : devices_(std::move(devices)), local_(static_cast<int>(devices_.size()), options.local) {
  const int n = num_ranks();
  for (int r = 0; r < n; ++r) cuda::check_device_ordinal(devices_[r], "GPU transport: rank device");
  NcclTransport::Options nopts;
  nopts.max_pending_sends = options.max_pending_sends;
  for (auto [a, b] : nccl_pairs) {
    PF_CHECK_ARG(a >= 0 && a < n && b >= 0 && b < n, "GPU transport: no rank pair (", a, ", ", b, ") among ", n,
                 " ranks");
    if (a > b) std::swap(a, b);
    if (devices_[a] == devices_[b] || nccl_.count({a, b})) continue;
    // Rank a is the pair transport's rank 0, rank b its rank 1.
    nccl_[{a, b}] = std::make_unique<NcclTransport>(std::vector<int>{devices_[a], devices_[b]}, nopts);
  }
  for (int r = 0; r < n; ++r) endpoints_.push_back(std::make_unique<Endpoint>(this, r));
}

GpuTransport::~GpuTransport() = default;

Transport& GpuTransport::endpoint(int rank) {
  PF_CHECK_ARG(rank >= 0 && rank < num_ranks(), "GPU transport: no rank ", rank, " (", num_ranks(), " ranks)");
  return *endpoints_[rank];
}

NcclTransport& GpuTransport::pair(int a, int b, const MessageKey& key, bool sending) {
  auto it = nccl_.find({std::min(a, b), std::max(a, b)});
  if (it == nccl_.end())
    fail(ErrorCode::kInvalidArgument, "GPU transport: rank ", a, ": ", sending ? send_action_name(key) : recv_action_name(key),
         " (micro-batch ", key.micro_batch, ") with rank ", b, " (cuda:", devices_[a], " / cuda:", devices_[b],
         "): no NCCL channel was set up for this pair");
  return *it->second;
}

namespace {

// NCCL's messages name the pair's own ranks (0 and 1); say which pipeline ranks they are.
[[noreturn]] void rethrow_nccl(const Error& e, int self, int peer, int self_device, int peer_device) {
  throw Error(e.code(), detail::concat("rank ", self, " <-> rank ", peer, " over NCCL (cuda:", self_device,
                                       " / cuda:", peer_device, "; in the message below rank ",
                                       self < peer ? 0 : 1, " is rank ", self, " and rank ", self < peer ? 1 : 0,
                                       " is rank ", peer, "): ", e.what()));
}

}  // namespace

void GpuTransport::send(int from, int to, const MessageKey& key, Tensor tensor, double timeout_seconds) {
  PF_CHECK_ARG(to >= 0 && to < num_ranks(), "GPU transport: rank ", from, ": no rank ", to);
  const int d = devices_[from];
  if (devices_[to] != d) {
    NcclTransport& t = pair(from, to, key, true);
    try {
      t.endpoint(from < to ? 0 : 1).send(from < to ? 1 : 0, key, std::move(tensor), timeout_seconds);
    } catch (const Error& e) {
      rethrow_nccl(e, from, to, d, devices_[to]);
    }
    return;
  }
  PF_CHECK_ARG(tensor.defined() && tensor.device() == Device::cuda(d), "GPU transport: rank ", from, ": ",
               send_action_name(key), ": expected a tensor on cuda:", d, ", got ",
               tensor.defined() ? tensor.device().to_string() : std::string("an undefined tensor"));
  cuda::DeviceScope scope(d);
  cudaStream_t stream = cuda::current_stream_for(d);
  Tensor copy;
  {
    MemoryCategoryScope category(MemoryCategory::kActivations);
    copy = cuda::to_device_async(tensor, Device::cuda(d), stream);
  }
  tensor = Tensor();  // dropped here, on the stream that last used it
  auto ready = std::make_shared<cuda::CudaEvent>(d);
  ready->record(stream);
  const EventKey ek{from, to, static_cast<int>(key.kind), key.micro_batch, key.stage};
  {
    std::lock_guard<std::mutex> lock(events_mutex_);
    events_[ek] = ready;
  }
  try {
    local_.endpoint(from).send(to, key, std::move(copy), timeout_seconds);
  } catch (...) {
    std::lock_guard<std::mutex> lock(events_mutex_);
    events_.erase(ek);
    throw;
  }
}

Tensor GpuTransport::recv(int self, int from, const MessageKey& key, double timeout_seconds) {
  PF_CHECK_ARG(from >= 0 && from < num_ranks(), "GPU transport: rank ", self, ": no rank ", from);
  const int d = devices_[self];
  if (devices_[from] != d) {
    NcclTransport& t = pair(self, from, key, false);
    try {
      return t.endpoint(self < from ? 0 : 1).recv(self < from ? 1 : 0, key, timeout_seconds);
    } catch (const Error& e) {
      rethrow_nccl(e, self, from, d, devices_[from]);
    }
  }
  Tensor t = local_.endpoint(self).recv(from, key, timeout_seconds);
  std::shared_ptr<cuda::CudaEvent> ready;
  {
    std::lock_guard<std::mutex> lock(events_mutex_);
    auto it = events_.find(EventKey{from, self, static_cast<int>(key.kind), key.micro_batch, key.stage});
    if (it != events_.end()) {
      ready = std::move(it->second);
      events_.erase(it);
    }
  }
  PF_INTERNAL_CHECK(ready != nullptr, "GPU transport: rank ", self, ": ", recv_action_name(key),
                    " has no ready event from rank ", from);
  cuda::DeviceScope scope(d);
  ready->make_stream_wait(cuda::current_stream_for(d));
  return t;
}

void GpuTransport::cancel(const std::string& reason) {
  local_.cancel(reason);
  for (auto& kv : nccl_) kv.second->cancel(reason);
}

bool GpuTransport::cancelled() const {
  if (local_.cancelled()) return true;
  for (const auto& kv : nccl_)
    if (kv.second->cancelled()) return true;
  return false;
}

void GpuTransport::reset() {
  local_.reset();
  {
    std::lock_guard<std::mutex> lock(events_mutex_);
    events_.clear();
  }
  for (auto& kv : nccl_) kv.second->reset();
}

size_t GpuTransport::pending_messages() const {
  size_t n = local_.pending_messages();
  for (const auto& kv : nccl_) n += kv.second->pending_messages();
  return n;
}

}  // namespace pf::comm

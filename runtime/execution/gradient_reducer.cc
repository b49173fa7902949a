#include "runtime/execution/gradient_reducer.h"

#include <chrono>
#include <cstring>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/train/trainer.h"

namespace pf::exec {

GradientReduction parse_gradient_reduction(const std::string& name) {
  if (name == "allreduce") return GradientReduction::kAllReduce;
  if (name == "deterministic") return GradientReduction::kDeterministic;
  fail(ErrorCode::kInvalidArgument, "gradient_reduction: '", name, "' is not one of allreduce, deterministic");
}

GradientReducer::GradientReducer(std::shared_ptr<comm::World> group, GradientReduction mode, double timeout_seconds)
    : group_(std::move(group)), mode_(mode), timeout_seconds_(timeout_seconds) {
  PF_CHECK_ARG(group_ != nullptr, "gradient reducer: no data-parallel group");
  thread_ = std::thread([this] { run(); });
}

GradientReducer::~GradientReducer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shutdown_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void GradientReducer::submit(int stage, std::vector<Parameter*> params) {
  std::shared_ptr<DeviceEvent> ready;
  if (!params.empty() && params.front()->grad.device().kind == DeviceKind::kCuda) {
    ready = cuda_backend().new_event(params.front()->grad.device().ordinal);
    ready->record(nullptr);  // this worker's current stream
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_) return;
    queue_.push_back(Request{stage, std::move(params), std::move(ready)});
    ++in_flight_;
  }
  changed_.notify_all();
}

void GradientReducer::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return in_flight_ == 0; });
  busy_seconds_ = 0;
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void GradientReducer::set_timeout_seconds(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  timeout_seconds_ = seconds;
}

double GradientReducer::busy_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return busy_seconds_;
}

void GradientReducer::run() {
  while (true) {
    Request request;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return shutdown_ || !queue_.empty(); });
      if (queue_.empty()) return;  // shutdown
      request = std::move(queue_.front());
      queue_.pop_front();
    }
    const auto start = std::chrono::steady_clock::now();
    std::exception_ptr failure;
    try {
      reduce(request);
    } catch (const Error& e) {
      failure = std::make_exception_ptr(Error(e.code(), std::string(e.what()) + " (ALLREDUCE of stage " +
                                                            std::to_string(request.stage) + ")"));
    } catch (...) {
      failure = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      busy_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (failure && !error_) error_ = failure;
      if (error_) {  // drop what is queued: the step has failed
        in_flight_ -= static_cast<int>(queue_.size());
        queue_.clear();
      }
      --in_flight_;
    }
    changed_.notify_all();
  }
}

void GradientReducer::reduce(const Request& request) {
  double timeout;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    timeout = timeout_seconds_;
  }
  std::unique_ptr<BackendScope> device;
  if (request.ready) {  // CUDA gradients: through host copies, once the worker's stream has them
    device = cuda_backend().device_scope(request.params.front()->grad.device().ordinal);
    request.ready->synchronize(timeout, "data-parallel reduction: waiting for stage " +
                                            std::to_string(request.stage) + "'s gradients on the device");
  }
  size_t n = 0;
  for (const Parameter* p : request.params) n += static_cast<size_t>(p->grad.numel());
  std::vector<float> packed(n);
  size_t offset = 0;
  for (const Parameter* p : request.params) {
    const Tensor host = request.ready ? p->grad.to_device(Device::cpu()) : p->grad;
    std::memcpy(packed.data() + offset, host.data<char>(), p->grad.nbytes());
    offset += static_cast<size_t>(p->grad.numel());
  }
  if (mode_ == GradientReduction::kAllReduce) {
    group_->all_reduce_sum(packed.data(), n, timeout);
  } else {
    const std::vector<char> all = group_->all_gather(packed.data(), n * sizeof(float), timeout);
    std::memcpy(packed.data(), all.data(), n * sizeof(float));  // replica 0
    std::vector<float> replica(n);
    for (int d = 1; d < group_->size(); ++d) {
      std::memcpy(replica.data(), all.data() + static_cast<size_t>(d) * n * sizeof(float), n * sizeof(float));
      add_replica_gradient(packed.data(), replica.data(), static_cast<int64_t>(n));
    }
  }
  offset = 0;
  for (Parameter* p : request.params) {
    const size_t count = static_cast<size_t>(p->grad.numel());
    if (request.ready) {
      p->grad.copy_from(Tensor::from_vector(p->grad.shape(), std::vector<float>(packed.begin() + offset,
                                                                                packed.begin() + offset + count)));
    } else {
      std::memcpy(p->grad.data<char>(), packed.data() + offset, p->grad.nbytes());
    }
    offset += count;
  }
}

}  // namespace pf::exec

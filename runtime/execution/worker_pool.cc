#include "runtime/execution/worker_pool.h"

#include <pthread.h>
#include <sched.h>

#include <string>

#include "runtime/core/log.h"
#include "runtime/kernels/cpu/blas.h"

namespace pf::exec {

WorkerPool::WorkerPool(const std::vector<int>& ranks, std::vector<int> cpu_affinity, int blas_threads,
                       std::function<void(int, std::exception_ptr)> on_failure)
    : cpu_affinity_(std::move(cpu_affinity)), blas_threads_(blas_threads), on_failure_(std::move(on_failure)) {
  try {
    for (int r : ranks) threads_.emplace_back([this, r] { main(r); });
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      shutdown_ = true;
    }
    start_cv_.notify_all();
    for (auto& t : threads_) t.join();
    throw;
  }
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shutdown_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

std::exception_ptr WorkerPool::run(const std::function<void(int rank)>& job) {
  start(job);
  return wait();
}

void WorkerPool::start(std::function<void(int rank)> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    started_job_ = std::move(job);
    job_ = &started_job_;
    error_ = nullptr;
    running_ = static_cast<int>(threads_.size());
    generation_ += 1;
    started_ = true;
  }
  start_cv_.notify_all();
}

std::exception_ptr WorkerPool::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return running_ == 0; });
  job_ = nullptr;
  started_job_ = nullptr;
  started_ = false;
  std::exception_ptr error = error_;
  error_ = nullptr;
  return error;
}

void WorkerPool::main(int rank) {
  if (!cpu_affinity_.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu_affinity_[static_cast<size_t>(rank) % cpu_affinity_.size()], &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0)
      log(LogLevel::kWarning, "pipeline trainer: could not pin rank " + std::to_string(rank));
  }
  uint64_t seen = 0;
  while (true) {
    const std::function<void(int)>* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_cv_.wait(lock, [&] { return shutdown_ || generation_ != seen; });
      if (shutdown_) return;
      seen = generation_;
      job = job_;
    }
    cpu::set_blas_threads_for_this_thread(blas_threads_);
    try {
      (*job)(rank);
    } catch (...) {
      const std::exception_ptr e = std::current_exception();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = e;  // the first failure is the root cause
      }
      if (on_failure_) on_failure_(rank, e);
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--running_ == 0) done_cv_.notify_all();
    }
  }
}

}  // namespace pf::exec

// The persistent worker threads of a pipeline trainer: one per rank this process runs, pinned to a
// CPU when asked, each with its BLAS thread count. A step hands every worker one job and waits for
// them all (the step barrier); the first failure is the step's error.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pf::exec {

class WorkerPool {
 public:
  // `ranks`: the ranks this process runs, a thread each. Worker r is pinned to CPU
  // cpu_affinity[r % size] when cpu_affinity is not empty. `on_failure(rank, error)` runs on the
  // failing rank's thread right after its job threw (to stop the other ranks).
  WorkerPool(const std::vector<int>& ranks, std::vector<int> cpu_affinity, int blas_threads,
             std::function<void(int rank, std::exception_ptr error)> on_failure);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs job(rank) on every worker and waits for all of them; returns the first failure (the root
  // cause; later ones are usually the other ranks being cancelled), or null.
  std::exception_ptr run(const std::function<void(int rank)>& job);
  // run() in two halves: start() hands job(rank) to every worker and returns at once (the job is
  // copied and kept until wait()); wait() waits for them all and returns the first failure. One
  // job at a time.
  void start(std::function<void(int rank)> job);
  std::exception_ptr wait();
  bool started() const { return started_; }

 private:
  void main(int rank);

  std::vector<int> cpu_affinity_;
  int blas_threads_;
  std::function<void(int, std::exception_ptr)> on_failure_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable start_cv_, done_cv_;
  uint64_t generation_ = 0;
  int running_ = 0;
  bool shutdown_ = false;
  const std::function<void(int)>* job_ = nullptr;
  std::function<void(int)> started_job_;  // start()'s
  bool started_ = false;
  std::exception_ptr error_;
};

}  // namespace pf::exec

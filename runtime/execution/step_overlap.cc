#include "runtime/execution/step_overlap.h"

#include "runtime/core/error.h"

namespace pf::exec {

StepOverlap::StepOverlap(int local_ranks, std::function<bool()> stopped)
    : local_ranks_(local_ranks), stopped_(std::move(stopped)) {}

// Waits for `ready` or stopped(); the stop flag is polled, since what stops a run (a rank group
// cancelled by another process) does not notify this condition variable.
template <typename Ready>
bool StepOverlap::wait(std::unique_lock<std::mutex>& lock, Ready ready) {
  while (!ready()) {
    if (abandoned_ || stopped_()) return false;
    changed_.wait_for(lock, std::chrono::milliseconds(2));
  }
  return true;
}

StepOverlap::Step& StepOverlap::push(std::unique_ptr<Step> step) {
  std::lock_guard<std::mutex> lock(mutex_);
  PF_INTERNAL_CHECK(steps_.empty() || steps_.back()->number + 1 == step->number,
                    "overlapped steps: step ", step->number, " pushed out of order");
  steps_.push_back(std::move(step));
  changed_.notify_all();
  return *steps_.back();
}

StepOverlap::Step* StepOverlap::front() {
  std::lock_guard<std::mutex> lock(mutex_);
  return steps_.empty() ? nullptr : steps_.front().get();
}

StepOverlap::Step* StepOverlap::back() {
  std::lock_guard<std::mutex> lock(mutex_);
  return steps_.empty() ? nullptr : steps_.back().get();
}

size_t StepOverlap::in_flight() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return steps_.size();
}

void StepOverlap::commit(Step& step, bool keep) {
  std::lock_guard<std::mutex> lock(mutex_);
  step.keep = keep;
  step.committed = true;
  changed_.notify_all();
}

void StepOverlap::end_after(int64_t number) {
  std::lock_guard<std::mutex> lock(mutex_);
  last_ = number;
  changed_.notify_all();
}

bool StepOverlap::wait_gradients_final(const Step& step) {
  std::unique_lock<std::mutex> lock(mutex_);
  return wait(lock, [&] { return step.gradients_final == local_ranks_; });
}

bool StepOverlap::wait_updated(const Step& step) {
  std::unique_lock<std::mutex> lock(mutex_);
  return wait(lock, [&] { return step.updated == local_ranks_; });
}

void StepOverlap::pop_front() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!steps_.empty()) steps_.pop_front();
}

void StepOverlap::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  steps_.clear();
  last_ = -1;
  abandoned_ = false;
}

StepOverlap::Step* StepOverlap::next(int64_t number) {
  std::unique_lock<std::mutex> lock(mutex_);
  Step* found = nullptr;
  const bool ready = wait(lock, [&] {
    for (const auto& s : steps_)
      if (s->number == number) found = s.get();
    return found != nullptr || (last_ >= 0 && number > last_);
  });
  if (!ready) return nullptr;
  if (found && steps_.front()->number < number) ++begun_early_;
  return found;
}

int64_t StepOverlap::begun_early() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return begun_early_;
}

void StepOverlap::gradients_final(Step& step) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++step.gradients_final;
  changed_.notify_all();
}

bool StepOverlap::wait_committed(const Step& step) {
  std::unique_lock<std::mutex> lock(mutex_);
  return wait(lock, [&] { return step.committed; });
}

void StepOverlap::updated(Step& step) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++step.updated;
  changed_.notify_all();
}

void StepOverlap::abandon() {
  std::lock_guard<std::mutex> lock(mutex_);
  abandoned_ = true;
  changed_.notify_all();
}

}  // namespace pf::exec

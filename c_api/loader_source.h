// A pf::DataSource over a caller's pf_data_loader vtable. The trainer pulls every micro-batch of a
// step before computing, and seeks back to the step's start if any pull fails, so a failed step
// consumes nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "c_api/pipeforge.h"
#include "runtime/train/batch.h"

namespace pf::capi {

constexpr size_t kDataLoaderV1Size = sizeof(pf_data_loader);

class LoaderSource final : public DataSource {
 public:
  // Adopts `loader` (already validated); its destroy runs in the destructor.
  explicit LoaderSource(const pf_data_loader& loader) : loader_(loader) {}
  ~LoaderSource() override;
  LoaderSource(const LoaderSource&) = delete;
  LoaderSource& operator=(const LoaderSource&) = delete;

  // Called before each step: the step starts at `position` and takes `count` micro-batches.
  void begin_step(int64_t position, int count);

  // Calls loader.next (after loader.seek if the position jumped) and copies the views.
  Batch next() override;
  int64_t position() const override { return position_; }
  // Only records the position: the loader's own seek runs lazily before the next pull, so that
  // this never fails (the trainer calls it while handling another error).
  void seek(int64_t position) override { position_ = position; }

 private:
  std::string where() const;

  pf_data_loader loader_;
  int64_t position_ = 0;
  int64_t step_start_ = 0;
  int step_count_ = 0;
  // The position the loader serves next without a seek (a new loader starts at 0); -1 = unknown.
  int64_t loader_next_ = 0;
};

// The source over a caller's loader (checked and copied; user_data adopted), or null for NULL.
std::unique_ptr<LoaderSource> adopt_loader(const pf_data_loader* loader);

}  // namespace pf::capi

// Periodic checkpoints of one run in a folder: <folder>/step-<8 digits>.pfckpt (one process) or
// <folder>/step-<8 digits>/ (one process per rank: a sharded checkpoint folder), keeping the newest K.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pf {

class CheckpointSeries {
 public:
  // keep: how many to keep (0 = all). `sharded`: the entries are folders.
  CheckpointSeries(std::string folder, int keep, bool sharded);

  const std::string& folder() const { return folder_; }
  // The path of the checkpoint of `step`.
  std::string path_of(int64_t step) const;
  // Removes all but the newest `keep` entries (the caller just saved one). Failures to remove are
  // logged as warnings: a stale checkpoint costs space, not correctness.
  void prune() const;

 private:
  std::string folder_;
  int keep_;
  bool sharded_;
};

// The steps of the checkpoints in `folder` (files step-N.pfckpt and folders step-N with a
// manifest), ascending; empty when there are none or the folder does not exist.
std::vector<int64_t> checkpoint_steps(const std::string& folder);

// The checkpoint a path names: a series folder's newest checkpoint; any other path as it is (a
// checkpoint file, a sharded checkpoint folder with its manifest.json, or a missing path for the
// loader to report). kNotFound naming the folder when it is a folder with no checkpoint at all.
std::string resolve_checkpoint(const std::string& path);

}  // namespace pf

// What one layer's forward keeps for its backward, for one micro-batch. The runtime can see the
// bytes (and, later, move the tensors to another tier or drop them for recomputation).
// Composite layers keep one child context per sub-layer.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace pf {

class SavedContext {
 public:
  void save(const char* key, Tensor tensor);
  // The tensor saved under key; throws kInternal if missing (e.g. backward without forward).
  const Tensor& get(const char* key) const;
  bool has(const char* key) const;

  // The i-th child context, created on first use.
  SavedContext& child(size_t index);
  size_t num_children() const { return children_.size(); }

  // Scalars a layer needs later (shapes, counts); not charged as memory.
  void set_int(const char* key, int64_t value);
  int64_t get_int(const char* key) const;

  // Sequence slicing (SlimPipe / Seq1F1B): this context belongs to a slice of a micro-batch's
  // token sequence starting at token `position_offset`; `previous` is the same layer's context of
  // the slice before it (nullptr for the first slice), which stays alive until this slice's
  // backward. Set on an empty context; children created afterwards inherit the offset and are
  // linked to previous->child(i) (weakly: a child of a cleared context is gone, and reaching it
  // throws kInternal). clear() unlinks.
  void set_slice(SavedContext* previous, int64_t position_offset);
  SavedContext* previous_slice() const;
  int64_t position_offset() const { return position_offset_; }

  // Bytes of all distinct storages saved here and in children.
  size_t bytes() const;
  void collect_storages(std::unordered_set<const Storage*>* out) const;
  // Per storage, the byte range [first, second) its saved tensors here and in children cover (what
  // moving them copies: a slice of a bigger storage, e.g. a micro-batch of the caller's batch, is
  // its slice). Merged into existing entries of *out.
  void collect_extents(std::unordered_map<const Storage*, std::pair<size_t, size_t>>* out) const;
  // Every saved tensor (recursive), for tiers that move them.
  void for_each_tensor(const std::function<void(Tensor&)>& fn);
  bool empty() const;
  void clear();

 private:
  std::vector<std::pair<const char*, Tensor>> tensors_;
  std::vector<std::pair<const char*, int64_t>> ints_;
  std::vector<std::shared_ptr<SavedContext>> children_;
  SavedContext* previous_slice_ = nullptr;        // set_slice
  std::weak_ptr<SavedContext> previous_child_;    // a child's link, inherited from its parent
  bool linked_child_ = false;
  int64_t position_offset_ = 0;
};

// Activation bytes of a set of saved contexts: per storage, the byte range its saved tensors cover
// (a micro-batch slice of the caller's batch counts as its slice; a context counts the same before
// and after the activation store moved it).
size_t context_bytes(const std::vector<SavedContext>& contexts, const SavedContext* loss_context = nullptr);

}  // namespace pf

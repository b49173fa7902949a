#include "runtime/layers/saved_context.h"

#include <algorithm>
#include <cstring>

#include "runtime/core/error.h"

namespace pf {

void SavedContext::save(const char* key, Tensor tensor) {
  for (auto& entry : tensors_) {
    if (std::strcmp(entry.first, key) == 0) {
      entry.second = std::move(tensor);
      return;
    }
  }
  tensors_.emplace_back(key, std::move(tensor));
}

const Tensor& SavedContext::get(const char* key) const {
  for (const auto& entry : tensors_) {
    if (std::strcmp(entry.first, key) == 0) return entry.second;
  }
  fail(ErrorCode::kInternal, "saved context has no tensor '", key,
       "' (backward called without a matching forward?)");
}

bool SavedContext::has(const char* key) const {
  for (const auto& entry : tensors_) {
    if (std::strcmp(entry.first, key) == 0) return true;
  }
  return false;
}

SavedContext& SavedContext::child(size_t index) {
  while (children_.size() <= index) {
    auto c = std::make_shared<SavedContext>();
    if (SavedContext* previous = previous_slice()) {
      previous->child(children_.size());
      c->previous_child_ = previous->children_[children_.size()];
      c->linked_child_ = true;
    }
    c->position_offset_ = position_offset_;
    children_.push_back(std::move(c));
  }
  return *children_[index];
}

void SavedContext::set_slice(SavedContext* previous, int64_t position_offset) {
  PF_INTERNAL_CHECK(tensors_.empty() && children_.empty(), "saved context: set_slice on a used context");
  previous_slice_ = previous;
  position_offset_ = position_offset;
}

SavedContext* SavedContext::previous_slice() const {
  if (!linked_child_) return previous_slice_;
  const std::shared_ptr<SavedContext> previous = previous_child_.lock();
  PF_INTERNAL_CHECK(previous != nullptr,
                    "saved context: the context of an earlier sequence slice is gone (its backward ran first?)");
  return previous.get();  // owned by the earlier slice's context, which is alive
}

void SavedContext::set_int(const char* key, int64_t value) {
  for (auto& entry : ints_) {
    if (std::strcmp(entry.first, key) == 0) {
      entry.second = value;
      return;
    }
  }
  ints_.emplace_back(key, value);
}

int64_t SavedContext::get_int(const char* key) const {
  for (const auto& entry : ints_) {
    if (std::strcmp(entry.first, key) == 0) return entry.second;
  }
  fail(ErrorCode::kInternal, "saved context has no value '", key, "'");
}

void SavedContext::collect_storages(std::unordered_set<const Storage*>* out) const {
  for (const auto& entry : tensors_) {
    if (entry.second.defined()) out->insert(entry.second.storage());
  }
  for (const auto& c : children_) c->collect_storages(out);
}

void SavedContext::collect_extents(std::unordered_map<const Storage*, std::pair<size_t, size_t>>* out) const {
  for (const auto& entry : tensors_) {
    const Tensor& t = entry.second;
    if (!t.defined()) continue;
    const Storage* s = t.storage();
    const size_t lo = static_cast<size_t>(t.data<const char>() - static_cast<const char*>(s->data()));
    const size_t hi = lo + t.nbytes();
    auto it = out->find(s);
    if (it == out->end()) {
      out->emplace(s, std::make_pair(lo, hi));
    } else {
      it->second.first = std::min(it->second.first, lo);
      it->second.second = std::max(it->second.second, hi);
    }
  }
  for (const auto& c : children_) c->collect_extents(out);
}

size_t SavedContext::bytes() const {
  std::unordered_set<const Storage*> storages;
  collect_storages(&storages);
  size_t total = 0;
  for (const Storage* s : storages) total += s->bytes();
  return total;
}

void SavedContext::for_each_tensor(const std::function<void(Tensor&)>& fn) {
  for (auto& entry : tensors_) fn(entry.second);
  for (auto& c : children_) c->for_each_tensor(fn);
}

bool SavedContext::empty() const {
  if (!tensors_.empty()) return false;
  for (const auto& c : children_) {
    if (!c->empty()) return false;
  }
  return true;
}

void SavedContext::clear() {
  tensors_.clear();
  ints_.clear();
  children_.clear();
  previous_slice_ = nullptr;
  previous_child_.reset();
  linked_child_ = false;
  position_offset_ = 0;
}

size_t context_bytes(const std::vector<SavedContext>& contexts, const SavedContext* loss_context) {
  std::unordered_map<const Storage*, std::pair<size_t, size_t>> extents;
  for (const auto& c : contexts) c.collect_extents(&extents);
  if (loss_context) loss_context->collect_extents(&extents);
  size_t n = 0;
  for (const auto& e : extents) n += e.second.second - e.second.first;
  return n;
}

}  // namespace pf

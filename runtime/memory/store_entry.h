// One offloaded context as the activation store and its tiers see it (internal to runtime/memory):
// its tensors grouped by storage into one packed image, where that image is, and the copies in
// flight.
#pragma once

#include <cstdint>
#include <cstdio>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/backend/cuda_backend.h"
#include "runtime/layers/saved_context.h"

namespace pf::mem {

// A file that is removed when this object dies (or earlier, by remove()).
class TempFile {
 public:
  TempFile() = default;
  ~TempFile() { remove(); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  void set(std::string path) { path_ = std::move(path); }
  const std::string& path() const { return path_; }
  bool present() const { return !path_.empty(); }
  void remove() {
    if (!path_.empty()) {
      std::remove(path_.c_str());
      path_.clear();
    }
  }
  // Gives up ownership without removing the file (it goes back to the tier's spares).
  std::string release() { return std::exchange(path_, std::string()); }

 private:
  std::string path_;
};

struct StoreEntry {
  struct View {
    int group = -1;      // -1: undefined tensor
    size_t offset = 0;   // bytes from the group's image start
    Shape shape;
    DType dtype = DType::kF32;
  };
  // A group = the bytes of one storage that the views use: [lo, hi) of the storage.
  struct Group {
    size_t image_offset = 0;  // where in the image
    size_t bytes = 0;
    DType dtype = DType::kF32;
    bool as_views = true;     // all views share dtype and alignment: restore as views of one tensor
    size_t lead = 0;          // CUDA: lo % 256, kept in front of the restored bytes so that every view
                              // has the address alignment it had (kernels may pick code by alignment)
  };
  uint64_t key = 0;
  std::vector<SavedContext*> contexts;
  std::vector<View> views;
  std::vector<Group> groups;
  size_t total = 0;
  std::vector<Tensor> outgoing;      // device tensors being copied out (dropped by the copy job)
  std::vector<const char*> sources;  // per group: start of its bytes on the device
  std::unique_ptr<char[]> host;      // host tier image
  size_t host_capacity = 0;
  std::string path;                  // file tier: where the image goes (reserve)
  bool reuse_file = false;           // file tier: `path` is a spare file, overwritten in place
  TempFile file;                     // file tier image
  std::vector<Tensor> incoming;      // per view: restored tensors
  std::shared_future<void> out_done, in_done;
  bool prefetch_issued = false;
  // CUDA tensors (cuda_device >= 0): the image in pinned memory, copies on the store's copy stream.
  int cuda_device = -1;
  std::unique_ptr<PinnedBuffer> pinned;
  std::unique_ptr<DeviceEvent> out_event, in_event;
};

// What a copy changes in the store's counters (StoreStats).
struct StoreDelta {
  long long host = 0, file = 0;  // bytes held in host copies / in files
  int files = 0;                 // files present
  size_t out = 0, in = 0;        // bytes copied off the device / back
  int written = 0;               // files written
};

// The restored tensors of `e` from its image: views of `bases[group]` for groups restored as views,
// else new tensors on `device` filled by copy(dst, src, bytes) from `image`. CPU and CUDA alike.
template <typename Copy>
void unpack_views(StoreEntry& e, const std::vector<Tensor>& bases, const char* image, const Device& device,
                  const Copy& copy) {
  e.incoming.assign(e.views.size(), Tensor());
  for (size_t i = 0; i < e.views.size(); ++i) {
    const StoreEntry::View& v = e.views[i];
    if (v.group < 0) continue;
    const StoreEntry::Group& gr = e.groups[static_cast<size_t>(v.group)];
    const int64_t n = shape_numel(v.shape);
    if (gr.as_views) {
      const int64_t first = static_cast<int64_t>((gr.lead + v.offset) / dtype_size(v.dtype));
      e.incoming[i] = bases[static_cast<size_t>(v.group)].slice_rows(first, first + n).reshape(v.shape);
    } else {
      Tensor t = Tensor::empty(v.shape, v.dtype, device);
      if (t.nbytes() > 0) copy(t.data<char>(), image + gr.image_offset + v.offset, t.nbytes());
      e.incoming[i] = t;
    }
  }
}

}  // namespace pf::mem

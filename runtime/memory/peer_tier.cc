// The peer tier (policy balance): the packed image goes to a partner rank's memory through
// Options::send_image and comes back through Options::receive_image.
#include <cstring>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/memory/store_tier.h"
#include "runtime/tensor/memory_tracker.h"

namespace pf::mem {
namespace {

class PeerTier : public StoreTier {
 public:
  PeerTier(const ActivationStore::Options& options, Account account)
      : send_(options.send_image), receive_(options.receive_image), account_(std::move(account)) {
    PF_CHECK_ARG(send_ && receive_, "activation store: the peer tier needs send_image and receive_image");
  }

  void write(StoreEntry& e) override {
    Tensor image;
    {
      MemoryCategoryScope scope(MemoryCategory::kActivations);
      image = Tensor::empty({static_cast<int64_t>((e.total + 3) / 4)}, DType::kI32);
    }
    for (size_t g = 0; g < e.groups.size(); ++g)
      std::memcpy(image.data<char>() + e.groups[g].image_offset, e.sources[g], e.groups[g].bytes);
    e.outgoing.clear();  // the device copy is gone before the image leaves
    send_(e.key, std::move(image));
    account_({0, 0, 0, e.total, 0, 0});
  }
  const char* read(StoreEntry& e, const std::vector<char*>&, std::shared_ptr<void>* keep) override {
    auto image = std::make_shared<Tensor>(receive_(e.key));
    if (!image->defined() || image->nbytes() < e.total)
      fail(ErrorCode::kDataLoss, "activation reload: context ", e.key, " came back with ",
           image->defined() ? image->nbytes() : 0, " bytes, expected ", e.total);
    const char* bytes = image->data<char>();
    *keep = std::move(image);
    return bytes;
  }
  void released(StoreEntry& e) override { account_({0, 0, 0, 0, e.total, 0}); }
  StoreDelta drop(StoreEntry&, bool) override { return {}; }

 private:
  std::function<void(uint64_t, Tensor)> send_;
  std::function<Tensor(uint64_t)> receive_;
  Account account_;
};

}  // namespace

std::unique_ptr<StoreTier> make_peer_tier(const ActivationStore::Options& options, StoreTier::Account account) {
  return std::make_unique<PeerTier>(options, std::move(account));
}

}  // namespace pf::mem

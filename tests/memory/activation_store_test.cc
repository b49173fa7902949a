// ActivationStore: host and file tiers give back the same bytes (and the same view sharing), files
// are removed after reload, on clear() and on destruction; copy errors reach the caller.

#include <gtest/gtest.h>

#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/core/error.h"
#include "runtime/memory/activation_store.h"
#include "runtime/tensor/memory_tracker.h"
#include "tests/util/temp_files.h"

namespace pf::mem {
namespace {

std::string fresh_dir(const std::string& tag) { return pftest::fresh_temp_dir("store_" + tag); }

int files_in(const std::string& dir) { return pftest::count_files(dir); }

// Two contexts; a child; a view sharing storage with a saved tensor; an i32 tensor.
struct Fixture {
  SavedContext a, b;
  Tensor big, ids;
  Fixture() {
    big = Tensor::from_vector({4, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12.5f});
    ids = Tensor::from_ints({3}, {7, -1, 42});
    a.save("x", big);
    a.save("rows", big.slice_rows(1, 3));
    a.child(0).save("flat", big.reshape({12}));
    a.set_int("n", 5);
    b.save("ids", ids);
    b.save("y", Tensor::from_vector({2}, {-0.0f, 3.25f}));
  }
};

void expect_restored(Fixture& f) {
  EXPECT_EQ(f.a.get("x").to_vector(), f.big.to_vector());
  EXPECT_EQ(f.a.get("rows").to_vector(), f.big.slice_rows(1, 3).to_vector());
  EXPECT_EQ(f.a.get("rows").shape(), (Shape{2, 3}));
  EXPECT_EQ(f.a.child(0).get("flat").to_vector(), f.big.to_vector());
  EXPECT_EQ(f.a.get_int("n"), 5);
  EXPECT_EQ(std::memcmp(f.b.get("ids").data<char>(), f.ids.data<char>(), 12), 0);
  EXPECT_EQ(f.b.get("y").to_vector()[1], 3.25f);
  EXPECT_TRUE(std::signbit(f.b.get("y").to_vector()[0]));
  // Views of one storage come back as views of one storage.
  EXPECT_EQ(f.a.get("x").storage(), f.a.get("rows").storage());
  EXPECT_EQ(f.a.get("x").storage(), f.a.child(0).get("flat").storage());
  EXPECT_NE(f.a.get("x").storage(), f.big.storage());
}

TEST(ActivationStore, HostRoundTripIsBitwise) {
  Fixture f;
  ActivationStore store({Tier::kHost, "", "t"});
  const size_t moved = store.offload(1, {&f.a, &f.b});
  EXPECT_EQ(moved, 12 * 4 + 3 * 4 + 2 * 4u);
  EXPECT_FALSE(f.a.has("x") && f.a.get("x").defined());
  EXPECT_TRUE(store.holds(1));
  store.wait_all();
  EXPECT_EQ(store.stats().host_bytes, moved);
  store.prefetch(1);
  store.restore(1);
  EXPECT_FALSE(store.holds(1));
  expect_restored(f);
  const StoreStats s = store.stats();
  EXPECT_EQ(s.offloaded_bytes, moved);
  EXPECT_EQ(s.reloaded_bytes, moved);
  EXPECT_EQ(s.host_bytes, 0u);
  EXPECT_EQ(s.host_peak, moved);
}

TEST(ActivationStore, FileRoundTripReusesTheFileAndClearRemovesIt) {
  const std::string dir = fresh_dir("rt");
  Fixture f;
  ActivationStore store({Tier::kFile, dir, "t"});
  store.offload(7, {&f.a, &f.b});
  store.wait_all();
  EXPECT_EQ(files_in(dir), 1);
  EXPECT_EQ(store.stats().files_present, 1);
  store.restore(7);  // prefetches by itself
  expect_restored(f);
  EXPECT_EQ(store.stats().files_present, 0);  // no image held; the file stays as a spare
  EXPECT_EQ(files_in(dir), 1);
  EXPECT_EQ(store.stats().files_written, 1);
  EXPECT_EQ(store.stats().file_bytes, 0u);
  // The next offload overwrites the spare in place (a smaller image than before: only f.b).
  Fixture g;
  store.offload(8, {&g.b});
  store.restore(8);
  EXPECT_EQ(store.stats().files_written, 2);
  EXPECT_EQ(files_in(dir), 1);
  EXPECT_EQ(std::memcmp(g.b.get("ids").data<char>(), g.ids.data<char>(), 12), 0);
  EXPECT_EQ(g.b.get("y").to_vector()[1], 3.25f);
  store.clear();
  EXPECT_EQ(files_in(dir), 0);
}

TEST(ActivationStore, HostBuffersAreReusedAndGiveTheSameBytes) {
  Fixture f, g;
  ActivationStore store({Tier::kHost, "", "t"});
  store.offload(1, {&f.a, &f.b});
  store.restore(1);
  expect_restored(f);
  store.offload(2, {&g.a, &g.b});  // reuses the first image's buffer
  store.restore(2);
  expect_restored(g);
  EXPECT_EQ(store.stats().host_bytes, 0u);
}

TEST(ActivationStore, ClearAndDestructorRemoveFiles) {
  const std::string dir = fresh_dir("clear");
  {
    Fixture f, g;
    ActivationStore store({Tier::kFile, dir, "t"});
    store.offload(1, {&f.a});
    store.offload(2, {&g.a, &g.b});
    store.wait_all();
    EXPECT_EQ(files_in(dir), 2);
    store.clear();
    EXPECT_EQ(files_in(dir), 0);
    EXPECT_FALSE(store.holds(1));
    store.offload(3, {&f.b});
    store.prefetch(3);  // prefetched but never restored
  }
  EXPECT_EQ(files_in(dir), 0);
}

TEST(ActivationStore, DeviceMemoryIsReleasedWhileOffloaded) {
  // The saved tensors are the only owners: after the copy the activations category falls.
  SavedContext c;
  const int64_t before = memory_tracker(Device::cpu()).stats().current[static_cast<int>(MemoryCategory::kActivations)];
  {
    MemoryCategoryScope scope(MemoryCategory::kActivations);
    c.save("x", Tensor::zeros({1024}));
  }
  const int64_t with = memory_tracker(Device::cpu()).stats().current[static_cast<int>(MemoryCategory::kActivations)];
  EXPECT_GE(with - before, 4096);
  ActivationStore store({Tier::kHost, "", "t"});
  store.offload(1, {&c});
  store.wait_all();
  EXPECT_EQ(memory_tracker(Device::cpu()).stats().current[static_cast<int>(MemoryCategory::kActivations)], before);
  store.restore(1);
  EXPECT_EQ(memory_tracker(Device::cpu()).stats().current[static_cast<int>(MemoryCategory::kActivations)], with);
  EXPECT_EQ(c.get("x").to_vector(), std::vector<float>(1024, 0.0f));
}

TEST(ActivationStore, CopyFailureReachesRestoreAndLeavesNothing) {
  const std::string dir = fresh_dir("efbig");
  Fixture f;
  ActivationStore store({Tier::kFile, dir, "t"});
  // Writes past 0 bytes fail (EFBIG) while the limit holds: the write fails on the copy worker.
  struct rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  signal(SIGXFSZ, SIG_IGN);
  struct rlimit none = saved;
  none.rlim_cur = 0;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &none), 0);
  store.offload(1, {&f.a});
  bool io_error = false;
  try {
    store.restore(1);
  } catch (const Error& e) {
    io_error = e.code() == ErrorCode::kIoError;
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  EXPECT_TRUE(io_error) << "expected an I/O error";
  EXPECT_THROW(store.wait_all(), Error);
  store.clear();
  EXPECT_EQ(store.stats().files_present, 0);
  EXPECT_EQ(files_in(dir), 0);
}

TEST(ActivationStore, FilesGoToAPrivateFolderThatIsMadeAgainWhenDeleted) {
  const std::string dir = fresh_dir("gone");
  Fixture f;
  {
    ActivationStore store({Tier::kFile, dir, "t"});
    ASSERT_EQ(rmdir(dir.c_str()), 0);  // the configured folder vanishes before the first offload
    store.offload(1, {&f.a});
    store.restore(1);
    expect_restored(f);
    // One private folder (mode 0700) holding the spare file (mode 0600).
    ASSERT_EQ(pftest::count_folders(dir), 1);
    DIR* d = opendir(dir.c_str());
    std::string private_dir;
    while (dirent* e = readdir(d)) {
      if (std::string(e->d_name).rfind("pipeforge-t-", 0) == 0) private_dir = dir + "/" + e->d_name;
    }
    closedir(d);
    ASSERT_FALSE(private_dir.empty());
    struct stat st;
    ASSERT_EQ(stat(private_dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    d = opendir(private_dir.c_str());
    int files = 0;
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      ++files;
      ASSERT_EQ(stat((private_dir + "/" + e->d_name).c_str(), &st), 0);
      EXPECT_EQ(st.st_mode & 0777, 0600u);
    }
    closedir(d);
    EXPECT_EQ(files, 1);
    // A temp cleaner removes the private folder and its spare mid-run: the next offload makes a
    // new one instead of failing.
    ASSERT_EQ(std::system(("rm -rf '" + private_dir + "'").c_str()), 0);
    Fixture g;
    store.offload(2, {&g.a, &g.b});
    store.restore(2);
    expect_restored(g);
    EXPECT_EQ(files_in(dir), 1);
  }
  EXPECT_EQ(files_in(dir), 0);
  EXPECT_EQ(pftest::count_folders(dir), 0);  // the private folder goes with the store
}

TEST(ActivationStore, RejectsDoubleOffloadAndBadDir) {
  Fixture f;
  ActivationStore store({Tier::kHost, "", "t"});
  store.offload(1, {&f.a});
  EXPECT_THROW(store.offload(1, {&f.b}), Error);
  EXPECT_THROW(ActivationStore({Tier::kFile, "/proc/definitely/not/here", "t"}), Error);
  ActivationStore resident({Tier::kResident, "", "t"});
  EXPECT_EQ(resident.offload(1, {&f.b}), 0u);
  EXPECT_TRUE(f.b.get("y").defined());
}

TEST(CopyWorker, RunsJobsInOrderAndReportsErrors) {
  CopyWorker w;
  std::vector<int> order;
  for (int i = 0; i < 20; ++i) w.submit([&order, i] { order.push_back(i); });
  auto bad = w.submit([] { fail(ErrorCode::kInternal, "boom"); });
  w.wait_idle();
  ASSERT_EQ(order.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(order[i], i);
  EXPECT_THROW(bad.get(), Error);
}

}  // namespace
}  // namespace pf::mem

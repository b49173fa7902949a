#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/thread_world.h"
#include "runtime/core/error.h"

namespace pf::comm {
namespace {

// Runs fn(rank) on one thread per member; returns each member's error message ("" when none) and
// code.
struct Outcome {
  std::string message;
  ErrorCode code = ErrorCode::kOk;
};
std::vector<Outcome> run_members(int n, const std::function<void(int)>& fn) {
  std::vector<Outcome> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const Error& e) {
        out[r] = Outcome{e.what(), e.code()};
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

std::vector<float> random_floats(int seed, size_t n) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

bool same_bits(const void* a, const void* b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

TEST(ThreadWorld, CollectivesGiveTheSameBitsOnEveryMember) {
  constexpr int n = 4;
  constexpr size_t count = 1000;
  ThreadWorld group(n);
  std::vector<std::vector<float>> sums(n);
  std::vector<std::vector<double>> dsums(n);
  std::vector<std::vector<char>> gathered(n);
  std::vector<std::vector<int32_t>> broadcasts(n);
  std::vector<std::vector<float>> scattered(n, std::vector<float>(count / n));
  auto outcomes = run_members(n, [&](int r) {
    World& w = group.member(r);
    EXPECT_EQ(w.rank(), r);
    EXPECT_EQ(w.size(), n);
    EXPECT_EQ(w.endpoint().rank(), r);
    sums[r] = random_floats(r, count);
    w.all_reduce_sum(sums[r].data(), count, 5.0);
    // The same contributions as n blocks: block r of the sum, the same bits as the all-reduce's.
    w.reduce_scatter_sum(random_floats(r, count).data(), count / n, scattered[r].data(), 5.0);
    for (float x : random_floats(100 + r, count)) dsums[r].push_back(x);
    w.all_reduce_sum(dsums[r].data(), count, 5.0);
    const int32_t mine[2] = {r, 10 * r};
    gathered[r] = w.all_gather(mine, sizeof(mine), 5.0);
    broadcasts[r] = r == 2 ? std::vector<int32_t>{7, 8, 9} : std::vector<int32_t>{0, 0, 0};
    w.broadcast(broadcasts[r].data(), 3 * sizeof(int32_t), 2, 5.0);
    w.barrier(5.0);
  });
  for (const auto& o : outcomes) EXPECT_EQ(o.message, "");
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(scattered[r], std::vector<float>(sums[r].begin() + r * (count / n), sums[r].begin() + (r + 1) * (count / n)))
        << "member " << r;
  // The sum in rank order, as the group computes it.
  std::vector<float> expected = random_floats(0, count);
  std::vector<double> dexpected(count);
  for (size_t i = 0; i < count; ++i) dexpected[i] = random_floats(100, count)[i];
  for (int r = 1; r < n; ++r) {
    const auto x = random_floats(r, count);
    const auto y = random_floats(100 + r, count);
    for (size_t i = 0; i < count; ++i) {
      expected[i] += x[i];
      dexpected[i] += y[i];
    }
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(same_bits(sums[r].data(), expected.data(), count * sizeof(float))) << "rank " << r;
    EXPECT_TRUE(same_bits(dsums[r].data(), dexpected.data(), count * sizeof(double))) << "rank " << r;
    ASSERT_EQ(gathered[r].size(), n * 2 * sizeof(int32_t));
    const auto* g = reinterpret_cast<const int32_t*>(gathered[r].data());
    for (int q = 0; q < n; ++q) {
      EXPECT_EQ(g[2 * q], q);
      EXPECT_EQ(g[2 * q + 1], 10 * q);
    }
    EXPECT_EQ(broadcasts[r], (std::vector<int32_t>{7, 8, 9}));
  }
}

TEST(ThreadWorld, HelpersGatherDoublesAndBroadcastStrings) {
  ThreadWorld group(3);
  std::vector<std::vector<double>> out(3);
  std::vector<std::string> text(3);
  auto outcomes = run_members(3, [&](int r) {
    World& w = group.member(r);
    out[r] = all_gather_doubles(w, {r + 0.5, -r * 1.0}, 5.0);
    text[r] = r == 1 ? "stage plan v2" : "x";
    broadcast_string(w, &text[r], 1, 5.0);
  });
  for (const auto& o : outcomes) EXPECT_EQ(o.message, "");
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(out[r], (std::vector<double>{0.5, -0.0, 1.5, -1.0, 2.5, -2.0}));
    EXPECT_EQ(text[r], "stage plan v2");
  }
}

TEST(ThreadWorld, TimeoutNamesTheMissingRankAndLeavesTheGroupUsable) {
  ThreadWorld group(3);
  const auto start = std::chrono::steady_clock::now();
  auto outcomes = run_members(3, [&](int r) {
    if (r != 2) group.member(r).barrier(0.1);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(outcomes[r].code, ErrorCode::kTimeout) << outcomes[r].message;
    EXPECT_NE(outcomes[r].message.find("rank " + std::to_string(r) + ": barrier timed out after 0.1 s"),
              std::string::npos)
        << outcomes[r].message;
    EXPECT_NE(outcomes[r].message.find("rank 2 has not arrived"), std::string::npos) << outcomes[r].message;
  }
  // The timed-out members withdrew: the next collective pairs up correctly.
  std::vector<float> x(3, 0);
  outcomes = run_members(3, [&](int r) {
    x[r] = float(r + 1);
    group.member(r).all_reduce_sum(&x[r], 1, 5.0);
  });
  for (const auto& o : outcomes) EXPECT_EQ(o.message, "");
  EXPECT_EQ(x, (std::vector<float>{6, 6, 6}));
}

TEST(ThreadWorld, DisagreeingSizesFailOnEveryMemberNamingTheRank) {
  ThreadWorld group(3);
  auto outcomes = run_members(3, [&](int r) {
    char data[8] = {};
    group.member(r).all_gather(data, r == 1 ? 4 : 8, 5.0);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(outcomes[r].code, ErrorCode::kInvalidArgument);
    EXPECT_NE(outcomes[r].message.find("all_gather: rank 1 contributes 4 bytes where the others contribute 8"),
              std::string::npos)
        << outcomes[r].message;
  }
  outcomes = run_members(3, [&](int r) {
    char data[8] = {};
    if (r == 0) {
      group.member(r).broadcast(data, 8, 0, 5.0);
    } else {
      group.member(r).barrier(5.0);
    }
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(outcomes[r].message.find("collectives out of step: rank 0 called broadcast where the others called "
                                       "barrier"),
              std::string::npos)
        << outcomes[r].message;
  }
}

TEST(ThreadWorld, AbortCancelsTheOthersRecvAndCollectives) {
  ThreadWorld group(3);
  std::vector<double> waited(3, 0);
  auto outcomes = run_members(3, [&](int r) {
    World& w = group.member(r);
    const auto start = std::chrono::steady_clock::now();
    try {
      if (r == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        w.abort("disk full");
      } else if (r == 2) {
        w.endpoint().recv(1, MessageKey{MessageKind::kActivation, 5, 2}, 10.0);
      } else {
        w.barrier(10.0);
      }
    } catch (...) {
      waited[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      throw;
    }
  });
  EXPECT_EQ(outcomes[1].message, "");
  EXPECT_EQ(outcomes[2].code, ErrorCode::kCancelled);
  EXPECT_EQ(outcomes[2].message, "rank 2: 2RECV_F5 (peer rank 1) cancelled: rank 1 failed: disk full");
  EXPECT_EQ(outcomes[0].code, ErrorCode::kCancelled);
  EXPECT_EQ(outcomes[0].message, "rank 0: barrier cancelled: rank 1 failed: disk full");
  EXPECT_LT(waited[0], 2.0);
  EXPECT_LT(waited[2], 2.0);
  // The group stays cancelled.
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(group.member(r).aborted());
  EXPECT_TRUE(group.aborted());
  try {
    group.member(0).endpoint().send(1, MessageKey{MessageKind::kActivation, 0, 1}, Tensor::from_vector({1}, {1}), 1.0);
    FAIL() << "send after abort";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCancelled);
    EXPECT_NE(std::string(e.what()).find("rank 1 failed: disk full"), std::string::npos) << e.what();
  }
  try {
    float x = 1;
    group.member(2).all_reduce_sum(&x, 1, 1.0);
    FAIL() << "all_reduce_sum after abort";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCancelled);
    EXPECT_EQ(std::string(e.what()), "rank 2: all_reduce_sum(float) cancelled: rank 1 failed: disk full");
  }
}

TEST(ThreadWorld, ResetMakesTheGroupUsableAgain) {
  ThreadWorld group(2);
  group.member(0).abort("first step failed");
  EXPECT_THROW(group.member(1).barrier(1.0), Error);
  group.reset();
  EXPECT_FALSE(group.aborted());
  EXPECT_FALSE(group.member(1).aborted());
  auto outcomes = run_members(2, [&](int r) {
    World& w = group.member(r);
    w.barrier(5.0);
    if (r == 0) {
      w.endpoint().send(1, MessageKey{MessageKind::kGradient, 3, 0}, Tensor::from_vector({2}, {4, 5}), 5.0);
    } else {
      EXPECT_EQ(w.endpoint().recv(0, MessageKey{MessageKind::kGradient, 3, 0}, 5.0).to_vector(),
                (std::vector<float>{4, 5}));
    }
  });
  for (const auto& o : outcomes) EXPECT_EQ(o.message, "");
}

TEST(ThreadWorld, ResetIsRefusedWhileAMemberIsInsideACollective) {
  ThreadWorld group(2);
  std::thread waiter([&] { group.member(0).barrier(5.0); });
  while (true) {  // until rank 0 is inside the barrier
    try {
      group.reset();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  group.member(1).barrier(5.0);
  waiter.join();
  group.reset();
}

TEST(ThreadWorld, RefusesBadArguments) {
  ThreadWorld group(2);
  EXPECT_THROW(group.member(2), Error);
  try {
    group.member(0).barrier(-1);
    FAIL() << "negative timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  char byte = 0;
  EXPECT_THROW(group.member(0).broadcast(&byte, 1, 5, 1.0), Error);
  EXPECT_EQ(group.member(1).describe(), "thread rank 1 of 2");
}

}  // namespace
}  // namespace pf::comm

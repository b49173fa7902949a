#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "runtime/core/error.h"
#include "runtime/comm/in_process_transport.h"

namespace pf::comm {
namespace {

MessageKey act(int mb, int stage) { return MessageKey{MessageKind::kActivation, mb, stage}; }

TEST(Transport, HandsTheTensorOverWithoutCopying) {
  InProcessTransport t(2);
  Tensor x = Tensor::from_vector({2, 2}, {1, 2, 3, 4});
  t.endpoint(0).send(1, act(0, 1), x, 1.0);
  Tensor y = t.endpoint(1).recv(0, act(0, 1), 1.0);
  EXPECT_EQ(y.storage(), x.storage());
  EXPECT_EQ(t.pending_messages(), 0u);
}

TEST(Transport, MatchesByKeyNotByArrivalOrder) {
  InProcessTransport t(2);
  for (int mb = 0; mb < 3; ++mb) t.endpoint(0).send(1, act(mb, 1), Tensor::from_vector({1}, {float(mb)}), 1.0);
  t.endpoint(1).send(0, MessageKey{MessageKind::kGradient, 0, 0}, Tensor::from_vector({1}, {9}), 1.0);
  EXPECT_EQ(t.endpoint(1).recv(0, act(2, 1), 1.0).to_vector()[0], 2.0f);
  EXPECT_EQ(t.endpoint(1).recv(0, act(0, 1), 1.0).to_vector()[0], 0.0f);
  EXPECT_EQ(t.endpoint(0).recv(1, MessageKey{MessageKind::kGradient, 0, 0}, 1.0).to_vector()[0], 9.0f);
  EXPECT_EQ(t.pending_messages(), 1u);
  t.reset();
  EXPECT_EQ(t.pending_messages(), 0u);
}

TEST(Transport, ReceiveFromAnotherThread) {
  InProcessTransport t(2);
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    t.endpoint(0).send(1, act(4, 1), Tensor::from_vector({1}, {5}), 1.0);
  });
  EXPECT_EQ(t.endpoint(1).recv(0, act(4, 1), 5.0).to_vector()[0], 5.0f);
  sender.join();
}

TEST(Transport, TimeoutNamesRankActionMicroBatchAndPeer) {
  InProcessTransport t(3);
  try {
    t.endpoint(2).recv(1, act(5, 2), 0.02);
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2RECV_F5"), std::string::npos) << msg;
    EXPECT_NE(msg.find("micro-batch 5"), std::string::npos) << msg;
    EXPECT_NE(msg.find("for rank 1"), std::string::npos) << msg;
  }
}

TEST(Transport, CancelWakesEveryWaiter) {
  InProcessTransport t(3);
  std::vector<ErrorCode> codes(2, ErrorCode::kOk);
  std::vector<std::thread> waiters;
  for (int r = 1; r <= 2; ++r) {
    waiters.emplace_back([&, r] {
      try {
        t.endpoint(r).recv(0, act(0, r), 30.0);
      } catch (const Error& e) {
        codes[r - 1] = e.code();
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const auto t0 = std::chrono::steady_clock::now();
  t.cancel("rank 0 failed");
  for (auto& w : waiters) w.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_EQ(codes[0], ErrorCode::kCancelled);
  EXPECT_EQ(codes[1], ErrorCode::kCancelled);
  EXPECT_TRUE(t.cancelled());
  try {
    t.endpoint(0).send(1, act(0, 1), Tensor::from_vector({1}, {1}), 1.0);
    FAIL() << "send after cancel";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCancelled);
    EXPECT_NE(std::string(e.what()).find("rank 0 failed"), std::string::npos);
  }
  t.reset();
  EXPECT_FALSE(t.cancelled());
  t.endpoint(0).send(1, act(0, 1), Tensor::from_vector({1}, {1}), 1.0);
  EXPECT_EQ(t.endpoint(1).recv(0, act(0, 1), 1.0).to_vector()[0], 1.0f);
}

TEST(Transport, BoundedMailboxBlocksTheSender) {
  InProcessTransport::Options o;
  o.mailbox_capacity = 1;
  InProcessTransport t(2, o);
  t.endpoint(0).send(1, act(0, 1), Tensor::from_vector({1}, {0}), 1.0);
  try {
    t.endpoint(0).send(1, act(1, 1), Tensor::from_vector({1}, {1}), 0.02);
    FAIL() << "a full mailbox did not block";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  }
  std::thread receiver([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    t.endpoint(1).recv(0, act(0, 1), 1.0);
  });
  t.endpoint(0).send(1, act(1, 1), Tensor::from_vector({1}, {1}), 5.0);  // room once received
  receiver.join();
  EXPECT_EQ(t.endpoint(1).recv(0, act(1, 1), 1.0).to_vector()[0], 1.0f);
}


}  // namespace
}  // namespace pf::comm

// Ping-pong between two processes (bench/comm/run_pingpong.sh runs it under mpirun -np 2): 1 KiB
// latency (half a round trip, median) and 4 MiB bandwidth (a window of sends, then a short reply),
// through MpiTransport and, in the same run, through raw blocking MPI_Send/MPI_Recv on
// MPI_COMM_WORLD (osu_latency / osu_bw style). Prints one JSON object (rank 0).
//   mpirun -np 2 mpi_pingpong [--label TEXT] [--iterations N] [--windows N]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/comm/mpi_world.h"
#include "runtime/core/error.h"

namespace {

using pf::Tensor;
using pf::comm::MessageKey;
using pf::comm::MessageKind;
using Clock = std::chrono::steady_clock;

constexpr size_t kSmallBytes = 1024;
constexpr size_t kLargeBytes = size_t{4} << 20;
constexpr int kWindow = 16;
constexpr double kTimeout = 30.0;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double median(std::vector<double> v) {  // 0 on rank 1, which only answers
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

const MessageKey kPing{MessageKind::kActivation, 0, 1};
const MessageKey kPong{MessageKind::kGradient, 0, 0};

// Half round trips of `bytes`, in seconds.
std::vector<double> transport_latency(pf::comm::MpiWorld& world, size_t bytes, int warmup, int iterations) {
  pf::comm::Transport& t = world.endpoint();
  const Tensor msg = Tensor::zeros({static_cast<int64_t>(bytes / 4)});
  std::vector<double> out;
  for (int i = 0; i < warmup + iterations; ++i) {
    if (world.rank() == 0) {
      const auto start = Clock::now();
      t.send(1, kPing, msg, kTimeout);
      t.recv(1, kPong, kTimeout);
      if (i >= warmup) out.push_back(seconds(start, Clock::now()) / 2);
    } else {
      t.recv(0, kPing, kTimeout);
      t.send(0, kPong, msg, kTimeout);
    }
  }
  world.transport().drain(kTimeout);
  return out;
}

std::vector<double> raw_latency(int rank, size_t bytes, int warmup, int iterations) {
  std::vector<char> buf(bytes);
  std::vector<double> out;
  for (int i = 0; i < warmup + iterations; ++i) {
    if (rank == 0) {
      const auto start = Clock::now();
      MPI_Send(buf.data(), static_cast<int>(bytes), MPI_BYTE, 1, 1, MPI_COMM_WORLD);
      MPI_Recv(buf.data(), static_cast<int>(bytes), MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (i >= warmup) out.push_back(seconds(start, Clock::now()) / 2);
    } else {
      MPI_Recv(buf.data(), static_cast<int>(bytes), MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf.data(), static_cast<int>(bytes), MPI_BYTE, 0, 2, MPI_COMM_WORLD);
    }
  }
  return out;
}

// Bytes per second of windows of kWindow large messages, each window closed by a 4-byte reply.
std::vector<double> transport_bandwidth(pf::comm::MpiWorld& world, int warmup, int windows) {
  pf::comm::Transport& t = world.endpoint();
  const Tensor big = Tensor::zeros({static_cast<int64_t>(kLargeBytes / 4)});
  const Tensor ack = Tensor::zeros({1});
  std::vector<double> out;
  for (int w = 0; w < warmup + windows; ++w) {
    if (world.rank() == 0) {
      const auto start = Clock::now();
      for (int i = 0; i < kWindow; ++i) t.send(1, MessageKey{MessageKind::kActivation, i, 1}, big, kTimeout);
      t.recv(1, kPong, kTimeout);
      if (w >= warmup) out.push_back(kWindow * kLargeBytes / seconds(start, Clock::now()));
    } else {
      for (int i = 0; i < kWindow; ++i) t.recv(0, MessageKey{MessageKind::kActivation, i, 1}, kTimeout);
      t.send(0, kPong, ack, kTimeout);
    }
  }
  world.transport().drain(kTimeout);
  return out;
}

std::vector<double> raw_bandwidth(int rank, int warmup, int windows) {
  std::vector<char> buf(kLargeBytes);
  char ack[4] = {};
  std::vector<double> out;
  for (int w = 0; w < warmup + windows; ++w) {
    if (rank == 0) {
      const auto start = Clock::now();
      for (int i = 0; i < kWindow; ++i) {
        MPI_Send(buf.data(), static_cast<int>(kLargeBytes), MPI_BYTE, 1, 3, MPI_COMM_WORLD);
      }
      MPI_Recv(ack, 4, MPI_BYTE, 1, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (w >= warmup) out.push_back(kWindow * kLargeBytes / seconds(start, Clock::now()));
    } else {
      for (int i = 0; i < kWindow; ++i) {
        MPI_Recv(buf.data(), static_cast<int>(kLargeBytes), MPI_BYTE, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      }
      MPI_Send(ack, 4, MPI_BYTE, 0, 4, MPI_COMM_WORLD);
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string label = "default";
  int iterations = 2000;
  int windows = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--label") label = argv[i + 1];
    else if (flag == "--iterations") iterations = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--windows") windows = std::max(1, std::atoi(argv[i + 1]));
  }
  try {
    auto world = pf::comm::MpiWorld::world();
    if (world->size() != 2) {
      if (world->rank() == 0) std::fprintf(stderr, "mpi_pingpong: run with exactly 2 processes (mpirun -np 2)\n");
      return 1;
    }
    const int rank = world->rank();
    world->barrier(kTimeout);
    const double t_lat = median(transport_latency(*world, kSmallBytes, 200, iterations));
    world->barrier(kTimeout);
    const double r_lat = median(raw_latency(rank, kSmallBytes, 200, iterations));
    world->barrier(kTimeout);
    const double t_bw = median(transport_bandwidth(*world, 2, windows));
    world->barrier(kTimeout);
    const double r_bw = median(raw_bandwidth(rank, 2, windows));
    world->barrier(kTimeout);
    if (rank == 0) {
      nlohmann::json out;
      out["label"] = label;
      out["processes"] = 2;
      out["latency_1KiB_us"] = {{"transport", t_lat * 1e6},
                                {"raw_mpi", r_lat * 1e6},
                                {"transport_over_raw", t_lat / r_lat},
                                {"iterations", iterations}};
      out["bandwidth_4MiB_GBps"] = {{"transport", t_bw / 1e9},
                                    {"raw_mpi", r_bw / 1e9},
                                    {"transport_over_raw", t_bw / r_bw},
                                    {"windows", windows},
                                    {"messages_per_window", kWindow}};
      std::printf("%s\n", out.dump().c_str());
    }
    return 0;
  } catch (const pf::Error& e) {
    std::fprintf(stderr, "mpi_pingpong: %s\n", e.what());
    return 1;
  }
}

#include "runtime/planner/cluster.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/core/json_object.h"
#include "runtime/planner/json_input.h"

namespace pf::plan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

double positive_number(const JsonObject& o, const std::string& key, double hi) {
  PF_CHECK_ARG(o.has(key), o.path_of(key), ": missing");
  const nlohmann::json& v = o.get(key);
  PF_CHECK_ARG(v.is_number(), o.path_of(key), ": expected a number, got ", v.type_name());
  const double x = v.get<double>();
  PF_CHECK_ARG(std::isfinite(x) && x > 0 && x <= hi, o.path_of(key), ": ", x, " is not in (0, ", hi, "]");
  return x;
}

Link link_from_json(const JsonObject& parent, const std::string& key) {
  JsonObject o(parent.get(key), parent.path_of(key));
  Link l;
  l.bandwidth_bytes_per_s = positive_number(o, "bandwidth_gb_per_s", 1e6) * 1e9;
  PF_CHECK_ARG(o.has("latency_us"), o.path_of("latency_us"), ": missing");
  const nlohmann::json& v = o.get("latency_us");
  PF_CHECK_ARG(v.is_number(), o.path_of("latency_us"), ": expected a number, got ", v.type_name());
  const double us = v.get<double>();
  PF_CHECK_ARG(std::isfinite(us) && us >= 0 && us <= 1e6, o.path_of("latency_us"), ": ", us,
               " is not in [0, 1e6]");
  l.latency_s = us * 1e-6;
  o.reject_unknown();
  return l;
}

nlohmann::json link_to_json(const Link& l) {
  return {{"bandwidth_gb_per_s", l.bandwidth_bytes_per_s / 1e9}, {"latency_us", l.latency_s * 1e6}};
}

int64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : int64_t{4} << 30;
}

// Bytes per second of one thread copying a buffer another thread wrote (best of a few).
double measure_copy_bandwidth() {
  const size_t bytes = size_t{16} << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  std::thread writer([&] { std::memset(src.data(), 2, bytes); });
  writer.join();
  double best = 0;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, static_cast<double>(bytes) / s);
  }
  return best > 0 ? best : 1e9;
}

// Seconds of a one-way hand-off between two threads (half a round trip, median of 2000).
double measure_handoff_latency() {
  std::atomic<int> turn{0};
  constexpr int kRounds = 2000;
  std::thread peer([&] {
    for (int i = 0; i < kRounds; ++i) {
      while (turn.load(std::memory_order_acquire) != 1) std::this_thread::yield();
      turn.store(0, std::memory_order_release);
    }
  });
  std::vector<double> rounds;
  rounds.reserve(kRounds);
  for (int i = 0; i < kRounds; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    turn.store(1, std::memory_order_release);
    while (turn.load(std::memory_order_acquire) != 0) std::this_thread::yield();
    rounds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  peer.join();
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2] / 2;
}

}  // namespace

const Link& Cluster::link(int device_a, int device_b, bool processes) const {
  if (device_a / devices_per_node != device_b / devices_per_node) return inter_node;
  return processes && has_process_links ? process_p2p : intra_node;
}

const Link& Cluster::allreduce_link(int device_a, int device_b, bool processes) const {
  if (device_a / devices_per_node != device_b / devices_per_node) return inter_node;
  return processes && has_process_links ? process_allreduce : intra_node;
}

namespace {

Cluster cluster_from_json_fields(const nlohmann::json& value) {
  JsonObject root(value, "");
  Cluster c;
  c.nodes = static_cast<int>(root.get_int_in("nodes", 1, 1, 65536));
  c.devices_per_node = static_cast<int>(root.get_int_in("devices_per_node", 1, 1024));
  PF_CHECK_ARG(static_cast<int64_t>(c.nodes) * c.devices_per_node <= 4096, "nodes x devices_per_node: ", c.nodes, " nodes x ",
               c.devices_per_node, " devices is more than the 4096 ranks a schedule may have");
  JsonObject device(root.get("device"), root.path_of("device"));
  c.device_kind = device.get_string("kind");
  PF_CHECK_ARG(c.device_kind == "cpu" || c.device_kind == "cuda", device.path_of("kind"), ": unknown device kind '",
               c.device_kind, "' (cpu or cuda)");
  c.device_memory_bytes = static_cast<int64_t>(positive_number(device, "memory_gib", 1 << 20) * kGiB);
  device.reject_unknown();
  c.intra_node = link_from_json(root, "intra_node");
  c.inter_node = root.has("inter_node") ? link_from_json(root, "inter_node") : c.intra_node;
  PF_CHECK_ARG(c.nodes == 1 || root.has("inter_node"), root.path_of("inter_node"), ": missing (", c.nodes,
               " nodes need the link between them)");
  if (root.has("processes")) {
    JsonObject processes(root.get("processes"), root.path_of("processes"));
    c.process_p2p = link_from_json(processes, "p2p");
    c.process_allreduce = link_from_json(processes, "allreduce");
    processes.reject_unknown();
    c.has_process_links = true;
  }
  root.reject_unknown();
  return c;
}

}  // namespace

Cluster cluster_from_json(const nlohmann::json& value, const std::string& where) {
  return read_json_input(value, where, cluster_from_json_fields);
}

nlohmann::json cluster_to_json(const Cluster& c) {
  nlohmann::json out = {
      {"nodes", c.nodes},
      {"devices_per_node", c.devices_per_node},
      {"device", {{"kind", c.device_kind}, {"memory_gib", static_cast<double>(c.device_memory_bytes) / kGiB}}},
      {"intra_node", link_to_json(c.intra_node)},
      {"inter_node", link_to_json(c.inter_node)}};
  if (c.has_process_links)
    out["processes"] = {{"p2p", link_to_json(c.process_p2p)}, {"allreduce", link_to_json(c.process_allreduce)}};
  return out;
}

Cluster measure_this_machine(int devices) {
  Cluster c;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  c.devices_per_node = devices > 0 ? devices : static_cast<int>(cores);
  c.device_kind = "cpu";
  c.device_memory_bytes = available_memory_bytes() / c.devices_per_node;
  c.intra_node.bandwidth_bytes_per_s = measure_copy_bandwidth();
  c.intra_node.latency_s = measure_handoff_latency();
  c.inter_node = c.intra_node;
  return c;
}

}  // namespace pf::plan

#include "tools/cli/process_probe.h"

#include <CLI/CLI.hpp>

#include "tools/cli/launch_line.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/backend/mpi_backend.h"
#include "runtime/comm/mpi_launch.h"
#include "runtime/comm/world.h"
#include "runtime/core/error.h"
#include "runtime/core/output_file.h"
#include "runtime/core/median.h"
#include "runtime/planner/overhead_fit.h"
#include "tools/cli/cli.h"
#include "tools/cli/train_config.h"
#include "tools/cli/train_setup.h"

namespace pf::cli {
namespace {

constexpr double kTimeout = 30.0;

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Rank 0's median round trip of a `floats`-element tensor to rank 1 and back.
double round_trip_seconds(comm::World& world, int64_t floats, int repeats, int* key) {
  comm::Transport& t = world.endpoint();
  const Tensor x = Tensor::zeros({floats});
  std::vector<double> rounds;
  for (int i = 0; i <= repeats; ++i) {
    const comm::MessageKey k{comm::MessageKind::kActivation, (*key)++, 0};
    const double t0 = now();
    if (world.rank() == 0) {
      t.send(1, k, x, kTimeout);
      t.recv(1, k, kTimeout);
    } else {
      const Tensor got = t.recv(0, k, kTimeout);
      t.send(0, k, got, kTimeout);
    }
    if (i > 0) rounds.push_back(now() - t0);  // the first one is a warm-up
  }
  return median(rounds);
}

// The median time of an all-reduce of `floats` floats (the slower of the two processes).
double allreduce_seconds(comm::World& world, size_t floats, int repeats) {
  std::vector<float> data(floats, 1.0f);
  std::vector<double> times;
  for (int i = 0; i <= repeats; ++i) {
    world.barrier(kTimeout);
    const double t0 = now();
    world.all_reduce_sum(data.data(), floats, kTimeout);
    double t = now() - t0;
    world.all_reduce_sum(&t, 1, kTimeout);  // the sum of both: twice their mean
    if (i > 0) times.push_back(t / 2);
  }
  return median(times);
}


// The first line of `file` with words on it (mpirun's own messages come between rules of dashes).
std::string first_line(const std::string& file) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.find_first_not_of("- ") != std::string::npos) return line;
  return "";
}

}  // namespace

CLI::App* add_process_probe_command(CLI::App& app, ProcessProbeArgs& a) {
  CLI::App* cmd = app.add_subcommand("measure-processes", "internal: under mpirun -np 2, time MPI messages and "
                                                          "all-reduces for pipeforge plan --measure");
  cmd->group("");  // hidden from --help
  cmd->add_option("--out", a.out, "rank 0 writes the JSON here")->required();
  cmd->add_option("--allreduce-bytes", a.allreduce_bytes, "all-reduce sizes to time (bytes)")
      ->delimiter(',')
      ->check(CLI::Range(4.0, 4e9));
  return cmd;
}

int run_process_probe(const ProcessProbeArgs& a) {
  if (!comm::launched_by_mpi()) {
    std::cerr << "pipeforge measure-processes: run under mpirun -np 2\n";
    return kExitUsage;
  }
  std::shared_ptr<comm::World> world = mpi_backend().launch_world();
  if (world->size() != 2) {
    std::cerr << "pipeforge measure-processes: needs 2 processes, got " << world->size() << "\n";
    return kExitUsage;
  }
  int key = 0;
  // Latency: half the round trip of one float; bandwidth: of 4 MiB, its latency taken off.
  const double small = round_trip_seconds(*world, 1, 50, &key) / 2;
  const int64_t big_floats = int64_t{1} << 20;
  const double big = round_trip_seconds(*world, big_floats, 5, &key) / 2;
  const double bytes = 4.0 * static_cast<double>(big_floats);
  const double bandwidth = bytes / std::max(1e-9, big - small);
  // The all-reduce at each size: t = a + B / bandwidth by least squares.
  std::vector<std::vector<double>> rows;
  std::vector<double> seconds, sizes;
  for (double b : a.allreduce_bytes) {
    const size_t floats = std::max<size_t>(1, static_cast<size_t>(b / 4));
    rows.push_back({1.0, 4.0 * static_cast<double>(floats)});
    sizes.push_back(rows.back()[1]);
    seconds.push_back(allreduce_seconds(*world, floats, 5));
  }
  const std::vector<double> fit = plan::nonnegative_least_squares(rows, seconds);
  const double per_byte = fit[1] > 0 ? fit[1] : seconds.back() / rows.back()[1];
  world->barrier(kTimeout);
  if (world->rank() == 0) {
    nlohmann::json out = {
        {"p2p", {{"latency_us", small * 1e6}, {"bandwidth_gb_per_s", bandwidth / 1e9}}},
        // ring_allreduce_time(B, 2, bw, lat) = B / bw + 2 lat
        {"allreduce", {{"latency_us", fit[0] / 2 * 1e6}, {"bandwidth_gb_per_s", 1.0 / per_byte / 1e9}}},
        {"allreduce_measured", {{"bytes", sizes}, {"seconds", seconds}}}};
    write_output_file(a.out, out.dump() + "\n", "--out");
  }
  return kExitOk;
}

namespace {

// A temporary file name (the file is created empty).
std::string temp_file(const std::string& stem) {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string out = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/" + stem + "-XXXXXX";
  std::vector<char> name(out.begin(), out.end());
  name.push_back(0);
  const int fd = mkstemp(name.data());
  if (fd < 0) return "";
  close(fd);
  return name.data();
}

// Runs `mpirun -np 2 <this pipeforge> <arguments>` (2 processes on however many cores, not
// pinned: as the trainer runs them). Returns "" on success, else why it failed.
std::string run_two_processes(const std::string& arguments) {
  if (comm::launched_by_mpi()) return "plan itself runs under mpirun; the probe would nest";
  const std::string mpirun = find_on_path("mpirun");
  if (mpirun.empty()) return "mpirun is not on the PATH";
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "cannot find the pipeforge binary (/proc/self/exe)";
  self[n] = 0;
  const std::string err = temp_file("pipeforge-mpirun-err");
  if (err.empty()) return "cannot create a temporary file";
  // As root, Open MPI refuses to start unless told (the probe is ours, so we tell it).
  const std::string command = mpirun_root_variables() + "timeout 120 " + shell_quote(mpirun) + " -np 2 --oversubscribe --bind-to none " +
                              shell_quote(self) + " " + arguments + " >/dev/null 2>" + shell_quote(err);
  const int rc = std::system(command.c_str());
  std::string why;
  if (rc != 0) {
    const std::string line = first_line(err);
    why = "mpirun -np 2 failed" + (line.empty() ? std::string() : ": " + line);
  }
  std::remove(err.c_str());
  return why;
}

}  // namespace

std::string measure_process_links(plan::Cluster* cluster, const std::vector<double>& allreduce_bytes, double* seconds) {
  const double t0 = now();
  auto done = [&](const std::string& why) {
    if (seconds) *seconds = now() - t0;
    return why;
  };
  const std::string out = temp_file("pipeforge-probe");
  if (out.empty()) return done("cannot create a temporary file");
  std::string bytes_list;
  for (double b : allreduce_bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.0f", std::max(4.0, b));
    bytes_list += (bytes_list.empty() ? "" : ",") + std::string(text);
  }
  if (bytes_list.empty()) bytes_list = "65536,1048576,4194304";
  std::string why = run_two_processes("measure-processes --out " + shell_quote(out) + " --allreduce-bytes " + bytes_list);
  if (why.empty()) {
    try {
      nlohmann::json probe = read_json_file(out, "the mpirun probe's output");
      probe.erase("allreduce_measured");
      nlohmann::json c = plan::cluster_to_json(*cluster);
      c["processes"] = probe;
      *cluster = plan::cluster_from_json(c, "the mpirun probe");
    } catch (const std::exception& e) {
      why = std::string("the mpirun probe's output is unreadable: ") + e.what();
    }
  }
  std::remove(out.c_str());
  return done(why);
}

std::string measure_process_steps(const TrainArgs& args, std::vector<double>* step_seconds) {
  const std::string config = temp_file("pipeforge-config"), log = temp_file("pipeforge-metrics");
  if (config.empty() || log.empty()) return "cannot create a temporary file";
  std::ofstream(config) << effective_train_config(args).dump(2) << "\n";
  std::string why = run_two_processes("train --config " + shell_quote(config) + " --metrics-log " + shell_quote(log) +
                                      " --quiet");
  if (why.empty()) {
    try {
      std::vector<double> steps;
      std::ifstream in(log);
      std::string line;
      while (std::getline(in, line))
        if (!line.empty()) steps.push_back(nlohmann::json::parse(line).at("seconds").get<double>());
      if (steps.size() < 2) throw std::runtime_error("fewer than 2 steps logged");
      step_seconds->insert(step_seconds->end(), steps.begin() + 1, steps.end());  // after the warm-up
    } catch (const std::exception& e) {
      why = std::string("the process run's metrics log is unreadable: ") + e.what();
    }
  }
  std::remove(config.c_str());
  std::remove(log.c_str());
  return why;
}

}  // namespace pf::cli

// What one process per rank pays on this machine: `pipeforge plan --measure` launches
// `mpirun -np 2 pipeforge measure-processes` (a hidden subcommand) and reads back the MPI message
// latency and bandwidth between the two processes and the time of their all-reduce at a few sizes,
// for the candidates that train as processes (D > 1). Without mpirun (or when the launch fails)
// the cluster keeps no process links and the plan says why.
#pragma once

#include "tools/cli/cli_fwd.h"
#include <string>
#include <vector>

#include "runtime/planner/cluster.h"
#include "tools/cli/train_command.h"

namespace pf::cli {

struct ProcessProbeArgs {
  std::string out;                  // rank 0 writes the JSON here
  std::vector<double> allreduce_bytes = {65536, 1048576, 4194304};  // the all-reduce sizes timed
};

CLI::App* add_process_probe_command(CLI::App& app, ProcessProbeArgs& args);
// Run by each of the 2 processes of the probe's mpirun.
int run_process_probe(const ProcessProbeArgs& args);

// Launches the probe with mpirun and fills cluster->process_p2p / process_allreduce (and
// has_process_links), the all-reduce fitted over `allreduce_bytes` (the sizes the candidates
// reduce: an MPI all-reduce's cost per byte changes with the size, as its algorithm does).
// Returns "" on success, else why the processes' links are not measured. `seconds` (may be null)
// receives how long it took.
std::string measure_process_links(plan::Cluster* cluster, const std::vector<double>& allreduce_bytes, double* seconds);

// Trains `args` (a data-parallel run: 2 processes) under mpirun -np 2 with a metrics log and
// appends to *step_seconds the time of every step after the first. Returns "" on success, else why not.
std::string measure_process_steps(const TrainArgs& args, std::vector<double>* step_seconds);

}  // namespace pf::cli

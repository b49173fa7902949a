#include "tools/cli/compare_command.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/core/output_file.h"
#include "runtime/schedules/comparison.h"
#include "runtime/schedules/comparison_html.h"
#include "runtime/schedules/generators.h"
#include "tools/cli/cli.h"
#include "tools/cli/cost_options.h"
#include "tools/cli/validators.h"

namespace pf::cli {
namespace {

std::string per_rank(const std::vector<double>& v) {
  std::string out;
  for (double x : v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%s%.1f", out.empty() ? "" : " ", x);
    out += buf;
  }
  return out;
}

}  // namespace

CLI::App* add_compare_command(CLI::App& app, CompareArgs& a) {
  CLI::App* cmd = app.add_subcommand("compare", "compare schedules under one cost model: a table, and an HTML page");
  cmd->add_option("--schedules", a.schedules, "schedule names, comma-separated (e.g. 1f1b,zb-h1,zb-v)")
      ->delimiter(',')
      ->transform(trimmed())
      ->required();
  cmd->add_option("--stages", a.request.ranks, "pipeline ranks P")->check(CLI::Range(1, 4096))->required();
  cmd->add_option("--microbatches,--micro-batches", a.request.micro_batches, "micro-batches per step M")
      ->check(CLI::Range(1, 1 << 20))
      ->required();
  cmd->add_option("--chunks", a.chunks, "interleaved-1f1b, interleaved-zb, bfs: model chunks per rank V (default: the schedule's, 2)")
      ->check(CLI::Range(1, 64));
  add_cost_options(cmd, a.request.costs, CostOptions::kBoth);
  cmd->add_option("--mem-limit", a.request.mem_limit, "zb-auto, v-half, v-min: cap on in-flight micro-batches per rank "
                  "(default: each one's own, P for zb-auto, (P+2)/2 for v-half, (P+4)/3 for v-min)")
      ->check(non_negative_number());
  cmd->add_option("--message-bytes", a.message_bytes,
                  "size of one activation or gradient crossing ranks (bytes moved = messages x this)")
      ->check(non_negative_number())
      ->capture_default_str();
  cmd->add_option("--html", a.html_file, "write a self-contained HTML page: the table, the timelines and memory");
  cmd->add_option("--width", a.width, "width of the page's drawings in pixels")
      ->check(CLI::Range(400.0, 100000.0))
      ->capture_default_str();
  cmd->add_flag("--json", a.json, "print one JSON object on stdout instead of the table");
  return cmd;
}

int run_compare(const CompareArgs& a) {
  std::vector<sched::ScheduleComparison> results;
  try {
    for (const std::string& name : a.schedules) {
      sched::ScheduleRequest request = a.request;
      request.name = name;
      request.chunks = sched::takes_any_chunks(name) ? a.chunks : 0;
      results.push_back(sched::compare_schedule(request, a.message_bytes));
    }
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument) throw;
    std::cerr << "pipeforge compare: " << e.what() << "\n";
    return kExitUsage;
  }
  const auto& c = a.request.costs;
  char parameters[256];
  std::snprintf(parameters, sizeof(parameters),
                "p=%d, m=%d; t_f=%g, t_b=%g, t_w=%g, t_comm=%g; m_b=%g, m_w=%g; message bytes %g.", a.request.ranks,
                a.request.micro_batches, c.t_f, c.t_b, c.t_w, c.t_comm, c.m_b, c.m_w, a.message_bytes);
  if (!a.html_file.empty()) {
    sched::ComparisonPage page;
    page.parameters = parameters;
    page.width = a.width;
    write_output_file(a.html_file, sched::comparison_html(results, page), "--html");
  }
  if (a.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : results)
      rows.push_back({{"schedule", r.name},
                      {"chunks", r.chunks},
                      {"makespan", r.result.makespan},
                      {"bubble_rate", r.result.bubble_rate},
                      {"peak_activation_bytes", r.result.peak_activation_bytes},
                      {"messages", r.messages},
                      {"moved_bytes", r.moved_bytes}});
    std::cout << nlohmann::json({{"parameters", parameters}, {"schedules", rows}}).dump() << std::endl;
    return kExitOk;
  }
  std::printf("%s\n", parameters);
  std::printf("%-22s %10s %8s  %-28s %9s %12s\n", "schedule", "makespan", "bubble", "peak memory per rank",
              "messages", "bytes moved");
  for (const auto& r : results) {
    const std::string name = r.name + (r.chunks > 1 ? " (v=" + std::to_string(r.chunks) + ")" : "");
    std::printf("%-22s %10.2f %8.4f  %-28s %9lld %12.0f\n", name.c_str(), r.result.makespan, r.result.bubble_rate,
                per_rank(r.result.peak_activation_bytes).c_str(), static_cast<long long>(r.messages), r.moved_bytes);
  }
  if (!a.html_file.empty()) std::printf("wrote %s\n", a.html_file.c_str());
  return kExitOk;
}

}  // namespace pf::cli

#include "runtime/planner/plan_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

namespace pf::plan {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string format(const char* fmt, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, a);
  return buf;
}

std::string counts_text(const std::vector<int>& counts) {
  std::string s;
  for (size_t i = 0; i < counts.size(); ++i) s += (i ? "," : "") + std::to_string(counts[i]);
  return s;
}

std::string escape_xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

// A "nice" tick step (1, 2 or 5 x 10^k) giving about `ticks` ticks over [0, hi].
double tick_step(double hi, int ticks) {
  const double raw = hi / ticks;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double k : {1.0, 2.0, 5.0, 10.0})
    if (k * p >= raw) return k * p;
  return 10 * p;
}

}  // namespace

nlohmann::json prediction_to_json(const Prediction& p) {
  const Candidate& c = p.candidate;
  return {{"schedule", c.schedule},
          {"tensor_parallel", c.tensor_parallel},
          {"sequence_parallel", c.sequence_parallel},
          {"ranks", c.ranks},
          {"chunks", c.chunks},
          {"micro_batches", c.micro_batches},
          {"data_parallel", c.data_parallel},
          {"activation_policy", c.activation_policy},
          {"overlap_steps", c.overlap_steps},
          {"layers_per_stage", c.layers_per_stage},
          {"micro_batch_rows", p.micro_batch_rows},
          {"step_seconds", p.step_seconds},
          {"pipeline_seconds", p.pipeline_seconds},
          {"update_seconds", p.update_seconds},
          {"tokens_per_second", p.tokens_per_second},
          {"bubble_rate", p.bubble_rate},
          {"memory_bytes_per_rank", p.memory_bytes},
          {"activation_bytes_per_rank", p.activation_bytes},
          {"peak_memory_bytes", p.peak_memory_bytes},
          {"fits", p.fits}};
}

nlohmann::json plan_to_json(const Plan& plan, const PlanRequest& request, size_t top) {
  nlohmann::json candidates = nlohmann::json::array();
  for (size_t i = 0; i < plan.ranked.size() && i < top; ++i) candidates.push_back(prediction_to_json(plan.ranked[i]));
  nlohmann::json out = {{"format", "pipeforge.plan/1"},
                        {"batch_size", request.batch_rows},
                        {"cluster", cluster_to_json(request.cluster)},
                        {"memory_limit_bytes", request.limit()},
                        {"fitting", plan.ranked.size()},
                        {"over_the_limit", plan.too_big.size()},
                        {"refused", plan.refused},
                        {"candidates", candidates}};
  if (!plan.ranked.empty()) out["choice"] = prediction_to_json(plan.ranked[0]);
  else if (!plan.too_big.empty()) out["smallest_memory_that_works_bytes"] = plan.too_big[0].peak_memory_bytes;
  return out;
}

std::string ranked_table(const Plan& plan, double limit_bytes, size_t rows) {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "%4s  %-16s %3s %-3s %3s %3s %4s %3s %-7s  %-12s %-14s %10s %11s %10s %7s\n", "#",
                "schedule", "T", "SP", "P", "v", "m", "D", "overlap", "memory", "layers/stage", "step ms", "tokens/s",
                "peak MiB", "bubble");
  out << line;
  for (size_t i = 0; i < plan.ranked.size() && i < rows; ++i) {
    const Prediction& p = plan.ranked[i];
    const Candidate& c = p.candidate;
    std::snprintf(line, sizeof line, "%4zu  %-16s %3d %-3s %3d %3d %4d %3d %-7s  %-12s %-14s %10.2f %11.0f %10.1f %6.1f%%\n",
                  i + 1, c.schedule.c_str(), c.tensor_parallel, c.sequence_parallel ? "yes" : "no", c.ranks, c.chunks,
                  c.micro_batches, c.data_parallel,
                  c.overlap_steps ? "yes" : "no", c.activation_policy.c_str(),
                  counts_text(c.layers_per_stage).c_str(), p.step_seconds * 1e3, p.tokens_per_second,
                  p.peak_memory_bytes / kMiB, p.bubble_rate * 100);
    out << line;
  }
  if (plan.ranked.size() > rows) out << "      ... and " << plan.ranked.size() - rows << " more that fit\n";
  out << "      " << plan.ranked.size() << " fit in " << format("%.1f", limit_bytes / kMiB) << " MiB per device, "
      << plan.too_big.size() << " do not";
  if (plan.refused > 0) out << ", " << plan.refused << " combinations cannot run";
  out << "\n";
  if (plan.ranked.empty() && !plan.too_big.empty()) {
    out << "      nothing fits; the smallest memory that works is "
        << format("%.1f", plan.too_big[0].peak_memory_bytes / kMiB) << " MiB per device ("
        << plan.too_big[0].candidate.describe() << ")\n";
  }
  return out.str();
}

std::string plan_svg(const Plan& plan, double limit_bytes, const std::string& title) {
  std::vector<Prediction> all = plan.ranked;
  all.insert(all.end(), plan.too_big.begin(), plan.too_big.end());
  // The legend sits in the right margin, outside the plot, so it never hides a point.
  const double width = 960, height = 500, left = 80, right = 230, top = 50, bottom = 60;
  double max_x = limit_bytes / kMiB, max_y = 0;
  for (const Prediction& p : all) {
    max_x = std::max(max_x, p.peak_memory_bytes / kMiB);
    max_y = std::max(max_y, p.step_seconds * 1e3);
  }
  max_x = max_x > 0 ? max_x * 1.05 : 1;
  max_y = max_y > 0 ? max_y * 1.05 : 1;
  // Memory is often far below the limit: a log-free zoom when the limit would squash the points.
  double points_x = 0;
  for (const Prediction& p : all) points_x = std::max(points_x, p.peak_memory_bytes / kMiB);
  const bool limit_off_chart = points_x > 0 && limit_bytes / kMiB > 4 * points_x;
  if (limit_off_chart) max_x = points_x * 1.1;
  auto X = [&](double mib) { return left + (width - left - right) * mib / max_x; };
  auto Y = [&](double ms) { return height - bottom - (height - top - bottom) * ms / max_y; };
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<style>.fit{fill:#4c78a8;fill-opacity:0.55}.big{fill:#bbbbbb}.front{fill:#f58518;stroke:#000;stroke-width:0.8}"
       ".choice{fill:none;stroke:#d62728;stroke-width:2.5}.axis{stroke:#333}.grid{stroke:#e5e5e5}"
       ".limit{stroke:#d62728;stroke-dasharray:6 4}.label{paint-order:stroke;stroke:white;stroke-width:4px}</style>\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << width / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" << escape_xml(title)
    << "</text>\n";
  const double xs = tick_step(max_x, 8), ys = tick_step(max_y, 6);
  for (double x = 0; x <= max_x + 1e-9; x += xs) {
    s << "<line class=\"grid\" x1=\"" << X(x) << "\" y1=\"" << top << "\" x2=\"" << X(x) << "\" y2=\""
      << height - bottom << "\"/>\n<text x=\"" << X(x) << "\" y=\"" << height - bottom + 16
      << "\" text-anchor=\"middle\">" << format(xs < 1 ? "%.2f" : "%.0f", x) << "</text>\n";
  }
  for (double y = 0; y <= max_y + 1e-9; y += ys) {
    s << "<line class=\"grid\" x1=\"" << left << "\" y1=\"" << Y(y) << "\" x2=\"" << width - right << "\" y2=\"" << Y(y)
      << "\"/>\n<text x=\"" << left - 6 << "\" y=\"" << Y(y) + 4 << "\" text-anchor=\"end\">"
      << format(ys < 1 ? "%.2f" : "%.0f", y) << "</text>\n";
  }
  s << "<line class=\"axis\" x1=\"" << left << "\" y1=\"" << height - bottom << "\" x2=\"" << width - right << "\" y2=\""
    << height - bottom << "\"/>\n<line class=\"axis\" x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left
    << "\" y2=\"" << height - bottom << "\"/>\n"
    << "<text x=\"" << (left + width - right) / 2 << "\" y=\"" << height - 18
    << "\" text-anchor=\"middle\">peak memory per rank (MiB)</text>\n"
    << "<text transform=\"translate(20," << (top + height - bottom) / 2
    << ") rotate(-90)\" text-anchor=\"middle\">predicted step time (ms)</text>\n";
  if (!limit_off_chart) {
    const double lx = X(limit_bytes / kMiB);
    s << "<line class=\"limit\" x1=\"" << lx << "\" y1=\"" << top << "\" x2=\"" << lx << "\" y2=\"" << height - bottom
      << "\"/>\n<text x=\"" << lx - 4 << "\" y=\"" << top + 12 << "\" text-anchor=\"end\" fill=\"#d62728\">memory limit "
      << format("%.0f", limit_bytes / kMiB) << " MiB</text>\n";
  }
  for (const Prediction& p : all) {
    s << "<circle class=\"" << (p.fits ? "fit" : "big") << "\" cx=\"" << X(p.peak_memory_bytes / kMiB) << "\" cy=\""
      << Y(p.step_seconds * 1e3) << "\" r=\"3\"><title>" << escape_xml(p.candidate.describe()) << "</title></circle>\n";
  }
  const std::vector<size_t> front = pareto_front(all);
  if (!front.empty()) {
    s << "<polyline fill=\"none\" stroke=\"#f58518\" stroke-width=\"1.5\" points=\"";
    for (size_t i : front) s << X(all[i].peak_memory_bytes / kMiB) << "," << Y(all[i].step_seconds * 1e3) << " ";
    s << "\"/>\n";
    for (size_t i : front) {
      s << "<circle class=\"front\" cx=\"" << X(all[i].peak_memory_bytes / kMiB) << "\" cy=\""
        << Y(all[i].step_seconds * 1e3) << "\" r=\"5\"><title>" << escape_xml(all[i].candidate.describe())
        << "</title></circle>\n";
    }
  }
  // Legend: in the right margin.
  const double lx = width - right + 28, ly = top + 24;
  if (!plan.ranked.empty()) {
    const Prediction& c = plan.ranked[0];
    const double cx = X(c.peak_memory_bytes / kMiB), cy = Y(c.step_seconds * 1e3);
    const std::string label = "choice: " + c.candidate.describe();
    // Below the point (the choice is the fastest: below it the plot is empty), to its right, or to
    // its left where it would run past the plot (about 6.6 px a character at 12 px).
    const bool left_of_point = cx + 12 + 6.6 * static_cast<double>(label.size()) > width - right;
    s << "<circle class=\"choice\" cx=\"" << cx << "\" cy=\"" << cy << "\" r=\"9\"/>\n<text x=\""
      << (left_of_point ? cx + 4 : cx - 4) << "\" y=\"" << cy + 26 << "\" class=\"label\" fill=\"#d62728\""
      << (left_of_point ? " text-anchor=\"end\"" : "") << ">" << escape_xml(label) << "</text>\n";
  }
  s << "<rect x=\"" << lx - 8 << "\" y=\"" << ly - 14 << "\" width=\"190\" height=\"" << (limit_off_chart ? 76 : 76)
    << "\" fill=\"white\" stroke=\"#ccc\"/>\n"
    << "<circle class=\"fit\" cx=\"" << lx << "\" cy=\"" << ly << "\" r=\"4\"/><text x=\"" << lx + 10 << "\" y=\""
    << ly + 4 << "\">fits</text>\n"
    << "<circle class=\"big\" cx=\"" << lx << "\" cy=\"" << ly + 18 << "\" r=\"4\"/><text x=\"" << lx + 10 << "\" y=\""
    << ly + 22 << "\">over the memory limit</text>\n"
    << "<circle class=\"front\" cx=\"" << lx << "\" cy=\"" << ly + 36 << "\" r=\"5\"/><text x=\"" << lx + 10
    << "\" y=\"" << ly + 40 << "\">Pareto front</text>\n"
    << "<circle class=\"choice\" cx=\"" << lx << "\" cy=\"" << ly + 54 << "\" r=\"6\"/><text x=\"" << lx + 10
    << "\" y=\"" << ly + 58 << "\">the plan's choice</text>\n";
  if (limit_off_chart) {
    s << "<text x=\"" << width - right << "\" y=\"" << height - bottom - 8 << "\" text-anchor=\"end\" fill=\"#d62728\">"
      << "memory limit " << format("%.0f", limit_bytes / kMiB) << " MiB: off the chart, to the right</text>\n";
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace pf::plan

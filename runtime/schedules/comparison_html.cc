#include "runtime/schedules/comparison_html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "runtime/schedules/timeline.h"

namespace pf::sched {
namespace {


std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, std::isfinite(v) ? v : 0.0);
  return buf;
}

double peak_of(const ScheduleComparison& c) {
  double peak = 0;
  for (double b : c.result.peak_activation_bytes) peak = std::max(peak, b);
  return peak;
}

// Distinct colours for up to 8 ranks' memory lines (then they repeat).
const char* rank_colour(int r) {
  static const char* colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                  "#ff7f0e", "#17becf", "#8c564b", "#e377c2"};
  return colours[r % 8];
}

// Each rank's activation bytes over time as step lines, on the timelines' axis (same margins as
// to_svg: 70 px of labels on the left, 20 on the right).
std::string memory_svg(const ScheduleComparison& c, double time_end, double width) {
  const double label_w = 70.0, right_pad = 20.0, h = 110.0, top = 8.0;
  const double plot_w = width - label_w - right_pad;
  double peak = 0;
  for (const auto& rank : c.memory)
    for (const auto& [t, b] : rank) peak = std::max(peak, b);
  if (peak <= 0) peak = 1;
  std::ostringstream out;
  const double height = top + h + 40.0;
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"11\">\n";
  auto x_of = [&](double t) { return label_w + t / time_end * plot_w; };
  auto y_of = [&](double b) { return top + h - b / peak * h; };
  out << "<line x1=\"" << label_w << "\" y1=\"" << top + h << "\" x2=\"" << label_w + plot_w << "\" y2=\"" << top + h
      << "\" stroke=\"#000\"/>\n<line x1=\"" << label_w << "\" y1=\"" << top << "\" x2=\"" << label_w << "\" y2=\""
      << top + h << "\" stroke=\"#000\"/>\n";
  out << "<text x=\"" << label_w - 6 << "\" y=\"" << top + 8 << "\" text-anchor=\"end\">" << fixed(peak, 1)
      << "</text>\n<text x=\"" << label_w - 6 << "\" y=\"" << top + h << "\" text-anchor=\"end\">0</text>\n";
  for (size_t r = 0; r < c.memory.size(); ++r) {
    std::ostringstream points;
    double last = 0;
    for (const auto& [t, b] : c.memory[r]) {
      points << x_of(t) << "," << y_of(last) << " " << x_of(t) << "," << y_of(b) << " ";
      last = b;
    }
    points << x_of(c.result.makespan) << "," << y_of(last);
    out << "<polyline class=\"memory\" fill=\"none\" stroke=\"" << rank_colour(static_cast<int>(r))
        << "\" stroke-width=\"1.5\" points=\"" << points.str() << "\"><title>rank " << r << "</title></polyline>\n";
  }
  double x = label_w;
  for (size_t r = 0; r < c.memory.size(); ++r) {
    out << "<rect x=\"" << x << "\" y=\"" << top + h + 16 << "\" width=\"12\" height=\"3\" fill=\""
        << rank_colour(static_cast<int>(r)) << "\"/><text x=\"" << x + 16 << "\" y=\"" << top + h + 21 << "\">rank "
        << r << "</text>\n";
    x += 70;
  }
  out << "<text x=\"" << label_w + plot_w << "\" y=\"" << top + h + 21
      << "\" text-anchor=\"end\">activation memory (m_b units) over the same time axis</text>\n</svg>\n";
  return out.str();
}

const char* kScript = R"JS(
function sortBy(key, descending) {
  const table = document.getElementById("schedules");
  const head = table.tHead.rows[0];
  let column = -1;
  for (let i = 0; i < head.cells.length; ++i) if (head.cells[i].dataset.key === key) column = i;
  if (column < 0) return;
  const body = table.tBodies[0];
  const rows = Array.from(body.rows);
  rows.sort((a, b) => {
    const x = a.cells[column].dataset.v, y = b.cells[column].dataset.v;
    const nx = Number(x), ny = Number(y);
    const c = isNaN(nx) || isNaN(ny) ? x.localeCompare(y) : nx - ny;
    return descending ? -c : c;
  });
  for (const r of rows) body.appendChild(r);
  for (const cell of head.cells) cell.removeAttribute("aria-sort");
  head.cells[column].setAttribute("aria-sort", descending ? "descending" : "ascending");
  table.dataset.sorted = key + (descending ? ":descending" : ":ascending");
}
for (const cell of document.getElementById("schedules").tHead.rows[0].cells) {
  cell.addEventListener("click", () => sortBy(cell.dataset.key, cell.getAttribute("aria-sort") === "ascending"));
}
const match = /sort=([a-z_]+)(:desc)?/.exec(location.hash);
if (match) sortBy(match[1], !!match[2]);
)JS";

}  // namespace

const std::vector<std::string>& comparison_columns() {
  static const std::vector<std::string> columns = {"schedule", "makespan", "bubble_rate", "peak_memory",
                                                   "messages", "moved_bytes"};
  return columns;
}

std::string comparison_html(const std::vector<ScheduleComparison>& schedules, const ComparisonPage& page) {
  double time_end = 0;
  for (const auto& c : schedules) time_end = std::max(time_end, c.result.makespan);
  if (time_end <= 0) time_end = 1;
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << xml_escape(page.title)
      << "</title>\n<style>\nbody{font-family:Helvetica,Arial,sans-serif;margin:24px;color:#111}"
         "table{border-collapse:collapse;margin:12px 0 24px}th,td{padding:4px 12px;border-bottom:1px solid #ddd;"
         "text-align:right}th{cursor:pointer;background:#f4f4f4;user-select:none}th:first-child,td:first-child{"
         "text-align:left}th[aria-sort=ascending]::after{content:\" \\25B2\"}th[aria-sort=descending]::after{"
         "content:\" \\25BC\"}h2{font-size:15px;margin:20px 0 4px}.note{color:#555;font-size:13px}\n</style></head>\n"
         "<body>\n<h1 style=\"font-size:20px\">"
      << xml_escape(page.title) << "</h1>\n<p class=\"note\">" << xml_escape(page.parameters)
      << " Simulated (docs/SCHEDULES.md, \"Simulator\"); click a column to sort.</p>\n";
  out << "<table id=\"schedules\"><thead><tr>";
  const char* headers[] = {"schedule", "makespan", "bubble rate", "peak memory (max rank)", "messages", "bytes moved"};
  for (size_t i = 0; i < comparison_columns().size(); ++i)
    out << "<th data-key=\"" << comparison_columns()[i] << "\">" << headers[i] << "</th>";
  out << "</tr></thead><tbody>\n";
  for (const auto& c : schedules) {
    std::string per_rank;
    for (double b : c.result.peak_activation_bytes) per_rank += (per_rank.empty() ? "" : ", ") + fixed(b, 1);
    out << "<tr><td data-v=\"" << xml_escape(c.name) << "\">" << xml_escape(c.name)
        << (c.chunks > 1 ? " (v=" + std::to_string(c.chunks) + ")" : "") << "</td><td data-v=\""
        << c.result.makespan << "\">" << fixed(c.result.makespan, 2) << "</td><td data-v=\"" << c.result.bubble_rate
        << "\">" << fixed(c.result.bubble_rate, 4) << "</td><td data-v=\"" << peak_of(c) << "\" title=\"per rank: "
        << per_rank << "\">" << fixed(peak_of(c), 1) << " <span class=\"note\">(" << per_rank << ")</span></td><td data-v=\""
        << c.messages << "\">" << c.messages << "</td><td data-v=\"" << c.moved_bytes << "\">" << fixed(c.moved_bytes, 0)
        << "</td></tr>\n";
  }
  out << "</tbody></table>\n";
  for (size_t i = 0; i < schedules.size(); ++i) {
    const ScheduleComparison& c = schedules[i];
    SvgOptions svg;
    svg.id_prefix = "s" + std::to_string(i) + "-";  // one page, unique ids
    svg.width = page.width;
    svg.time_end = time_end;
    svg.title = c.name + (c.chunks > 1 ? " (v=" + std::to_string(c.chunks) + ")" : "") + ": makespan " +
                fixed(c.result.makespan, 2) + ", bubble rate " + fixed(c.result.bubble_rate, 4);
    std::string drawing = to_svg(c.result.timeline, svg);
    drawing.erase(0, drawing.find("<svg"));  // inline: no XML declaration
    out << "<section class=\"schedule\" data-name=\"" << xml_escape(c.name) << "\">\n" << drawing
        << memory_svg(c, time_end, page.width) << "</section>\n";
  }
  out << "<script>" << kScript << "</script>\n</body></html>\n";
  return out.str();
}

}  // namespace pf::sched

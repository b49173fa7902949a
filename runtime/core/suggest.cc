#include "runtime/core/suggest.h"

#include <algorithm>
#include <cctype>

namespace pf {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

}  // namespace

std::string closest_name(const std::string& typed, const std::vector<std::string>& known) {
  if (typed.empty() || typed.size() > 64) return "";
  const std::string t = lower(typed);
  const size_t allowed = t.size() <= 4 ? 1 : t.size() <= 8 ? 2 : 3;
  std::string best;
  size_t best_distance = allowed + 1;
  for (const std::string& name : known) {
    const size_t d = edit_distance(t, lower(name));
    if (d < best_distance) {
      best = name;
      best_distance = d;
    }
  }
  return best_distance <= allowed && best != typed ? best : "";
}

std::string did_you_mean(const std::string& typed, const std::vector<std::string>& known) {
  const std::string best = closest_name(typed, known);
  return best.empty() ? "" : "; did you mean '" + best + "'?";
}

}  // namespace pf

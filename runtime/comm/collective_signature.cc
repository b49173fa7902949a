#include "runtime/comm/collective_signature.h"

#include <map>
#include <sstream>

namespace pf::comm {

const char* collective_op_name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kBarrier: return "barrier";
    case CollectiveOp::kAllGather: return "all_gather";
    case CollectiveOp::kBroadcast: return "broadcast";
    case CollectiveOp::kAllReduceF32: return "all_reduce_sum(float)";
    case CollectiveOp::kAllReduceF64: return "all_reduce_sum(double)";
    case CollectiveOp::kSplit: return "split";
    case CollectiveOp::kReduceScatterF32: return "reduce_scatter_sum(float)";
  }
  return "an unknown collective";
}

namespace {

// The ranks whose field differs from the most common value (ties: rank 0's value).
template <typename Field>
std::vector<int> outliers(const std::vector<CollectiveSignature>& s, Field field, int64_t* reference) {
  std::map<int64_t, int> counts;
  for (const auto& x : s) ++counts[field(x)];
  *reference = field(s[0]);
  for (const auto& [value, n] : counts) {
    if (n > counts[*reference]) *reference = value;
  }
  std::vector<int> out;
  for (size_t r = 0; r < s.size(); ++r) {
    if (field(s[r]) != *reference) out.push_back(static_cast<int>(r));
  }
  return out;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size() && i < 8; ++i) out << (i ? ", " : "") << ranks[i];
  if (ranks.size() > 8) out << ", ... (" << ranks.size() << " in all)";
  return out.str();
}

std::string values_of(const std::vector<CollectiveSignature>& s, const std::vector<int>& ranks,
                      int64_t (*field)(const CollectiveSignature&)) {
  std::ostringstream out;
  for (size_t i = 0; i < ranks.size() && i < 8; ++i) out << (i ? ", " : "") << field(s[ranks[i]]);
  return out.str();
}

}  // namespace

std::string signature_mismatch(const std::vector<CollectiveSignature>& s) {
  if (s.empty()) return "";
  int64_t ref = 0;
  std::vector<int> odd = outliers(s, [](const CollectiveSignature& x) { return x.op; }, &ref);
  if (!odd.empty()) {
    std::ostringstream out;
    out << "collectives out of step: " << rank_list(odd) << " called ";
    for (size_t i = 0; i < odd.size() && i < 8; ++i) {
      out << (i ? ", " : "") << collective_op_name(static_cast<CollectiveOp>(s[odd[i]].op));
    }
    out << " where the others called " << collective_op_name(static_cast<CollectiveOp>(ref));
    return out.str();
  }
  const auto op = static_cast<CollectiveOp>(s[0].op);
  const bool elements = op == CollectiveOp::kAllReduceF32 || op == CollectiveOp::kAllReduceF64;
  odd = outliers(s, [](const CollectiveSignature& x) { return x.size; }, &ref);
  if (!odd.empty()) {
    const char* unit = elements ? " elements" : " bytes";
    std::ostringstream out;
    out << collective_op_name(op) << ": " << rank_list(odd) << (odd.size() == 1 ? " contributes " : " contribute ")
        << values_of(s, odd, [](const CollectiveSignature& x) { return x.size; }) << unit
        << " where the others contribute " << ref << unit;
    return out.str();
  }
  odd = outliers(s, [](const CollectiveSignature& x) { return x.root; }, &ref);
  if (!odd.empty()) {
    std::ostringstream out;
    out << collective_op_name(op) << ": " << rank_list(odd) << " named root "
        << values_of(s, odd, [](const CollectiveSignature& x) { return x.root; }) << " where the others named root "
        << ref;
    return out.str();
  }
  return "";
}

}  // namespace pf::comm

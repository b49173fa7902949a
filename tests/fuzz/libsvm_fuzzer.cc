// libFuzzer target: the libsvm reader of `pipeforge glm` (runtime/glm/libsvm.h) and the solvers
// behind it. Input: libsvm text. Oracles, besides "no crash, no exception other than pf::Error":
//  * whatever parse_libsvm accepts passes check_glm_data, and printed back as libsvm text (values
//    with 9 significant digits, which float round-trips) parses to the same arrays;
//  * its dense copy has the same values in their places;
//  * on small data of moderate values, every solver trains a few epochs to a finite objective
//    that is at least the dual objective, up to rounding.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "runtime/glm/glm.h"
#include "runtime/glm/libsvm.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace pf::glm;
constexpr const char* kTarget = "libsvm";

std::string to_text(const GlmData& d) {
  std::string text;
  char buf[64];
  for (int64_t i = 0; i < d.rows; ++i) {
    std::snprintf(buf, sizeof(buf), "%.17g", d.labels[i]);
    text += buf;
    for (int64_t k = d.row_start[i]; k < d.row_start[i + 1]; ++k) {
      std::snprintf(buf, sizeof(buf), " %u:%.9g", d.indices[k] + 1, static_cast<double>(d.values[k]));
      text += buf;
    }
    text += "\n";
  }
  return text;
}

void fuzz_one(const std::string& text) {
  const GlmData d = parse_libsvm(text, "fuzz input");
  pf::fuzz::must_succeed(kTarget, "an accepted file fails check_glm_data", [&] {
    check_glm_data(d);
    return 0;
  });
  LibsvmOptions same_width;
  same_width.features = d.cols;
  const std::string printed = to_text(d);
  const GlmData again =
      pf::fuzz::must_succeed(kTarget, "printed data does not parse", [&] { return parse_libsvm(printed, "printed", same_width); });
  FUZZ_CHECK(kTarget,
             again.rows == d.rows && again.cols == d.cols && again.row_start == d.row_start &&
                 again.indices == d.indices && again.values == d.values && again.labels == d.labels,
             "print -> parse changed the data; printed:\n" + printed);
  if (d.rows * d.cols > 4096) return;
  const GlmData dense = pf::fuzz::must_succeed(kTarget, "to_dense", [&] { return to_dense(d); });
  for (int64_t i = 0; i < d.rows; ++i)
    for (int64_t k = d.row_start[i]; k < d.row_start[i + 1]; ++k)
      FUZZ_CHECK(kTarget, dense.values[i * d.cols + d.indices[k]] == d.values[k], "to_dense misplaced a value");

  for (float v : d.values)
    if (std::fabs(v) > 1e3f) return;
  for (double y : d.labels)
    if (std::fabs(y) > 1e3) return;
  GlmData classes = d;
  bool two_classes = true;
  try {
    to_signed_labels(classes);
  } catch (const pf::Error&) {
    two_classes = false;
  }
  for (const Solver solver : {Solver::kSequential, Solver::kAsync, Solver::kSyscd}) {
    for (const Loss loss : {Loss::kSquared, Loss::kLogistic, Loss::kHinge}) {
      if (loss != Loss::kSquared && !two_classes) continue;
      GlmOptions o;
      o.loss = loss;
      o.solver = solver;
      o.threads = solver == Solver::kSequential ? 1 : 2;
      o.lambda = 0.1;
      o.max_epochs = 3;
      const GlmResult r = pf::fuzz::must_succeed(kTarget, std::string("training with solver ") + solver_name(solver),
                                                 [&] { return train_glm(loss == Loss::kSquared ? d : classes, o); });
      FUZZ_CHECK(kTarget, std::isfinite(r.objective) && std::isfinite(r.dual_objective),
                 std::string("a non-finite objective, loss ") + loss_name(loss));
      FUZZ_CHECK(kTarget, r.dual_objective <= r.objective + 1e-6 * (1 + std::fabs(r.objective)),
                 std::string("the dual objective is above the primal, loss ") + loss_name(loss) + ", solver " +
                     solver_name(solver));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  pf::fuzz::run_input(kTarget, [&] { fuzz_one(text); });
  return 0;
}

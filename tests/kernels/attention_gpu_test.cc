// Causal softmax and the attention layer (F, B, W) against the CPU CausalSelfAttention.
#include "runtime/kernels/cuda/attention.h"

#include <gtest/gtest.h>

#include "runtime/backend/cuda_backend.h"
#include "runtime/kernels/cuda/softmax.h"
#include "runtime/layers/attention.h"
#include "tests/kernels/cpu_reference.h"
#include "tests/kernels/device_buffer.h"
#include "tests/kernels/test_util.h"

namespace pf::test {
namespace {

using cuda::bf16;

// Reference causal softmax in double; backward through the Jacobian formula in double.
void reference_softmax(int64_t rows, int64_t steps, const std::vector<float>& s, const std::vector<float>& dp,
                       std::vector<float>& p, std::vector<float>& ds) {
  p.assign(rows * steps, 0.0f);
  ds.assign(rows * steps, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t last = r % steps;
    double m = s[r * steps];
    for (int64_t j = 1; j <= last; ++j) m = std::fmax(m, s[r * steps + j]);
    double sum = 0.0;
    for (int64_t j = 0; j <= last; ++j) sum += std::exp(s[r * steps + j] - m);
    double dot = 0.0;
    std::vector<double> pr(last + 1);
    for (int64_t j = 0; j <= last; ++j) {
      pr[j] = std::exp(s[r * steps + j] - m) / sum;
      dot += pr[j] * dp[r * steps + j];
    }
    for (int64_t j = 0; j <= last; ++j) {
      p[r * steps + j] = static_cast<float>(pr[j]);
      ds[r * steps + j] = static_cast<float>(pr[j] * (dp[r * steps + j] - dot));
    }
  }
}

template <typename T>
void check_softmax(int64_t heads, int64_t steps) {
  const int64_t rows = heads * steps;
  const std::vector<float> s = random_vector(rows * steps, 1, -5.0f, 5.0f);
  const std::vector<float> dp = random_vector(rows * steps, 2);
  std::vector<float> p, ds;
  reference_softmax(rows, steps, s, dp, p, ds);
  DeviceBuffer<float> gs(s), gdp(dp);
  DeviceBuffer<T> gp(rows * steps), gds(rows * steps);
  cuda::causal_softmax_forward<T>(nullptr, rows, steps, gs.get(), gp.get());
  // Backward from the reference probabilities (as stored in T).
  auto gp_ref = upload_as<T>(p);
  cuda::causal_softmax_backward<T>(nullptr, rows, steps, gp_ref.get(), gdp.get(), gds.get());
  std::vector<float> ds_ref;
  {
    std::vector<float> unused;
    // ds from the stored (rounded) probabilities, double math.
    const std::vector<float> ps = as_stored<T>(p);
    ds_ref.assign(rows * steps, 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t last = r % steps;
      double dot = 0.0;
      for (int64_t j = 0; j <= last; ++j) dot += static_cast<double>(ps[r * steps + j]) * dp[r * steps + j];
      for (int64_t j = 0; j <= last; ++j) ds_ref[r * steps + j] = static_cast<float>(ps[r * steps + j] * (dp[r * steps + j] - dot));
    }
  }
  const Tolerance tol = pick<T>(kF32Reduction, kBf16Reduction);
  EXPECT_TRUE(all_close(download_f32(gp), p, tol)) << "forward " << heads << "x" << steps;
  EXPECT_TRUE(all_close(download_f32(gds), ds_ref, tol)) << "backward";
  if (!kIsBf16<T>) {  // in place
    DeviceBuffer<float> inplace(s);
    cuda::causal_softmax_forward<float>(nullptr, rows, steps, inplace.get(), inplace.get());
    EXPECT_TRUE(all_close(inplace.download(), p, tol)) << "forward in place";
  }
}

TEST(SoftmaxGpu, CausalSoftmaxMatchesReference) {
  PF_REQUIRE_GPU();
  for (auto [heads, steps] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 7}, {3, 300}, {4, 1024}}) {
    check_softmax<float>(heads, steps);
    check_softmax<bf16>(heads, steps);
  }
}

template <typename T>
void check_attention(int64_t batch, int64_t steps, int64_t dim, int64_t heads) {
  const int64_t rows = batch * steps;
  CausalSelfAttention attn("attn", dim, heads);
  std::vector<std::vector<float>> params;
  const std::vector<Parameter*> ps = attn.parameters();  // qkv.w, qkv.b, proj.w, proj.b
  for (size_t i = 0; i < ps.size(); ++i) {
    params.push_back(as_stored<T>(random_vector(ps[i]->value.numel(), 10 + i, -0.3f, 0.3f)));
    set_value(ps[i], params.back());
  }
  const std::vector<float> x = as_stored<T>(random_vector(rows * dim, 1));
  const std::vector<float> dy = as_stored<T>(random_vector(rows * dim, 2));
  SavedContext ctx;
  const std::vector<float> y = attn.forward(tensor({batch, steps, dim}, x), ctx).to_vector();
  const std::vector<float> dx = attn.backward_input(ctx, tensor({batch, steps, dim}, dy)).to_vector();
  attn.backward_weight(ctx);

  std::vector<DeviceBuffer<T>> gparams;
  for (const auto& p : params) gparams.push_back(upload_as<T>(p));
  cuda::AttentionWeights<T> w{gparams[0].get(), gparams[1].get(), gparams[2].get(), gparams[3].get()};
  std::vector<DeviceBuffer<float>> ggrads;
  for (const auto& p : params) ggrads.emplace_back(p.size());
  cuda::AttentionGrads g{ggrads[0].get(), ggrads[1].get(), ggrads[2].get(), ggrads[3].get()};
  DeviceBuffer<T> qkv(rows * 3 * dim), probs(batch * heads * steps * steps), attended(rows * dim),
      d_qkv(rows * 3 * dim), gy(rows * dim), gdx(rows * dim);
  cuda::AttentionActivations<T> acts{qkv.get(), probs.get(), attended.get(), d_qkv.get()};
  const cuda::AttentionShape shape{batch, steps, dim, heads};
  DeviceBytes workspace(cuda::attention_workspace_bytes<T>(shape));
  auto gx = upload_as<T>(x), gdy = upload_as<T>(dy);
  cuda::attention_forward<T>(nullptr, shape, w, gx.get(), acts, gy.get(), workspace.ptr());
  cuda::attention_backward_input<T>(nullptr, shape, w, acts, gdy.get(), gdx.get(), workspace.ptr());
  cuda::attention_backward_weight<T>(nullptr, shape, gx.get(), acts, gdy.get(), g);
  const Tolerance tol = pick<T>(kF32Layer, kBf16Layer);
  EXPECT_TRUE(all_close(download_f32(gy), y, tol)) << "forward " << batch << "x" << steps << "x" << dim;
  EXPECT_TRUE(all_close(download_f32(gdx), dx, tol)) << "backward_input";
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_TRUE(all_close(ggrads[i].download(), ps[i]->grad.to_vector(), tol)) << ps[i]->name;
  }
}

TEST(AttentionGpu, MatchesCpuAttention) {
  PF_REQUIRE_GPU();
  for (auto [batch, steps, dim, heads] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
           {1, 1, 8, 2}, {2, 7, 12, 3}, {2, 33, 64, 4}, {1, 257, 128, 2}}) {
    check_attention<float>(batch, steps, dim, heads);
    check_attention<bf16>(batch, steps, dim, heads);
  }
}

}  // namespace
}  // namespace pf::test

// Cross-entropy, embedding (F, W and W's determinism) and AdamW against the CPU.
#include <gtest/gtest.h>

#include "runtime/backend/cuda_backend.h"
#include "runtime/kernels/cuda/adamw.h"
#include "runtime/kernels/cuda/cross_entropy.h"
#include "runtime/kernels/cuda/embedding.h"
#include "runtime/layers/cross_entropy.h"
#include "runtime/layers/embedding.h"
#include "runtime/optim/adamw.h"
#include "tests/kernels/cpu_reference.h"
#include "tests/kernels/device_buffer.h"
#include "tests/kernels/test_util.h"

namespace pf::test {
namespace {

using cuda::bf16;

template <typename T>
void check_cross_entropy(int64_t rows, int64_t classes) {
  const float scale = 0.5f;
  const std::vector<float> x = as_stored<T>(random_vector(rows * classes, 1, -6.0f, 6.0f));
  const std::vector<int32_t> t = random_ids(rows, 2, static_cast<int32_t>(classes));
  CrossEntropyLoss loss;
  SavedContext ctx;
  const float want_loss = loss.forward(tensor({rows, classes}, x), Tensor::from_ints({rows}, t), scale, ctx);
  const std::vector<float> want_grad = loss.backward(ctx).to_vector();
  auto gx = upload_as<T>(x);
  DeviceBuffer<int32_t> gt(t);
  DeviceBuffer<double> row_loss(rows);
  DeviceBuffer<float> gloss(1);
  DeviceBuffer<T> ggrad(rows * classes);
  cuda::cross_entropy_forward<T>(nullptr, rows, classes, gx.get(), gt.get(), scale, row_loss.get(), gloss.get());
  cuda::cross_entropy_backward<T>(nullptr, rows, classes, gx.get(), gt.get(), scale, ggrad.get());
  // fp64 inside: the loss agrees to fp32 rounding.
  EXPECT_TRUE(all_close(gloss.download(), {want_loss}, {1e-6, 1e-7})) << rows << "x" << classes;
  EXPECT_TRUE(all_close(download_f32(ggrad), want_grad, pick<T>(kF32Elementwise, kBf16Elementwise)));
}

TEST(CrossEntropyGpu, MatchesCpuLoss) {
  PF_REQUIRE_GPU();
  for (auto [rows, classes] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {3, 5}, {64, 97}, {300, 1000}, {17, 50257}}) {
    check_cross_entropy<float>(rows, classes);
    check_cross_entropy<bf16>(rows, classes);
  }
}

template <typename T>
void check_embedding(int64_t batch, int64_t steps, int64_t dim, int64_t vocab) {
  Embedding emb("emb", vocab, steps + 3, dim);
  const std::vector<float> tok = as_stored<T>(random_vector(vocab * dim, 1));
  const std::vector<float> pos = as_stored<T>(random_vector((steps + 3) * dim, 2));
  set_value(emb.parameters()[0], tok);
  set_value(emb.parameters()[1], pos);
  const std::vector<float> tok_grad0 = random_vector(vocab * dim, 3), pos_grad0 = random_vector((steps + 3) * dim, 4);
  std::memcpy(emb.parameters()[0]->grad.f32(), tok_grad0.data(), tok_grad0.size() * 4);
  std::memcpy(emb.parameters()[1]->grad.f32(), pos_grad0.data(), pos_grad0.size() * 4);
  // Few distinct ids, so many rows share an id.
  const std::vector<int32_t> ids = random_ids(batch * steps, 5, static_cast<int32_t>(std::min<int64_t>(vocab, 7)));
  const std::vector<float> dy = as_stored<T>(random_vector(batch * steps * dim, 6));
  SavedContext ctx;
  const std::vector<float> y = emb.forward(Tensor::from_ints({batch, steps}, ids), ctx).to_vector();
  emb.backward_input(ctx, tensor({batch, steps, dim}, dy));
  emb.backward_weight(ctx);

  DeviceBuffer<int32_t> gids(ids);
  auto gtok = upload_as<T>(tok), gpos = upload_as<T>(pos), gdy = upload_as<T>(dy);
  DeviceBuffer<T> gy(batch * steps * dim);
  DeviceBuffer<float> dtok(tok_grad0), dpos(pos_grad0);
  DeviceBytes ws(cuda::embedding_backward_workspace_bytes(batch, steps));
  cuda::embedding_forward<T>(nullptr, batch, steps, dim, vocab, gids.get(), gtok.get(), gpos.get(), gy.get());
  cuda::embedding_backward_weight<T>(nullptr, batch, steps, dim, vocab, gids.get(), gdy.get(), dtok.get(),
                                     dpos.get(), ws.ptr());
  EXPECT_TRUE(all_close(download_f32(gy), y, pick<T>(kF32Elementwise, kBf16Elementwise)));
  // Same additions in the same order as the CPU: bitwise (dy is exact in fp32 for both types).
  const std::vector<float> got_tok = dtok.download(), got_pos = dpos.download();
  const std::vector<float> want_tok = emb.parameters()[0]->grad.to_vector();
  const std::vector<float> want_pos = emb.parameters()[1]->grad.to_vector();
  EXPECT_EQ(std::memcmp(got_tok.data(), want_tok.data(), want_tok.size() * 4), 0) << "token grad";
  EXPECT_EQ(std::memcmp(got_pos.data(), want_pos.data(), steps * dim * 4), 0) << "position grad";
}

TEST(EmbeddingGpu, MatchesCpuLayerBitwiseInW) {
  PF_REQUIRE_GPU();
  for (auto [batch, steps, dim, vocab] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
           {1, 1, 1, 1}, {2, 5, 7, 3}, {3, 100, 64, 50}, {4, 300, 257, 1000}}) {
    check_embedding<float>(batch, steps, dim, vocab);
    check_embedding<bf16>(batch, steps, dim, vocab);
  }
}

TEST(EmbeddingGpu, WeightGradientIsBitwiseDeterministic) {
  PF_REQUIRE_GPU();
  const int64_t batch = 8, steps = 1024, dim = 768, vocab = 50257;
  // Skewed ids: a quarter of the rows share id 13.
  std::vector<int32_t> ids = random_ids(batch * steps, 1, vocab);
  for (size_t i = 0; i < ids.size(); i += 4) ids[i] = 13;
  DeviceBuffer<int32_t> gids(ids);
  DeviceBuffer<float> dy(random_vector(batch * steps * dim, 2));
  DeviceBytes ws(cuda::embedding_backward_workspace_bytes(batch, steps));
  std::vector<float> first_tok, first_pos;
  for (int run = 0; run < 3; ++run) {
    DeviceBuffer<float> dtok(vocab * dim), dpos(steps * dim);
    cuda::embedding_backward_weight<float>(nullptr, batch, steps, dim, vocab, gids.get(), dy.get(), dtok.get(),
                                           dpos.get(), ws.ptr());
    const std::vector<float> t = dtok.download(), p = dpos.download();
    if (run == 0) {
      first_tok = t;
      first_pos = p;
    } else {
      EXPECT_EQ(std::memcmp(t.data(), first_tok.data(), t.size() * 4), 0) << "run " << run;
      EXPECT_EQ(std::memcmp(p.data(), first_pos.data(), p.size() * 4), 0) << "run " << run;
    }
  }
}

TEST(AdamWGpu, MatchesCpuOptimizerWithBf16Copy) {
  PF_REQUIRE_GPU();
  for (int64_t n : {1, 255, 100003}) {
    OptimizerConfig config;
    config.lr = 1e-2f;
    config.weight_decay = 0.1f;
    config.beta2 = 0.95f;
    AdamW opt(config);
    Parameter p = make_parameter("w", {n}, InitSpec::zeros());
    const std::vector<float> w0 = random_vector(n, 1);
    set_value(&p, w0);
    DeviceBuffer<float> w(w0), g(n), m(n), v(n);
    DeviceBuffer<bf16> w16(n);
    cuda::AdamWHyper hyper{config.lr, config.beta1, config.beta2, config.eps, config.weight_decay};
    for (int64_t step = 1; step <= 4; ++step) {
      const std::vector<float> grad = random_vector(n, 10 + step);
      std::memcpy(p.grad.f32(), grad.data(), n * 4);
      opt.step({&p});
      g.upload(grad);
      cuda::adamw_step(nullptr, n, hyper, step, w.get(), g.get(), m.get(), v.get(), w16.get());
    }
    const std::vector<float> want = p.value.to_vector();
    const std::vector<float> got = w.download();
    EXPECT_TRUE(all_close(got, want, kF32Elementwise)) << "n " << n;
    const std::vector<bf16> copy = w16.download();
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(copy[i].bits, cuda::f32_to_bf16_bits(got[i])) << i;
  }
}

}  // namespace
}  // namespace pf::test

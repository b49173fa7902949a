// The composed GPT block (F, B, W) against the CPU TransformerBlock, and a realistic-shape run
// (finite, bitwise reproducible).
#include "runtime/kernels/cuda/gpt_block.h"

#include <gtest/gtest.h>

#include "runtime/backend/cuda_backend.h"
#include "runtime/layers/transformer_block.h"
#include "tests/kernels/cpu_reference.h"
#include "tests/kernels/device_buffer.h"
#include "tests/kernels/test_util.h"

namespace pf::test {
namespace {

using cuda::bf16;

// TransformerBlock::parameters() order.
const char* const kParamSuffixes[] = {"ln1.weight", "ln1.bias", "attn.qkv.weight", "attn.qkv.bias",
                                      "attn.proj.weight", "attn.proj.bias", "ln2.weight", "ln2.bias",
                                      "mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias"};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

template <typename T>
struct DeviceBlock {
  std::vector<DeviceBuffer<T>> values;
  std::vector<DeviceBuffer<float>> grads;
  cuda::GptBlockWeights<T> weights() const {
    cuda::GptBlockWeights<T> w;
    const T* p[cuda::kGptBlockParameters];
    for (int i = 0; i < cuda::kGptBlockParameters; ++i) p[i] = values[i].get();
    w = cuda::gpt_block_weights<T>(p);
    return w;
  }
  cuda::GptBlockGrads grad_ptrs() const {
    cuda::GptBlockGrads g;
    float* p[cuda::kGptBlockParameters];
    for (int i = 0; i < cuda::kGptBlockParameters; ++i) p[i] = grads[i].get();
    g = cuda::gpt_block_grads(p);
    return g;
  }
};

template <typename T>
void check_block(int64_t batch, int64_t steps, int64_t dim, int64_t heads, int64_t hidden) {
  const int64_t rows = batch * steps;
  TransformerBlock block("blk", dim, heads, hidden);
  const std::vector<Parameter*> ps = block.parameters();
  ASSERT_EQ(ps.size(), 12u);
  DeviceBlock<T> dev;
  for (size_t i = 0; i < ps.size(); ++i) {
    ASSERT_TRUE(ends_with(ps[i]->name, kParamSuffixes[i])) << ps[i]->name;
    const bool is_gamma = ends_with(ps[i]->name, "ln1.weight") || ends_with(ps[i]->name, "ln2.weight");
    const std::vector<float> v = as_stored<T>(
        is_gamma ? random_vector(ps[i]->value.numel(), 20 + i, 0.5f, 1.5f)
                 : random_vector(ps[i]->value.numel(), 20 + i, -0.2f, 0.2f));
    set_value(ps[i], v);
    dev.values.push_back(upload_as<T>(v));
    dev.grads.emplace_back(v.size());
  }
  const std::vector<float> x = as_stored<T>(random_vector(rows * dim, 1));
  const std::vector<float> dy = as_stored<T>(random_vector(rows * dim, 2));
  SavedContext ctx;
  const std::vector<float> y = block.forward(tensor({batch, steps, dim}, x), ctx).to_vector();
  const std::vector<float> dx = block.backward_input(ctx, tensor({batch, steps, dim}, dy)).to_vector();
  block.backward_weight(ctx);

  const cuda::GptBlockShape shape{batch, steps, dim, heads, hidden};
  DeviceBytes act_bytes(cuda::gpt_block_activation_bytes<T>(shape));
  DeviceBytes workspace(cuda::gpt_block_workspace_bytes<T>(shape));
  const cuda::GptBlockActivations<T> acts = cuda::gpt_block_carve_activations<T>(shape, act_bytes.ptr());
  auto gx = upload_as<T>(x), gdy = upload_as<T>(dy);
  DeviceBuffer<T> gy(rows * dim), gdx(rows * dim);
  cuda::gpt_block_forward<T>(nullptr, shape, dev.weights(), gx.get(), acts, gy.get(), workspace.ptr());
  cuda::gpt_block_backward_input<T>(nullptr, shape, dev.weights(), gx.get(), acts, gdy.get(), gdx.get(),
                                    workspace.ptr());
  cuda::gpt_block_backward_weight<T>(nullptr, shape, gx.get(), acts, gdy.get(), dev.grad_ptrs());
  const Tolerance tol = pick<T>(kF32Layer, kBf16Layer);
  EXPECT_TRUE(all_close(download_f32(gy), y, tol)) << "forward";
  EXPECT_TRUE(all_close(download_f32(gdx), dx, tol)) << "backward_input";
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_TRUE(all_close(dev.grads[i].download(), ps[i]->grad.to_vector(), tol)) << ps[i]->name;
  }
}

TEST(GptBlockGpu, MatchesCpuTransformerBlock) {
  PF_REQUIRE_GPU();
  check_block<float>(2, 9, 16, 2, 40);
  check_block<bf16>(2, 9, 16, 2, 40);
  check_block<float>(1, 130, 64, 4, 256);
  check_block<bf16>(1, 130, 64, 4, 256);
}

// Realistic shape (hidden 1024, sequence 1024): finite and bitwise identical run to run.
template <typename T>
void check_block_reproducible() {
  const cuda::GptBlockShape shape{1, 1024, 1024, 16, 4096};
  const int64_t rows = shape.rows(), dim = shape.dim;
  DeviceBlock<T> dev;
  const int64_t sizes[12] = {dim, dim, 3 * dim * dim, 3 * dim, dim * dim, dim, dim, dim,
                             shape.hidden * dim, shape.hidden, dim * shape.hidden, dim};
  for (int i = 0; i < 12; ++i) {
    const bool is_gamma = i == 0 || i == 6;
    dev.values.push_back(upload_as<T>(is_gamma ? random_vector(sizes[i], i, 0.9f, 1.1f)
                                               : random_vector(sizes[i], i, -0.02f, 0.02f)));
  }
  auto x = upload_as<T>(random_vector(rows * dim, 100));
  auto dy = upload_as<T>(random_vector(rows * dim, 101, -1e-3f, 1e-3f));
  DeviceBytes act_bytes(cuda::gpt_block_activation_bytes<T>(shape));
  DeviceBytes workspace(cuda::gpt_block_workspace_bytes<T>(shape));
  const auto acts = cuda::gpt_block_carve_activations<T>(shape, act_bytes.ptr());
  std::vector<std::vector<float>> first;
  for (int run = 0; run < 2; ++run) {
    dev.grads.clear();
    for (int i = 0; i < 12; ++i) dev.grads.emplace_back(sizes[i]);
    DeviceBuffer<T> y(rows * dim), dx(rows * dim);
    cuda::gpt_block_forward<T>(nullptr, shape, dev.weights(), x.get(), acts, y.get(), workspace.ptr());
    cuda::gpt_block_backward_input<T>(nullptr, shape, dev.weights(), x.get(), acts, dy.get(), dx.get(),
                                      workspace.ptr());
    cuda::gpt_block_backward_weight<T>(nullptr, shape, x.get(), acts, dy.get(), dev.grad_ptrs());
    std::vector<std::vector<float>> outs = {download_f32(y), download_f32(dx)};
    for (int i = 0; i < 12; ++i) outs.push_back(dev.grads[i].download());
    for (const auto& o : outs) {
      for (float v : o) ASSERT_TRUE(std::isfinite(v));
    }
    if (run == 0) {
      first = outs;
    } else {
      for (size_t i = 0; i < outs.size(); ++i) {
        EXPECT_EQ(std::memcmp(outs[i].data(), first[i].data(), outs[i].size() * 4), 0) << "output " << i;
      }
    }
  }
}

TEST(GptBlockGpu, RealisticShapeIsFiniteAndReproducible) {
  PF_REQUIRE_GPU();
  check_block_reproducible<float>();
  check_block_reproducible<bf16>();
}

}  // namespace
}  // namespace pf::test

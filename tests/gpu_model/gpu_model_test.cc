#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/delimited_message_util.h>

#include "runtime/core/error.h"
#include "runtime/gpu_model/chakra/et_def.pb.h"
#include "runtime/gpu_model/chakra_trace.h"
#include "runtime/schedules/schedule_request.h"
#include "runtime/gpu_model/cluster_search.h"
#include "runtime/gpu_model/collectives.h"
#include "runtime/gpu_model/gpt_step.h"
#include "runtime/gpu_model/gpu_system.h"
#include "runtime/gpu_model/operator_costs.h"

namespace pf::gpu {
namespace {

// Published per-iteration times of GPT models on A100 80 GB (Selene), Korthikanti et al. 2022,
// "Reducing Activation Recomputation in Large Transformer Models" (arXiv 2205.05198): full
// recompute with tensor parallelism, and selective recompute with sequence parallelism. Sequence
// 2048, vocabulary 51200, micro-batch as listed, fp16, the attention of Megatron-LM at the time
// (unfused). Interleaving v as the runs used it.
struct PublishedRow {
  const char* model;
  GptShape shape;
  int T, P, v;
  int64_t batch, micro_batch;
  double full_s, selective_sp_s;
};

const std::vector<PublishedRow>& published_rows() {
  static const std::vector<PublishedRow> rows = {
      {"22B", {48, 6144, 64, 51200, 2048}, 8, 1, 1, 4, 4, 1.42, 1.10},
      {"175B", {96, 12288, 96, 51200, 2048}, 8, 8, 3, 64, 1, 18.13, 13.75},
      {"530B", {105, 20480, 128, 51200, 2048}, 8, 35, 3, 280, 1, 49.05, 37.83},
      {"1T", {128, 25600, 160, 51200, 2048}, 8, 64, 1, 512, 1, 94.42, 71.49},
  };
  return rows;
}

StepRequest request_of(const PublishedRow& row, bool full) {
  StepRequest r;
  r.system = gpu_preset("a100-80gb");
  r.model = row.shape;
  r.grid = {row.T, row.P, 1};
  r.chunks = row.v;
  r.global_batch = row.batch;
  r.micro_batch = row.micro_batch;
  r.recompute = full ? Recompute::kFull : Recompute::kSelective;
  r.sequence_parallel = !full;
  r.precision = Precision::kFp16;
  r.attention = Attention::kUnfused;
  return r;
}

TEST(GpuModel, PredictsThePublishedStepTimesWithinTenPercent) {
  double worst = 0;
  std::printf("%-6s %-14s %10s %10s %8s %8s %8s\n", "model", "recompute", "published", "predicted", "error",
              "TFLOP/s", "bubble");
  for (const PublishedRow& row : published_rows()) {
    for (bool full : {true, false}) {
      const StepPrediction p = predict_step(request_of(row, full));
      const double published = full ? row.full_s : row.selective_sp_s;
      const double error = p.step_seconds / published - 1;
      worst = std::max(worst, std::fabs(error));
      std::printf("%-6s %-14s %10.2f %10.2f %+7.1f%% %8.1f %8.3f\n", row.model, full ? "full" : "selective+SP",
                  published, p.step_seconds, 100 * error, p.tflops_per_gpu, p.bubble_rate);
      EXPECT_LT(std::fabs(error), 0.10) << row.model << (full ? " full" : " selective+SP");
    }
  }
  std::printf("largest error %.1f%%\n", 100 * worst);
}


// A 1T row's published utilisation (the Megatron-LM README: 56.3% MFU for selective recompute
// with sequence parallelism, 71.49 s per step) follows from SC21's 72 x ... count.
TEST(GpuModel, FlopsCountGivesThePublishedUtilisation) {
  const PublishedRow& one_t = published_rows().back();
  const double mfu = megatron_flops(one_t.shape, 512, false) / (one_t.selective_sp_s * 512 * 312e12);
  EXPECT_NEAR(mfu, 0.563, 0.002);
  // 96 x ... with full recompute: 4/3 of the 72 x ... count up to the vocabulary term.
  const GptShape m{24, 1024, 16, 50000, 1024};
  const double s = 1024, l = 24, h = 1024, V = 50000, B = 8;
  EXPECT_DOUBLE_EQ(megatron_flops(m, B, true), 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)));
  EXPECT_DOUBLE_EQ(megatron_flops(m, B, false), 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h)));
}

TEST(GpuModel, PresetsAreReadStrictly) {
  for (const std::string& name : gpu_preset_names()) {
    const GpuSystem s = gpu_preset(name);
    EXPECT_EQ(s.name, name);
    EXPECT_EQ(gpu_system_to_json(gpu_system_from_json(gpu_system_to_json(s), "x")), gpu_system_to_json(s));
  }
  EXPECT_EQ(gpu_preset_names(), (std::vector<std::string>{"a100-40gb", "a100-80gb", "h100-sxm", "h200"}));
  EXPECT_DOUBLE_EQ(gpu_preset("h100-sxm").gpu.peak(Precision::kBf16), 989.4e12);
  EXPECT_EQ(gpu_preset("h200").gpu.memory_bytes, int64_t{143771} << 20);
  try {
    gpu_preset("h100-smx");
    FAIL() << "an unknown preset was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'h100-sxm'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("presets: a100-40gb, a100-80gb, h100-sxm, h200"), std::string::npos) << e.what();
  }
  nlohmann::json bad = gpu_system_to_json(gpu_preset("a100-80gb"));
  bad["gpu"]["gemm_efficency"] = 0.5;
  EXPECT_THROW(
      try { gpu_system_from_json(bad, "my.json"); } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("my.json: gpu.gemm_efficency"), std::string::npos) << e.what();
        throw;
      },
      Error);
  bad = gpu_system_to_json(gpu_preset("a100-80gb"));
  bad["network"]["efficiency"] = 1.5;
  EXPECT_THROW(
      try { gpu_system_from_json(bad, "my.json"); } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("network.efficiency"), std::string::npos) << e.what();
        throw;
      },
      Error);
}

TEST(GpuModel, GemmRooflineQuantisesWavesAndShortInnerDimensions) {
  GpuSpec gpu = gpu_preset("a100-80gb").gpu;
  EXPECT_DOUBLE_EQ(wave_efficiency(108, 108), 1.0);
  EXPECT_DOUBLE_EQ(wave_efficiency(109, 108), 109.0 / 216);
  gpu.kernel_overhead_s = 0;
  gpu.gemm_k_overhead = 0;
  // 3456 x 8192 x 8192: 27 x 64 tiles = 16 whole waves on 108 SMs: compute-bound at peak x efficiency.
  const double flops = 2.0 * 3456 * 8192 * 8192;
  EXPECT_NEAR(gemm_seconds(gpu, Precision::kBf16, 3456, 8192, 8192), flops / (312e12 * 0.80), 1e-12);
  // One row more starts a 17th wave.
  EXPECT_NEAR(gemm_seconds(gpu, Precision::kBf16, 3457, 8192, 8192) / gemm_seconds(gpu, Precision::kBf16, 3456, 8192, 8192),
              3457.0 / 3456 * (17.0 * 108) / (28 * 64), 1e-9);  // 28 x 64 tiles over 17 waves of 108
  // A matrix-vector product is memory-bound: its bytes at the HBM bandwidth x efficiency.
  const double bytes = (8192.0 * 8192 + 8192 + 8192) * 2;
  EXPECT_NEAR(gemm_seconds(gpu, Precision::kBf16, 8192, 1, 8192), bytes / (2039e9 * 0.85), 1e-12);
  gpu.gemm_k_overhead = 256;
  // K = 256 with a 256-element prologue and epilogue: half the rate.
  EXPECT_NEAR(gemm_seconds(gpu, Precision::kBf16, 3456, 8192, 256) /
                  (2.0 * 3456 * 8192 * 256 / (312e12 * 0.80)),
              2.0, 1e-9);
}

TEST(GpuModel, CollectivesFollowThePlacement) {
  const GpuSystem sys = gpu_preset("h100-sxm");
  const Grid grid{8, 4, 2};  // rank = tp + 8 (dp + 2 pp)
  EXPECT_EQ(grid.tensor_group(), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(grid.data_group(), (std::vector<int>{0, 8}));
  EXPECT_EQ(grid.pipeline_group(), (std::vector<int>{0, 16, 32, 48}));
  EXPECT_EQ(&group_link(sys, grid.tensor_group()), &sys.nvlink);
  EXPECT_EQ(&group_link(sys, grid.data_group()), &sys.network);
  EXPECT_EQ(&group_link(sys, Grid{2, 1, 4}.data_group()), &sys.nvlink);  // 0, 2, 4, 6: one node
  const double bytes = 1e9;
  EXPECT_NEAR(allreduce_seconds(sys.nvlink, 8, bytes), 2 * 7.0 / 8 * bytes / (450e9 * 0.8) + 14 * 2e-6, 1e-12);
  EXPECT_NEAR(allgather_seconds(sys.network, 4, bytes), 3.0 / 4 * bytes / (50e9 * 0.9) + 3 * 5e-6, 1e-12);
  EXPECT_EQ(allreduce_seconds(sys.nvlink, 1, bytes), 0.0);
  EXPECT_NEAR(p2p_seconds(sys.network, bytes), bytes / 45e9 + 5e-6, 1e-12);
}

StepRequest small_request() {
  StepRequest r;
  r.system = gpu_preset("h100-sxm");
  r.model = {24, 2048, 16, 50257, 2048};
  r.grid = {2, 4, 2};
  r.global_batch = 64;
  r.micro_batch = 2;
  return r;
}

TEST(GpuModel, RefusesWhatCannotRunNamingTheOption) {
  auto message = [](StepRequest r) {
    try {
      predict_step(r);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  StepRequest r = small_request();
  r.grid.tensor = 3;
  EXPECT_NE(message(r).find("--heads 16 is not divisible by --tensor-parallel 3"), std::string::npos) << message(r);
  r = small_request();
  r.global_batch = 66;
  EXPECT_NE(message(r).find("--global-batch 66"), std::string::npos) << message(r);
  r = small_request();
  r.grid.pipeline = 8;
  r.chunks = 4;
  EXPECT_NE(message(r).find("--layers 24 is fewer than the 32 stages"), std::string::npos) << message(r);
  r = small_request();
  r.schedule = "pipedream";
  EXPECT_NE(message(r).find("synchronous"), std::string::npos) << message(r);
}

TEST(GpuModel, PipelineMemoryAndTensorParallelismBehave) {
  StepRequest r = small_request();
  const StepPrediction base = predict_step(r);
  EXPECT_GT(base.step_seconds, base.pipeline_seconds);
  EXPECT_GT(base.data_parallel_seconds, 0);
  ASSERT_EQ(base.stages.size(), 4u);
  EXPECT_TRUE(base.stages.front().embedding && base.stages.back().head);
  // More micro-batches (smaller ones) shrink the bubble.
  r.micro_batch = 1;
  EXPECT_LT(predict_step(r).bubble_rate, base.bubble_rate);
  // Recompute trades time for memory.
  r = small_request();
  r.recompute = Recompute::kFull;
  const StepPrediction full = predict_step(r);
  EXPECT_GT(full.step_seconds, base.step_seconds);
  EXPECT_LT(full.activation_bytes, base.activation_bytes);
  // Sequence parallelism divides the layers' activations by T: s b h 34 / T instead of s b h (10 + 24 / T).
  r = small_request();
  r.recompute = Recompute::kSelective;
  const StepPrediction selective = predict_step(r);
  r.sequence_parallel = true;
  const StepPrediction sp = predict_step(r);
  const double sbh = 2048.0 * 2 * 2048;
  EXPECT_NEAR(sp.stages[1].activation_bytes / sp.stages[1].layers, sbh * 34 / 2, 1);
  EXPECT_NEAR(selective.stages[1].activation_bytes / selective.stages[1].layers, sbh * (10 + 24.0 / 2), 1);
  // Parameters per GPU: a layer's 12 h^2 weights split over T.
  EXPECT_NEAR(base.stages[1].parameters / base.stages[1].layers, 12.0 * 2048 * 2048 / 2 + 7.0 * 2048 / 2 + 6 * 2048, 1e-6);
  // 1F1B's first rank holds P micro-batches: its memory is its state plus P x its stage's bytes.
  EXPECT_NEAR(base.activation_bytes, 4 * base.stages[0].activation_bytes, 1);
  // A model too large for one GPU does not fit.
  r = small_request();
  r.model = {96, 12288, 96, 51200, 2048};
  r.grid = {1, 1, 1};
  r.global_batch = 8;
  r.micro_batch = 1;
  const StepPrediction huge = predict_step(r);
  EXPECT_FALSE(huge.fits);
  EXPECT_GT(huge.memory_per_gpu_bytes, 175e9 * 18);
}


ClusterSearch small_search(size_t top) {
  ClusterSearch s;
  s.cluster = gpu_cluster_from_json(nlohmann::json{{"gpu", "a100-80gb"}, {"nodes", 2}}, "test");
  s.model = {24, 2048, 16, 50257, 2048};
  s.global_batch = 64;
  s.top = top;
  return s;
}

std::string row_key(const std::pair<StepRequest, StepPrediction>& row) {
  const auto& [r, p] = row;
  return std::to_string(r.grid.tensor) + " " + std::to_string(r.grid.pipeline) + " " + std::to_string(r.grid.data) +
         " " + p.schedule + " " + std::to_string(p.chunks) + " " + std::to_string(r.micro_batch) + " " +
         recompute_name(r.recompute) + (r.sequence_parallel ? " sp" : "");
}

TEST(ClusterSearch, PruningKeepsTheExhaustiveRanking) {
  const ClusterPlan all = search_cluster(small_search(100000));
  const ClusterPlan top = search_cluster(small_search(5));
  EXPECT_EQ(all.pruned, 0);
  EXPECT_GT(top.pruned, 0);
  EXPECT_LT(top.simulated, all.simulated);
  EXPECT_EQ(top.candidates, all.candidates);
  ASSERT_EQ(top.ranked.size(), 5u);
  ASSERT_GT(all.ranked.size(), 20u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(row_key(top.ranked[i]), row_key(all.ranked[i])) << i;
    EXPECT_EQ(top.ranked[i].second.step_seconds, all.ranked[i].second.step_seconds) << i;
  }
  // Every candidate simulated obeys its bounds, and the ranking is by step time.
  for (size_t i = 0; i < all.ranked.size(); ++i) {
    const auto& [r, p] = all.ranked[i];
    const StepBounds b = step_bounds(r);
    EXPECT_LE(b.step_seconds, p.step_seconds * (1 + 1e-12)) << row_key(all.ranked[i]);
    EXPECT_LE(b.memory_per_gpu_bytes, p.memory_per_gpu_bytes * (1 + 1e-12)) << row_key(all.ranked[i]);
    if (i > 0) {
      EXPECT_LE(all.ranked[i - 1].second.step_seconds, p.step_seconds);
    }
    EXPECT_EQ(r.grid.size(), 16);
    EXPECT_EQ(r.model.heads % r.grid.tensor, 0);
    EXPECT_LE(r.grid.tensor, 8);  // within a node
  }
}

TEST(ClusterSearch, AnEightThousandGpuClusterIsSearched) {
  ClusterSearch s;
  s.cluster = gpu_cluster_from_json(nlohmann::json{{"gpu", "h100-sxm"}, {"nodes", 1024}}, "test");
  s.model = {96, 12288, 96, 51200, 2048};
  s.global_batch = 1536;
  const ClusterPlan plan = search_cluster(s);
  EXPECT_GT(plan.candidates, 500);
  ASSERT_EQ(plan.ranked.size(), 15u);
  EXPECT_EQ(plan.ranked[0].first.grid.size(), 8192);
  EXPECT_TRUE(plan.ranked[0].second.fits);
  const std::string table = cluster_plan_table(plan, 15);
  EXPECT_NE(table.find("search: "), std::string::npos);
  EXPECT_NE(cluster_plan_svg(plan, "t").find("choice: "), std::string::npos);
}

TEST(ClusterSearch, DegradedLinksAndASlowGpuCost) {
  StepRequest r = small_request();
  const double base = predict_step(r).step_seconds;
  const GpuCluster slow = gpu_cluster_from_json(
      nlohmann::json{{"gpu", "h100-sxm"}, {"nodes", 2}, {"network", {{"gb_per_s_per_gpu", 5}}}, {"slowest_gpu_speed", 0.5}},
      "c.json");
  EXPECT_DOUBLE_EQ(slow.system.network.bandwidth, 5e9);
  EXPECT_EQ(slow.gpus(), 16);
  r.system = slow.system;
  const StepPrediction degraded = predict_step(r);
  EXPECT_GT(degraded.embedding_sync_seconds, 5 * predict_step(small_request()).embedding_sync_seconds);  // ranks 0 and 12: two nodes
  r.slowest_gpu_speed = slow.slowest_gpu_speed;
  EXPECT_GT(predict_step(r).pipeline_seconds, 1.5 * degraded.pipeline_seconds);
  EXPECT_GT(degraded.step_seconds, base);
  auto error_of = [](const nlohmann::json& j) {
    try {
      gpu_cluster_from_json(j, "c.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(error_of({{"gpu", "h100-sxm"}, {"nodes", 0}}).find("c.json: nodes"), std::string::npos);
  EXPECT_NE(error_of({{"gpu", "h100-sxm"}, {"nodes", 2}, {"slowest_gpu_speed", 2}}).find("slowest_gpu_speed"),
            std::string::npos);
  EXPECT_NE(error_of({{"gpu", "h100-sxm"}, {"nodes", 2}, {"network", {{"bandwith", 5}}}}).find("network.bandwith"),
            std::string::npos);
  EXPECT_NE(error_of({{"gpu", "h100-sxm"}, {"nodes", 2}, {"extra", 1}}).find("extra"), std::string::npos);
  EXPECT_FALSE(is_gpu_cluster({{"nodes", 1}, {"devices_per_node", 2}}));
}


struct ParsedTrace {
  ChakraProtoMsg::GlobalMetadata meta;
  std::vector<ChakraProtoMsg::Node> nodes;
};

ParsedTrace parse_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();
  google::protobuf::io::ArrayInputStream stream(bytes.data(), static_cast<int>(bytes.size()));
  ParsedTrace t;
  bool eof = false;
  EXPECT_TRUE(google::protobuf::util::ParseDelimitedFromZeroCopyStream(&t.meta, &stream, &eof)) << path;
  for (;;) {
    ChakraProtoMsg::Node n;
    if (!google::protobuf::util::ParseDelimitedFromZeroCopyStream(&n, &stream, &eof)) break;
    t.nodes.push_back(n);
  }
  EXPECT_TRUE(eof) << path << ": not all of it parsed";
  return t;
}

int64_t int_attr(const ChakraProtoMsg::Node& n, const std::string& name) {
  for (const auto& a : n.attr())
    if (a.name() == name) return a.int64_val();
  ADD_FAILURE() << n.name() << " has no " << name;
  return -1;
}

TEST(ChakraTrace, EveryRankParsesBackAsItsScheduleSaysWithMatchedMessages) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/chakra";
  StepRequest r = small_request();  // T 2, P 4, D 2: 16 GPUs
  r.schedule = "zb-h1";             // B and W apart
  const int files = write_step_traces(r, predict_step(r), dir, "pf");
  ASSERT_EQ(files, 16);
  sched::ScheduleRequest sr;
  sr.name = "zb-h1";
  sr.ranks = 4;
  sr.micro_batches = 16;  // 64 / (2 x 2)
  const sched::Schedule schedule = sched::make_schedule(sr);
  std::map<std::tuple<int64_t, int64_t, int64_t>, int> messages;  // (src, dst, tag): sends - receives
  for (int rank = 0; rank < 16; ++rank) {
    const ParsedTrace t = parse_trace(dir + "/pf." + std::to_string(rank) + ".et");
    EXPECT_EQ(t.meta.version(), "0.0.4");
    ASSERT_GE(t.meta.attr_size(), 1);
    EXPECT_EQ(t.meta.attr(0).name(), "rank");
    EXPECT_EQ(t.meta.attr(0).int64_val(), rank);
    const int pp = rank / 4;  // rank = tp + 2 (dp + 2 pp)
    // The compute nodes are the pipeline rank's F, B and W in schedule order, then the optimizer.
    std::vector<std::string> expected;
    for (const sched::Action& a : schedule.ranks[static_cast<size_t>(pp)]) {
      const std::string id = std::to_string(a.stage) + "_" + std::to_string(a.micro_batch);
      if (a.kind == sched::ActionKind::kForward) expected.push_back("F " + id);
      if (a.kind == sched::ActionKind::kBackwardInput) expected.push_back("B " + id);
      if (a.kind == sched::ActionKind::kBackwardWeight) expected.push_back("W " + id);
    }
    expected.push_back("optimizer step");
    std::vector<std::string> compute;
    int collectives = 0;
    for (size_t i = 0; i < t.nodes.size(); ++i) {
      const ChakraProtoMsg::Node& n = t.nodes[i];
      EXPECT_EQ(n.id(), i);
      for (uint64_t d : n.ctrl_deps()) EXPECT_LT(d, i) << n.name();
      for (uint64_t d : n.data_deps()) EXPECT_LT(d, i) << n.name();
      switch (n.type()) {
        case ChakraProtoMsg::COMP_NODE:
          compute.push_back(n.name());
          EXPECT_GT(n.duration_micros(), 0u) << n.name();
          break;
        case ChakraProtoMsg::COMM_COLL_NODE:
          ++collectives;
          EXPECT_GT(int_attr(n, "comm_size"), 0) << n.name();
          EXPECT_EQ(int_attr(n, "comm_type"), ChakraProtoMsg::ALL_REDUCE);
          break;
        case ChakraProtoMsg::COMM_SEND_NODE:
          ++messages[{rank, int_attr(n, "comm_dst"), int_attr(n, "comm_tag")}];
          break;
        case ChakraProtoMsg::COMM_RECV_NODE:
          --messages[{int_attr(n, "comm_src"), rank, int_attr(n, "comm_tag")}];
          // The compute that consumes it follows it and depends on it.
          ASSERT_LT(i + 1, t.nodes.size());
          ASSERT_EQ(t.nodes[i + 1].data_deps_size(), 1);
          EXPECT_EQ(t.nodes[i + 1].data_deps(0), i);
          break;
        default:
          ADD_FAILURE() << "unexpected node type " << n.type();
      }
    }
    EXPECT_EQ(compute, expected) << "rank " << rank;
    // T = 2: a collective after every F and every B; D = 2: the gradient all-reduce.
    EXPECT_EQ(collectives, 2 * 16 + 1) << "rank " << rank;
  }
  // Every send has its receive on the peer, with the same tag; a stage boundary crossed 16 x 2 ways
  // by each of 3 boundaries, on 4 (tp, dp) pairs.
  int total = 0;
  for (const auto& [key, balance] : messages) {
    EXPECT_EQ(balance, 0) << std::get<0>(key) << " -> " << std::get<1>(key) << " tag " << std::get<2>(key);
    ++total;
  }
  EXPECT_EQ(total, 3 * 16 * 2 * 4);
}

}  // namespace
}  // namespace pf::gpu

// The schedule engine through the C API: generate, parse, validate, lower, simulate, render; since
// 0.6 PyTorch's CSV, posted send/recv semantics and the cost-driven V schedules; and bad input for
// every pf_schedule_* / pf_simulation_* function (codes, messages, untouched out-params, NULL
// destroy). Runs under ASan/LSan like the other C API tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <utility>
#include <string>
#include <vector>

#include "tests/c_api/test_util.h"

namespace {

pf_schedule* generate(const char* name, int stages, int micro_batches, int chunks = 1) {
  pf_schedule_options options;
  pf_schedule_options_init(&options);
  options.stages = stages;
  options.micro_batches = micro_batches;
  options.chunks = chunks;
  pf_schedule* schedule = nullptr;
  pf_status* status = pf_schedule_generate(name, &options, &schedule);
  EXPECT_EQ(status, nullptr) << (status ? pf_status_message(status) : "");
  pf_status_destroy(status);
  return schedule;
}

double bubble_rate(const pf_schedule* schedule, const pf_cost_model* costs) {
  pf_simulation* sim = nullptr;
  EXPECT_PF_OK(pf_schedule_simulate(schedule, costs, &sim));
  pf_simulation_summary summary;
  summary.struct_size = sizeof(summary);
  EXPECT_PF_OK(pf_simulation_get_summary(sim, &summary));
  pf_simulation_destroy(sim);
  return summary.bubble_rate;
}

TEST(ScheduleApi, OneFOneBBubbleMatchesTheClosedForm) {
  for (int p : {2, 4, 8}) {
    for (int m : {1, 4, 16}) {
      pf_schedule* s = generate("1f1b", p, m);
      ASSERT_NE(s, nullptr);
      int32_t ranks = 0, stages = 0, mbs = 0;
      EXPECT_PF_OK(pf_schedule_num_ranks(s, &ranks));
      EXPECT_PF_OK(pf_schedule_num_stages(s, &stages));
      EXPECT_PF_OK(pf_schedule_num_micro_batches(s, &mbs));
      EXPECT_EQ(ranks, p);
      EXPECT_EQ(stages, p);
      EXPECT_EQ(mbs, m);
      EXPECT_NEAR(bubble_rate(s, nullptr), static_cast<double>(p - 1) / (m + p - 1), 1e-12) << p << " " << m;
      pf_schedule_destroy(s);
    }
  }
}

TEST(ScheduleApi, TextRoundTripLoweringAndRenderers) {
  pf_schedule* s = generate("zb-v", 4, 8);
  ASSERT_NE(s, nullptr);
  const char* text = nullptr;
  ASSERT_PF_OK(pf_schedule_to_text(s, &text));
  const std::string first = text;
  pf_schedule* parsed = nullptr;
  ASSERT_PF_OK(pf_schedule_parse(first.c_str(), &parsed));
  ASSERT_PF_OK(pf_schedule_to_text(parsed, &text));
  EXPECT_EQ(first, text);

  pf_schedule* lowered = nullptr;
  ASSERT_PF_OK(pf_schedule_lower(parsed, &lowered));
  EXPECT_PF_OK(pf_schedule_validate(lowered));
  ASSERT_PF_OK(pf_schedule_to_text(lowered, &text));
  EXPECT_NE(std::string(text).find("SEND_F"), std::string::npos);

  pf_cost_model costs;
  pf_cost_model_init(&costs);
  costs.t_comm = 0.25;
  EXPECT_NEAR(bubble_rate(lowered, &costs), bubble_rate(parsed, &costs), 1e-12);

  pf_simulation* sim = nullptr;
  ASSERT_PF_OK(pf_schedule_simulate(lowered, &costs, &sim));
  const char* trace = nullptr;
  const char* svg = nullptr;
  const char* ascii = nullptr;
  ASSERT_PF_OK(pf_simulation_to_chrome_trace(sim, &trace));
  ASSERT_PF_OK(pf_simulation_to_svg(sim, &svg));
  ASSERT_PF_OK(pf_simulation_to_ascii(sim, 60, &ascii));
  EXPECT_NE(std::string(trace).find("traceEvents"), std::string::npos);
  EXPECT_NE(std::string(svg).find("<svg"), std::string::npos);
  EXPECT_NE(std::string(ascii).find("rank 3"), std::string::npos);
  pf_rank_stats stats;
  stats.struct_size = sizeof(stats);
  ASSERT_PF_OK(pf_simulation_get_rank_stats(sim, 0, &stats));
  EXPECT_GT(stats.busy, 0.0);
  // ZB-V: 2p chunk activations (each chunk is half a stage), i.e. p * M_B like 1F1B's rank 0.
  EXPECT_EQ(stats.peak_activations, 8);
  pf_simulation_destroy(sim);
  pf_schedule_destroy(lowered);
  pf_schedule_destroy(parsed);
  pf_schedule_destroy(s);
}

TEST(ScheduleApi, PerStageCostsOverrideTheScalars) {
  pf_schedule* s = generate("gpipe", 2, 2);
  ASSERT_NE(s, nullptr);
  pf_cost_model costs;
  pf_cost_model_init(&costs);
  const double t_f[] = {1.0, 3.0};
  costs.num_stages = 2;
  costs.stage_t_f = t_f;
  pf_simulation* sim = nullptr;
  ASSERT_PF_OK(pf_schedule_simulate(s, &costs, &sim));
  pf_rank_stats stats;
  stats.struct_size = sizeof(stats);
  ASSERT_PF_OK(pf_simulation_get_rank_stats(sim, 1, &stats));
  EXPECT_DOUBLE_EQ(stats.busy, 2 * (3.0 + 1.0 + 1.0));
  pf_simulation_destroy(sim);
  pf_schedule_destroy(s);
}

pf_rank_stats rank_stats(const pf_schedule* schedule, const pf_cost_model* costs, int rank) {
  pf_simulation* sim = nullptr;
  EXPECT_PF_OK(pf_schedule_simulate(schedule, costs, &sim));
  pf_rank_stats stats;
  stats.struct_size = sizeof(stats);
  EXPECT_PF_OK(pf_simulation_get_rank_stats(sim, rank, &stats));
  pf_simulation_destroy(sim);
  return stats;
}

// Activation policies as a schedule pass (since 0.2): the simulator predicts the peaks under them.
TEST(ScheduleApi, ActivationPoliciesLowerThePredictedPeak) {
  pf_schedule* base = generate("1f1b", 4, 8);
  ASSERT_NE(base, nullptr);
  pf_cost_model costs;
  pf_cost_model_init(&costs);
  costs.m_b = 100;
  costs.m_in = 10;
  costs.transfer_bandwidth = 200;
  EXPECT_DOUBLE_EQ(rank_stats(base, &costs, 0).peak_activation_bytes, 400.0);
  double min_budget = 0;
  ASSERT_PF_OK(pf_schedule_min_activation_budget(base, &costs, &min_budget));
  EXPECT_GT(min_budget, 0.0);
  EXPECT_LT(min_budget, 400.0);
  for (const char* policy : {"recompute", "offload-host", "selective", "balance"}) {
    pf_schedule* applied = nullptr;
    ASSERT_PF_OK(pf_schedule_apply_activation_policy(base, policy, &costs, min_budget, &applied));
    const pf_rank_stats r0 = rank_stats(applied, &costs, 0);
    EXPECT_LT(r0.peak_activation_bytes, 400.0) << policy;
    if (std::string(policy) == "recompute") {
      EXPECT_EQ(r0.recomputes, 8);
    } else {
      EXPECT_GT(r0.offloaded_bytes, 0.0) << policy;
    }
    if (std::string(policy) == "selective") {
      EXPECT_LE(r0.peak_activation_bytes, min_budget);
    }
    EXPECT_PF_OK(pf_schedule_validate(applied));
    pf_schedule_destroy(applied);
  }
  pf_schedule* out = reinterpret_cast<pf_schedule*>(0x1);
  EXPECT_PF_ERROR(pf_schedule_apply_activation_policy(base, "selective", &costs, min_budget / 2, &out),
                  PF_INVALID_ARGUMENT, "smallest budget that works");
  EXPECT_PF_ERROR(pf_schedule_apply_activation_policy(base, "swap", &costs, 0, &out), PF_INVALID_ARGUMENT,
                  "unknown activation policy 'swap'");
  EXPECT_PF_ERROR(pf_schedule_apply_activation_policy(nullptr, "none", &costs, 0, &out), PF_INVALID_ARGUMENT,
                  "'schedule'");
  EXPECT_PF_ERROR(pf_schedule_apply_activation_policy(base, nullptr, &costs, 0, &out), PF_INVALID_ARGUMENT,
                  "'policy'");
  EXPECT_PF_ERROR(pf_schedule_apply_activation_policy(base, "none", &costs, 0, nullptr), PF_INVALID_ARGUMENT,
                  "'out'");
  costs.transfer_bandwidth = -1;
  EXPECT_PF_ERROR(pf_schedule_apply_activation_policy(base, "offload-host", &costs, 0, &out), PF_INVALID_ARGUMENT,
                  "transfer_bandwidth");
  EXPECT_EQ(out, reinterpret_cast<pf_schedule*>(0x1));
  double untouched = -5;
  EXPECT_PF_ERROR(pf_schedule_min_activation_budget(nullptr, nullptr, &untouched), PF_INVALID_ARGUMENT, "'schedule'");
  EXPECT_PF_ERROR(pf_schedule_min_activation_budget(base, nullptr, nullptr), PF_INVALID_ARGUMENT, "'out'");
  EXPECT_EQ(untouched, -5);
  pf_schedule_destroy(base);
}

TEST(ScheduleApiBadInput, EveryFunctionReportsAndLeavesOutParamsAlone) {
  pf_schedule_options options;
  pf_schedule_options_init(&options);
  options.stages = 4;
  options.micro_batches = 8;
  pf_schedule* const sentinel = reinterpret_cast<pf_schedule*>(0x1);
  pf_schedule* out = sentinel;

  EXPECT_PF_ERROR(pf_schedule_generate(nullptr, &options, &out), PF_INVALID_ARGUMENT, "'name'");
  EXPECT_PF_ERROR(pf_schedule_generate("1f1b", nullptr, &out), PF_INVALID_ARGUMENT, "'options'");
  EXPECT_PF_ERROR(pf_schedule_generate("1f1b", &options, nullptr), PF_INVALID_ARGUMENT, "'out'");
  EXPECT_PF_ERROR(pf_schedule_generate("2f2b", &options, &out), PF_INVALID_ARGUMENT, "2f2b", "zb-h1");
  pf_schedule_options small = options;
  small.struct_size = 4;
  EXPECT_PF_ERROR(pf_schedule_generate("1f1b", &small, &out), PF_INVALID_ARGUMENT, "struct_size");
  pf_schedule_options no_stages = options;
  no_stages.stages = 0;
  EXPECT_PF_ERROR(pf_schedule_generate("1f1b", &no_stages, &out), PF_INVALID_ARGUMENT, "stages");
  EXPECT_EQ(out, sentinel);

  EXPECT_PF_ERROR(pf_schedule_parse(nullptr, &out), PF_INVALID_ARGUMENT, "'text'");
  EXPECT_PF_ERROR(pf_schedule_parse("0F0 0QQ1", &out), PF_INVALID_ARGUMENT, "0QQ1");
  // Parses, but B before F on rank 0 is not a valid schedule.
  EXPECT_PF_ERROR(pf_schedule_parse("0BW0 0F0", &out), PF_INVALID_ARGUMENT, "rank 0");
  EXPECT_EQ(out, sentinel);

  pf_schedule* s = generate("1f1b", 2, 2);
  ASSERT_NE(s, nullptr);
  const char* text = "untouched";
  EXPECT_PF_ERROR(pf_schedule_to_text(nullptr, &text), PF_INVALID_ARGUMENT, "'schedule'");
  EXPECT_PF_ERROR(pf_schedule_to_text(s, nullptr), PF_INVALID_ARGUMENT, "'out'");
  EXPECT_STREQ(text, "untouched");
  EXPECT_PF_ERROR(pf_schedule_validate(nullptr), PF_INVALID_ARGUMENT, "'schedule'");
  EXPECT_PF_ERROR(pf_schedule_lower(nullptr, &out), PF_INVALID_ARGUMENT, "'schedule'");
  EXPECT_PF_ERROR(pf_schedule_lower(s, nullptr), PF_INVALID_ARGUMENT, "'out'");
  int32_t n = -7;
  EXPECT_PF_ERROR(pf_schedule_num_ranks(nullptr, &n), PF_INVALID_ARGUMENT, "'schedule'");
  EXPECT_PF_ERROR(pf_schedule_num_ranks(s, nullptr), PF_INVALID_ARGUMENT, "'out'");
  EXPECT_PF_ERROR(pf_schedule_num_stages(nullptr, &n), PF_INVALID_ARGUMENT, "'schedule'");
  EXPECT_PF_ERROR(pf_schedule_num_micro_batches(nullptr, &n), PF_INVALID_ARGUMENT, "'schedule'");
  EXPECT_EQ(n, -7);

  pf_simulation* const sim_sentinel = reinterpret_cast<pf_simulation*>(0x1);
  pf_simulation* sim = sim_sentinel;
  EXPECT_PF_ERROR(pf_schedule_simulate(nullptr, nullptr, &sim), PF_INVALID_ARGUMENT, "'schedule'");
  EXPECT_PF_ERROR(pf_schedule_simulate(s, nullptr, nullptr), PF_INVALID_ARGUMENT, "'out'");
  pf_cost_model costs;
  pf_cost_model_init(&costs);
  costs.t_f = -1.0;
  EXPECT_PF_ERROR(pf_schedule_simulate(s, &costs, &sim), PF_INVALID_ARGUMENT, "t_f");
  pf_cost_model_init(&costs);
  const double three[] = {1, 2, 3};
  costs.num_stages = 3;
  costs.stage_t_w = three;
  EXPECT_PF_ERROR(pf_schedule_simulate(s, &costs, &sim), PF_INVALID_ARGUMENT, "stage_t_w", "2 stages");
  pf_cost_model_init(&costs);
  costs.struct_size = 8;
  EXPECT_PF_ERROR(pf_schedule_simulate(s, &costs, &sim), PF_INVALID_ARGUMENT, "struct_size");
  EXPECT_EQ(sim, sim_sentinel);

  ASSERT_PF_OK(pf_schedule_simulate(s, nullptr, &sim));
  pf_simulation_summary summary;
  summary.struct_size = 2;
  summary.makespan = -5;
  EXPECT_PF_ERROR(pf_simulation_get_summary(sim, &summary), PF_INVALID_ARGUMENT, "struct_size");
  EXPECT_EQ(summary.makespan, -5);
  EXPECT_PF_ERROR(pf_simulation_get_summary(nullptr, &summary), PF_INVALID_ARGUMENT, "'simulation'");
  EXPECT_PF_ERROR(pf_simulation_get_summary(sim, nullptr), PF_INVALID_ARGUMENT, "'out'");
  pf_rank_stats stats;
  stats.struct_size = sizeof(stats);
  stats.busy = -5;
  EXPECT_PF_ERROR(pf_simulation_get_rank_stats(sim, 2, &stats), PF_INVALID_ARGUMENT, "rank 2", "[0, 2)");
  EXPECT_PF_ERROR(pf_simulation_get_rank_stats(sim, -1, &stats), PF_INVALID_ARGUMENT, "rank -1");
  EXPECT_PF_ERROR(pf_simulation_get_rank_stats(nullptr, 0, &stats), PF_INVALID_ARGUMENT, "'simulation'");
  EXPECT_EQ(stats.busy, -5);
  const char* rendered = "untouched";
  EXPECT_PF_ERROR(pf_simulation_to_chrome_trace(nullptr, &rendered), PF_INVALID_ARGUMENT, "'simulation'");
  EXPECT_PF_ERROR(pf_simulation_to_svg(sim, nullptr), PF_INVALID_ARGUMENT, "'out'");
  EXPECT_PF_ERROR(pf_simulation_to_ascii(sim, 3, &rendered), PF_INVALID_ARGUMENT, "width");
  EXPECT_STREQ(rendered, "untouched");
  pf_simulation_destroy(sim);
  pf_schedule_destroy(s);

  pf_schedule_destroy(nullptr);
  pf_simulation_destroy(nullptr);
  pf_schedule_options_init(nullptr);
  pf_cost_model_init(nullptr);
}

// ---- since 0.6: PyTorch's CSV, communication semantics, v-half / v-min under costs and a cap ----

std::string text_of(pf_schedule* schedule) {
  const char* text = nullptr;
  EXPECT_PF_OK(pf_schedule_to_text(schedule, &text));
  return text != nullptr ? text : "";
}

std::string pytorch_csv_of(pf_schedule* schedule, int32_t with_comms) {
  const char* csv = nullptr;
  EXPECT_PF_OK(pf_schedule_to_pytorch_csv(schedule, with_comms, &csv));
  return csv != nullptr ? csv : "";
}

pf_simulation_summary summary_of(const pf_schedule* schedule, const pf_cost_model* costs, const char* comm) {
  pf_simulation_summary summary{};
  summary.struct_size = sizeof(summary);
  pf_simulation* sim = nullptr;
  EXPECT_PF_OK(pf_schedule_simulate_comm(schedule, costs, comm, &sim));
  if (sim != nullptr) EXPECT_PF_OK(pf_simulation_get_summary(sim, &summary));
  pf_simulation_destroy(sim);
  return summary;
}

TEST(ScheduleApiPytorchCsv, RoundTripsComputeOnlyAndWithComms) {
  pf_schedule* s = generate("zb-h1", 4, 8);
  ASSERT_NE(s, nullptr);
  const std::string text = text_of(s);
  const std::string compute = pytorch_csv_of(s, 0);
  EXPECT_EQ(compute.find("SEND"), std::string::npos);
  EXPECT_NE(compute.find("0F0,"), std::string::npos) << compute;
  EXPECT_NE(compute.find("3F0,3I0,3F1"), std::string::npos) << compute;  // our B is PyTorch's I
  // The CSV has a string of its own: writing it leaves to_text's string as it was.
  const char* text_ptr = nullptr;
  ASSERT_PF_OK(pf_schedule_to_text(s, &text_ptr));
  const char* csv_ptr = nullptr;
  ASSERT_PF_OK(pf_schedule_to_pytorch_csv(s, 0, &csv_ptr));
  EXPECT_EQ(std::string(text_ptr), text);
  EXPECT_EQ(std::string(csv_ptr), compute);

  pf_schedule* parsed = nullptr;
  ASSERT_PF_OK(pf_schedule_parse_pytorch_csv(compute.c_str(), &parsed));
  EXPECT_EQ(pytorch_csv_of(parsed, 0), compute);
  int32_t n = 0;
  EXPECT_PF_OK(pf_schedule_num_ranks(parsed, &n));
  EXPECT_EQ(n, 4);
  EXPECT_PF_OK(pf_schedule_num_micro_batches(parsed, &n));
  EXPECT_EQ(n, 8);
  EXPECT_DOUBLE_EQ(summary_of(parsed, nullptr, "rendezvous").makespan, summary_of(s, nullptr, "rendezvous").makespan);

  pf_schedule* lowered = nullptr;
  ASSERT_PF_OK(pf_schedule_lower(s, &lowered));
  const std::string comms = pytorch_csv_of(lowered, 1);
  EXPECT_NE(comms.find("SEND_F"), std::string::npos) << comms;
  EXPECT_NE(comms.find("RECV_B"), std::string::npos) << comms;
  pf_schedule* reparsed = nullptr;
  ASSERT_PF_OK(pf_schedule_parse_pytorch_csv(comms.c_str(), &reparsed));
  EXPECT_EQ(pytorch_csv_of(reparsed, 1), comms);
  EXPECT_PF_OK(pf_schedule_validate(reparsed));
  pf_schedule_destroy(reparsed);
  pf_schedule_destroy(lowered);
  pf_schedule_destroy(parsed);
  pf_schedule_destroy(s);
}

// PyTorch's lowering with deferred receives, p = 2, m = 2, 1F1B (PyTorch's B is our BW): each rank
// posts the RECV it needs next before the compute its peer's SEND follows, a deadlock under
// rendezvous send/recv and fine under posted ones. The FSDP cells are dropped with a warning.
constexpr const char* kDeferredReceives =
    "0UNSHARD,0F0,0SEND_F0,0RECV_B0,0F1,0SEND_F1,0B0,0RECV_B1,0B1,0RESHARD\n"
    "1UNSHARD,1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1,1RESHARD\n";

struct LogRecorder {
  std::mutex mu;
  std::vector<std::pair<pf_log_level, std::string>> messages;
  static void log(void* user_data, pf_log_level level, const char* message) {
    auto* self = static_cast<LogRecorder*>(user_data);
    std::lock_guard<std::mutex> lock(self->mu);
    self->messages.emplace_back(level, message);
  }
};

TEST(ScheduleApiPytorchCsv, DeferredReceivesAreValidUnderPostedSemanticsOnly) {
  LogRecorder recorder;
  pf_log_sink sink{};
  sink.struct_size = sizeof(sink);
  sink.user_data = &recorder;
  sink.log = &LogRecorder::log;
  ASSERT_PF_OK(pf_set_log_sink(&sink, PF_LOG_WARNING));
  pf_schedule* s = nullptr;
  pf_status* parsed = pf_schedule_parse_pytorch_csv(kDeferredReceives, &s);
  ASSERT_PF_OK(pf_set_log_sink(nullptr, PF_LOG_WARNING));
  ASSERT_PF_OK(parsed);
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(recorder.messages.size(), 1u);  // one warning for all four cells
  EXPECT_EQ(recorder.messages[0].first, PF_LOG_WARNING);
  const std::string& warning = recorder.messages[0].second;
  EXPECT_NE(warning.find("dropped 4 cell(s)"), std::string::npos) << warning;
  EXPECT_NE(warning.find("'0UNSHARD'"), std::string::npos) << warning;
  EXPECT_NE(warning.find("'1RESHARD'"), std::string::npos) << warning;

  EXPECT_PF_ERROR(pf_schedule_validate(s), PF_INVALID_ARGUMENT, "deadlock");
  EXPECT_PF_ERROR(pf_schedule_validate_comm(s, "rendezvous"), PF_INVALID_ARGUMENT, "deadlock");
  EXPECT_PF_OK(pf_schedule_validate_comm(s, "posted"));

  pf_cost_model costs;
  pf_cost_model_init(&costs);
  costs.t_comm = 0.5;
  pf_simulation* sim = reinterpret_cast<pf_simulation*>(0x1);
  EXPECT_PF_ERROR(pf_schedule_simulate(s, &costs, &sim), PF_INVALID_ARGUMENT, "deadlock");
  EXPECT_PF_ERROR(pf_schedule_simulate_comm(s, &costs, "rendezvous", &sim), PF_INVALID_ARGUMENT, "deadlock");
  EXPECT_EQ(sim, reinterpret_cast<pf_simulation*>(0x1));
  // Rank 1's BW0 ends at 4.5 (F0 waits for 0SEND_F0 + 0.5); 0BW0 waits for 1SEND_B0 + 0.5 = 5,
  // 0BW1 for 1SEND_B1 (7.5) + 0.5 and ends at 10.
  EXPECT_DOUBLE_EQ(summary_of(s, &costs, "posted").makespan, 10.0);

  // pf_schedule_parse takes a schedule valid only under posted semantics too (its text form).
  pf_schedule* from_text = nullptr;
  ASSERT_PF_OK(pf_schedule_parse(text_of(s).c_str(), &from_text));
  EXPECT_EQ(text_of(from_text), text_of(s));
  EXPECT_PF_ERROR(pf_schedule_validate(from_text), PF_INVALID_ARGUMENT, "deadlock");
  pf_schedule_destroy(from_text);
  // Without the deferred receives the same schedule is valid under both.
  pf_schedule* plain = generate("1f1b", 2, 2);
  ASSERT_NE(plain, nullptr);
  EXPECT_PF_OK(pf_schedule_validate_comm(plain, "rendezvous"));
  EXPECT_PF_OK(pf_schedule_validate_comm(plain, "posted"));
  pf_schedule_destroy(plain);
  pf_schedule_destroy(s);
}

double peak_activation_bytes(const pf_schedule* schedule) {
  int32_t ranks = 0;
  EXPECT_PF_OK(pf_schedule_num_ranks(schedule, &ranks));
  double peak = 0;
  for (int r = 0; r < ranks; ++r) peak = std::max(peak, rank_stats(schedule, nullptr, r).peak_activation_bytes);
  return peak;
}

pf_status* generate_with(const char* name, int stages, int micro_batches, double mem_limit, double t_comm,
                         pf_schedule** out, int chunks = 1) {
  pf_schedule_options options;
  pf_schedule_options_init(&options);
  options.stages = stages;
  options.micro_batches = micro_batches;
  options.chunks = chunks;
  options.mem_limit = mem_limit;
  options.t_comm = t_comm;
  return pf_schedule_generate(name, &options, out);
}

TEST(ScheduleApiCappedV, MemLimitAndCostsReachVHalfAndVMin) {
  // p = 6: v-min's own cap is floor((6+4)/3) = 3 micro-batches, v-half's floor((6+2)/2) = 4; one
  // micro-batch on both chunks of a rank is 2 units of m_b.
  pf_schedule* v_min = nullptr;
  ASSERT_PF_OK(generate_with("v-min", 6, 12, 0, 0, &v_min));
  EXPECT_LE(peak_activation_bytes(v_min), 2 * 3.0);
  pf_schedule* capped = nullptr;
  ASSERT_PF_OK(generate_with("v-min", 6, 12, 1, 0, &capped));
  EXPECT_LE(peak_activation_bytes(capped), 2 * 1.0);
  EXPECT_GT(peak_activation_bytes(v_min), 2 * 1.0);
  EXPECT_GT(summary_of(capped, nullptr, "rendezvous").makespan, summary_of(v_min, nullptr, "rendezvous").makespan);
  pf_schedule* wider = nullptr;
  ASSERT_PF_OK(generate_with("v-half", 6, 12, 5, 0, &wider));
  EXPECT_LE(peak_activation_bytes(wider), 2 * 5.0);
  EXPECT_GT(peak_activation_bytes(wider), 2 * 4.0);  // more than v-half's own cap: mem_limit was used
  pf_schedule_destroy(wider);
  pf_schedule_destroy(capped);
  // The costs steer the list scheduling: a communication latency changes the order.
  pf_schedule* slow_links = nullptr;
  ASSERT_PF_OK(generate_with("v-min", 6, 12, 0, 2.0, &slow_links));
  EXPECT_NE(text_of(slow_links), text_of(v_min));
  EXPECT_LE(peak_activation_bytes(slow_links), 2 * 3.0);
  pf_schedule_destroy(slow_links);
  pf_schedule_destroy(v_min);

  pf_schedule* out = reinterpret_cast<pf_schedule*>(0x1);
  EXPECT_PF_ERROR(generate_with("v-half", 4, 8, 0, 0, &out, 3), PF_INVALID_ARGUMENT, "v-half", "chunks must be 2");
  EXPECT_PF_ERROR(generate_with("v-min", 4, 8, 0.5, 0, &out), PF_INVALID_ARGUMENT, "v-min", "memory cap");
  EXPECT_PF_ERROR(generate_with("v-min", 4, 8, -1, 0, &out), PF_INVALID_ARGUMENT, "mem-limit");
  EXPECT_EQ(out, reinterpret_cast<pf_schedule*>(0x1));
}

TEST(ScheduleApiBadInput, SinceZeroSixFunctionsReportAndLeaveOutParamsAlone) {
  pf_schedule* const sentinel = reinterpret_cast<pf_schedule*>(0x1);
  pf_schedule* out = sentinel;
  EXPECT_PF_ERROR(pf_schedule_parse_pytorch_csv(nullptr, &out), PF_INVALID_ARGUMENT, "'text'");
  EXPECT_PF_ERROR(pf_schedule_parse_pytorch_csv("0F0,0B0", nullptr), PF_INVALID_ARGUMENT, "'out'");
  EXPECT_PF_ERROR(pf_schedule_parse_pytorch_csv("0F0,0QQ0\n", &out), PF_INVALID_ARGUMENT, "line 1", "cell 2", "0QQ0");
  // Parses, but a B before its F is valid under no semantics.
  EXPECT_PF_ERROR(pf_schedule_parse_pytorch_csv("0B0,0F0\n", &out), PF_INVALID_ARGUMENT, "rank 0");
  EXPECT_EQ(out, sentinel);

  pf_schedule* s = generate("1f1b", 2, 2);
  ASSERT_NE(s, nullptr);
  const char* text = "untouched";
  EXPECT_PF_ERROR(pf_schedule_to_pytorch_csv(nullptr, 0, &text), PF_INVALID_ARGUMENT, "'schedule'");
  EXPECT_PF_ERROR(pf_schedule_to_pytorch_csv(s, 1, nullptr), PF_INVALID_ARGUMENT, "'out'");
  pf_schedule* recomputed = nullptr;
  ASSERT_PF_OK(pf_schedule_apply_activation_policy(s, "recompute", nullptr, 0, &recomputed));
  EXPECT_PF_ERROR(pf_schedule_to_pytorch_csv(recomputed, 0, &text), PF_INVALID_ARGUMENT, "RECOMPUTE");
  pf_schedule_destroy(recomputed);
  EXPECT_STREQ(text, "untouched");

  EXPECT_PF_ERROR(pf_schedule_validate_comm(nullptr, "posted"), PF_INVALID_ARGUMENT, "'schedule'");
  EXPECT_PF_ERROR(pf_schedule_validate_comm(s, nullptr), PF_INVALID_ARGUMENT, "'comm'");
  EXPECT_PF_ERROR(pf_schedule_validate_comm(s, "buffered"), PF_INVALID_ARGUMENT, "'buffered'", "rendezvous, posted");

  pf_simulation* const sim_sentinel = reinterpret_cast<pf_simulation*>(0x1);
  pf_simulation* sim = sim_sentinel;
  EXPECT_PF_ERROR(pf_schedule_simulate_comm(nullptr, nullptr, "posted", &sim), PF_INVALID_ARGUMENT, "'schedule'");
  EXPECT_PF_ERROR(pf_schedule_simulate_comm(s, nullptr, nullptr, &sim), PF_INVALID_ARGUMENT, "'comm'");
  EXPECT_PF_ERROR(pf_schedule_simulate_comm(s, nullptr, "eager", &sim), PF_INVALID_ARGUMENT, "'eager'");
  EXPECT_PF_ERROR(pf_schedule_simulate_comm(s, nullptr, "posted", nullptr), PF_INVALID_ARGUMENT, "'out'");
  pf_cost_model costs;
  pf_cost_model_init(&costs);
  costs.struct_size = 8;
  EXPECT_PF_ERROR(pf_schedule_simulate_comm(s, &costs, "posted", &sim), PF_INVALID_ARGUMENT, "struct_size");
  EXPECT_EQ(sim, sim_sentinel);
  // Both semantics time a schedule without deferred receives alike.
  EXPECT_DOUBLE_EQ(summary_of(s, nullptr, "posted").makespan, summary_of(s, nullptr, "rendezvous").makespan);
  pf_schedule_destroy(s);
}

}  // namespace

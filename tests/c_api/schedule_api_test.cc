// The schedule engine through the C API: generate, parse, validate, lower, simulate, render; and
// bad input for every pf_schedule_* / pf_simulation_* function (codes, messages, untouched
// out-params, NULL destroy). Runs under ASan/LSan like the other C API tests.
#include <gtest/gtest.h>

#include <string>

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

}  // namespace

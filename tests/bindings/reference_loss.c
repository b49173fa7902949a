/* The reference run for the binding tests, through the C API only. Each language's test trains the
 * same model on the same data through its binding and must print the same bits.
 *
 * The run: MLP 8 -> 16 -> 16 -> 4 (relu), AdamW lr 0.01, clip_norm 1.0, seed 42, 2 micro-batches,
 * 3 steps of 8 rows. Row r of step s (features f = 0..7):
 *   input  = (float)((int64)(mix(s * 1000003 + r * 101 + f) % 2001) - 1000) / 1024   (exact in f32)
 *   target = (int32)(mix(s * 7919 + r + 1000000007) % 4)
 * with mix = SplitMix64's finaliser (below). A data loader serves micro-batch p as rows
 * [4 (p % 2), 4 (p % 2) + 4) of step p / 2, so both data paths see the same batches.
 *
 * Usage: reference_loss [SCHEDULE STAGES [CHUNKS]]. With a schedule name (e.g. 1f1b, zb-v) the same
 * run is pipelined over STAGES ranks (options.schedule, .stages, .chunks), and one more line
 * follows the checksum: "ranks <num_ranks> bubble_rate_ok <0|1>" (whether the measured bubble rate of
 * the last step is in [0, 1)). The runtime keeps the parameters bitwise equal to the sequential run.
 *
 * Output (the doubles as the hex of their IEEE-754 bits):
 *   step 1 loss 3ff0000000000000 grad_norm 3ff0000000000000
 *   ...
 *   checksum <sha-256 of the parameters>
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_api/pipeforge.h"

enum { kFeatures = 8, kClasses = 4, kRows = 8, kMicroBatches = 2, kSteps = 3 };

static uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static void check(pf_status* status, const char* what) {
  if (status == NULL) return;
  fprintf(stderr, "%s failed: [%s] %s\n", what, pf_code_name(pf_status_code(status)), pf_status_message(status));
  pf_status_destroy(status);
  exit(1);
}

static uint64_t bits(double x) {
  uint64_t b;
  memcpy(&b, &x, sizeof(b));
  return b;
}

int main(int argc, char** argv) {
  const char* schedule = argc > 1 ? argv[1] : NULL;
  if (argc != 1 && argc != 3 && argc != 4) {
    fprintf(stderr, "usage: %s [SCHEDULE STAGES [CHUNKS]]\n", argv[0]);
    return 2;
  }
  const int64_t hidden[2] = {16, 16};
  pf_mlp_config config;
  pf_mlp_config_init(&config);
  config.input_dim = kFeatures;
  config.hidden = hidden;
  config.num_hidden = 2;
  config.classes = kClasses;
  config.activation = "relu";
  pf_model* model = NULL;
  check(pf_model_create_mlp(&config, &model), "pf_model_create_mlp");

  pf_trainer_options options;
  pf_trainer_options_init(&options);
  options.micro_batches = kMicroBatches;
  options.seed = 42;
  options.optimizer = PF_OPTIMIZER_ADAMW;
  options.lr = 0.01f;
  options.clip_norm = 1.0f;
  if (schedule != NULL) {
    options.schedule = schedule;
    options.stages = atoi(argv[2]);
    options.chunks = argc > 3 ? atoi(argv[3]) : 1;
  }
  pf_trainer* trainer = NULL;
  check(pf_trainer_create(model, &options, &trainer), "pf_trainer_create");
  pf_model_destroy(model);

  float inputs[kRows * kFeatures];
  int32_t targets[kRows];
  const int64_t input_shape[2] = {kRows, kFeatures};
  const int64_t target_shape[1] = {kRows};
  pf_tensor_view input_view = {inputs, PF_DTYPE_F32, PF_DEVICE_CPU, 0, 2, input_shape, NULL};
  pf_tensor_view target_view = {targets, PF_DTYPE_I32, PF_DEVICE_CPU, 0, 1, target_shape, NULL};
  for (uint64_t s = 0; s < kSteps; ++s) {
    for (uint64_t r = 0; r < kRows; ++r) {
      for (uint64_t f = 0; f < kFeatures; ++f) {
        inputs[r * kFeatures + f] = (float)((int64_t)(mix(s * 1000003u + r * 101u + f) % 2001u) - 1000) / 1024.0f;
      }
      targets[r] = (int32_t)(mix(s * 7919u + r + 1000000007u) % kClasses);
    }
    pf_step_result result;
    result.struct_size = sizeof(result);
    check(pf_trainer_step(trainer, &input_view, &target_view, &result), "pf_trainer_step");
    printf("step %d loss %016" PRIx64 " grad_norm %016" PRIx64 "\n", (int)s + 1, bits(result.loss),
           bits(result.grad_norm));
  }
  char checksum[65];
  check(pf_trainer_parameter_checksum(trainer, checksum), "pf_trainer_parameter_checksum");
  printf("checksum %s\n", checksum);
  if (schedule != NULL) {
    int32_t ranks = 0;
    double bubble_rate = -1;
    check(pf_trainer_num_ranks(trainer, &ranks), "pf_trainer_num_ranks");
    check(pf_trainer_get_bubble_rate(trainer, &bubble_rate), "pf_trainer_get_bubble_rate");
    printf("ranks %d bubble_rate_ok %d\n", (int)ranks, bubble_rate >= 0.0 && bubble_rate < 1.0);
  }
  pf_trainer_destroy(trainer);
  return 0;
}

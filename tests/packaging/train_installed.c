/* A program as a user writes it against the installed library (`#include <pipeforge.h>`, built with
 * `pkg-config --cflags --libs pipeforge`): trains an MLP with 1F1B on two ranks for 30 steps on a
 * learnable task and prints the version and the first and last loss. Exits 1 unless the loss fell.
 * Then asks for a trainer on cuda:0 and prints what it says ("cuda: ..."): on a machine without a
 * GPU, why not, which shows whether the CUDA backend installed beside the library was found. */
#include <pipeforge.h>
#include <stdio.h>

#define ROWS 16
#define FEATURES 8

static int check(pf_status* status, const char* what) {
  if (status == NULL) return 0;
  fprintf(stderr, "%s: %s\n", what, pf_status_message(status));
  pf_status_destroy(status);
  return 1;
}

int main(void) {
  float inputs[ROWS * FEATURES];
  int32_t targets[ROWS];
  int64_t input_shape[2] = {ROWS, FEATURES}, target_shape[1] = {ROWS};
  pf_tensor_view x = {inputs, PF_DTYPE_F32, PF_DEVICE_CPU, 0, 2, input_shape, NULL};
  pf_tensor_view y = {targets, PF_DTYPE_I32, PF_DEVICE_CPU, 0, 1, target_shape, NULL};
  pf_mlp_config config;
  pf_trainer_options options;
  pf_step_result result = {.struct_size = sizeof(pf_step_result)};  /* later fields: zero */
  pf_model* model = NULL;
  pf_trainer* trainer = NULL;
  double first = 0;
  int r, f, step;
  for (r = 0; r < ROWS; ++r) {
    for (f = 0; f < FEATURES; ++f) inputs[r * FEATURES + f] = (float)((r * 7 + f * 3) % 11) / 11.0f - 0.5f;
    targets[r] = inputs[r * FEATURES] > inputs[r * FEATURES + 1] ? 1 : 0;
  }
  pf_mlp_config_init(&config);
  config.input_dim = FEATURES;
  config.classes = 2;
  if (check(pf_model_create_mlp(&config, &model), "pf_model_create_mlp")) return 1;
  pf_trainer_options_init(&options);
  options.micro_batches = 4;
  options.lr = 1e-2f;
  options.schedule = "1f1b";
  options.stages = 2;
  if (check(pf_trainer_create(model, &options, &trainer), "pf_trainer_create")) return 1;
  for (step = 0; step < 30; ++step) {
    if (check(pf_trainer_step(trainer, &x, &y, &result), "pf_trainer_step")) return 1;
    if (step == 0) first = result.loss;
  }
  printf("pipeforge %s (ABI %u): loss %.4f -> %.4f\n", pf_get_version_string(), pf_get_abi_version(), first,
         result.loss);
  pf_trainer_destroy(trainer);
  trainer = NULL;
  options.schedule = NULL;
  options.stages = 1;
  options.devices = "cuda:0";
  {
    pf_status* status = pf_trainer_create(model, &options, &trainer);
    printf("cuda: %s\n", status ? pf_status_message(status) : "a trainer on cuda:0");
    pf_status_destroy(status);
    pf_trainer_destroy(trainer);
  }
  pf_model_destroy(model);
  return result.loss < first ? 0 : 1;
}

/* Plain C99 (-pedantic -Werror): proves pipeforge.h is C-clean, and trains an MLP through
 * libpipeforge.so from host buffers and from a data-loader callback: the loss falls, identical
 * runs give identical parameters, and both data paths give the same parameters for the same data. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_api/pipeforge.h"

#define FEATURES 8
#define CLASSES 4
#define ROWS_PER_MICRO_BATCH 8
#define MICRO_BATCHES 2
#define STEPS 40

static int failures = 0;

#define EXPECT(cond)                                                      \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "%s:%d: expectation failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                         \
    }                                                                     \
  } while (0)

/* Aborts the test on an error status, printing its code and message. */
#define CHECK_OK(expr)                                                                    \
  do {                                                                                    \
    pf_status* status_ = (expr);                                                          \
    if (status_ != NULL) {                                                                \
      fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #expr,            \
              pf_code_name(pf_status_code(status_)), pf_status_message(status_));         \
      pf_status_destroy(status_);                                                         \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

static uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return (uint32_t)x;
}

/* Fills micro-batch `position`: a learnable task (class = argmax of fixed projections of x). */
static void fill_rows(int64_t position, float* inputs, int32_t* targets) {
  int r, f, c;
  for (r = 0; r < ROWS_PER_MICRO_BATCH; ++r) {
    float best = -1e30f;
    float* x = inputs + r * FEATURES;
    for (f = 0; f < FEATURES; ++f) {
      x[f] = (float)(hash32((uint64_t)(position * 1000 + r) * 64u + (uint64_t)f) % 2001u) / 1000.0f - 1.0f;
    }
    targets[r] = 0;
    for (c = 0; c < CLASSES; ++c) {
      float score = 0.0f;
      for (f = 0; f < FEATURES; ++f) score += x[f] * ((f + c) % 3 == 0 ? 1.0f : -0.5f);
      if (score > best) {
        best = score;
        targets[r] = c;
      }
    }
  }
}

/* ---- a data loader whose state is heap-allocated and freed by destroy ---- */

typedef struct loader_state {
  float inputs[ROWS_PER_MICRO_BATCH * FEATURES];
  int32_t targets[ROWS_PER_MICRO_BATCH];
  int64_t input_shape[2];
  int64_t target_shape[1];
} loader_state;

static int loaders_destroyed = 0;

static pf_status* loader_next(void* user_data, int64_t position, pf_micro_batch* out) {
  loader_state* s = (loader_state*)user_data;
  if (out->struct_size < sizeof(pf_micro_batch)) return pf_status_create(PF_INTERNAL, "old runtime");
  fill_rows(position, s->inputs, s->targets);
  out->inputs.data = s->inputs;
  out->inputs.dtype = PF_DTYPE_F32;
  out->inputs.device_kind = PF_DEVICE_CPU;
  out->inputs.ndim = 2;
  out->inputs.shape = s->input_shape;
  out->targets.data = s->targets;
  out->targets.dtype = PF_DTYPE_I32;
  out->targets.device_kind = PF_DEVICE_CPU;
  out->targets.ndim = 1;
  out->targets.shape = s->target_shape;
  return NULL;
}

static void loader_destroy(void* user_data) {
  free(user_data);
  loaders_destroyed++;
}

/* ---- a log sink ---- */

static int log_sink_destroyed = 0;
static void sink_log(void* user_data, pf_log_level level, const char* message) {
  (void)user_data;
  fprintf(stderr, "[sink %d] %s\n", (int)level, message);
}
static void sink_destroy(void* user_data) {
  (void)user_data;
  log_sink_destroyed++;
}

static pf_trainer* make_trainer(void) {
  pf_mlp_config config;
  pf_trainer_options options;
  pf_model* model = NULL;
  pf_trainer* trainer = NULL;
  const int64_t hidden[2] = {32, 32};
  pf_mlp_config_init(&config);
  config.input_dim = FEATURES;
  config.hidden = hidden;
  config.num_hidden = 2;
  config.classes = CLASSES;
  CHECK_OK(pf_model_create_mlp(&config, &model));
  pf_trainer_options_init(&options);
  options.micro_batches = MICRO_BATCHES;
  options.seed = 1234;
  options.optimizer = PF_OPTIMIZER_ADAMW;
  options.lr = 0.01f;
  /* Since 0.3 (the defaults, spelled out): the ranks are threads, one replica. */
  options.processes = PF_PROCESSES_THREADS;
  options.data_parallel = 1;
  options.gradient_reduction = NULL;
  options.ranks = 0;
  /* Since 0.4 (the defaults, spelled out): no asynchronous-schedule option. */
  options.pipemare_anneal_updates = 100;
  options.pipemare_decay = 0.9f;
  options.spectrain_version = 1;
  options.vertical_sync = 0;
  options.local_head = NULL;
  /* Since 0.7 (the default, spelled out): one sequence slice per micro-batch. */
  options.seq_slices = 1;
  /* Since 0.9 (the defaults, spelled out): no adaptation, no emulated slow rank. */
  options.adapt = 0;
  options.adapt_threshold = 1.5;
  options.adapt_patience = 3;
  options.slow_rank = -1;
  options.slow_factor = 1.0;
  CHECK_OK(pf_trainer_create(model, &options, &trainer));
  pf_model_destroy(model); /* the trainer retains the model */
  {
    int32_t rank = -1, size = -1;
    CHECK_OK(pf_trainer_process(trainer, &rank, &size));
    EXPECT(rank == 0 && size == 1);
  }
  return trainer;
}

/* Trains from host buffers; each batch is the micro-batches (2s, 2s+1). Writes the checksum. */
static void train_from_host(char checksum[65], double* first_loss, double* last_loss) {
  static float inputs[MICRO_BATCHES * ROWS_PER_MICRO_BATCH * FEATURES];
  static int32_t targets[MICRO_BATCHES * ROWS_PER_MICRO_BATCH];
  const int64_t input_shape[2] = {MICRO_BATCHES * ROWS_PER_MICRO_BATCH, FEATURES};
  const int64_t target_shape[1] = {MICRO_BATCHES * ROWS_PER_MICRO_BATCH};
  pf_tensor_view input_view, target_view;
  pf_step_result result;
  pf_trainer* trainer = make_trainer();
  int step, m;

  memset(&input_view, 0, sizeof(input_view));
  memset(&target_view, 0, sizeof(target_view));
  input_view.data = inputs;
  input_view.dtype = PF_DTYPE_F32;
  input_view.device_kind = PF_DEVICE_CPU;
  input_view.ndim = 2;
  input_view.shape = input_shape;
  target_view.data = targets;
  target_view.dtype = PF_DTYPE_I32;
  target_view.device_kind = PF_DEVICE_CPU;
  target_view.ndim = 1;
  target_view.shape = target_shape;

  for (step = 0; step < STEPS; ++step) {
    for (m = 0; m < MICRO_BATCHES; ++m) {
      fill_rows(step * MICRO_BATCHES + m, inputs + m * ROWS_PER_MICRO_BATCH * FEATURES,
                targets + m * ROWS_PER_MICRO_BATCH);
    }
    memset(&result, 0, sizeof(result));
    result.struct_size = sizeof(result);
    CHECK_OK(pf_trainer_step(trainer, &input_view, &target_view, &result));
    EXPECT(result.samples == MICRO_BATCHES * ROWS_PER_MICRO_BATCH);
    if (step == 0) *first_loss = result.loss;
    *last_loss = result.loss;
  }
  CHECK_OK(pf_trainer_drain(trainer)); /* since 0.4; nothing in flight: a no-op */
  CHECK_OK(pf_trainer_parameter_checksum(trainer, checksum));
  pf_trainer_destroy(trainer);
}

/* Trains the same data through a data loader. */
static void train_from_loader(char checksum[65], double* first_loss, double* last_loss) {
  pf_trainer* trainer = make_trainer();
  pf_data_loader loader;
  pf_step_result result;
  pf_metrics metrics;
  loader_state* state = (loader_state*)calloc(1, sizeof(loader_state));
  int step;

  state->input_shape[0] = ROWS_PER_MICRO_BATCH;
  state->input_shape[1] = FEATURES;
  state->target_shape[0] = ROWS_PER_MICRO_BATCH;
  memset(&loader, 0, sizeof(loader));
  loader.struct_size = sizeof(loader);
  loader.user_data = state;
  loader.next = loader_next;
  loader.destroy = loader_destroy;
  CHECK_OK(pf_trainer_set_data_loader(trainer, &loader));

  for (step = 0; step < STEPS; ++step) {
    memset(&result, 0, sizeof(result));
    result.struct_size = sizeof(result);
    CHECK_OK(pf_trainer_step_from_loader(trainer, &result));
    if (step == 0) *first_loss = result.loss;
    *last_loss = result.loss;
  }
  memset(&metrics, 0, sizeof(metrics));
  metrics.struct_size = sizeof(metrics);
  CHECK_OK(pf_trainer_get_metrics(trainer, &metrics));
  EXPECT(metrics.step == STEPS);
  EXPECT(metrics.data_position == STEPS * MICRO_BATCHES);
  EXPECT(metrics.total_tokens == STEPS * MICRO_BATCHES * ROWS_PER_MICRO_BATCH);
  CHECK_OK(pf_trainer_parameter_checksum(trainer, checksum));
  pf_trainer_destroy(trainer); /* destroys the loader */
}

int main(void) {
  char host_a[65], host_b[65], loader_a[65], loader_b[65];
  double first = 0, last = 0, loader_first = 0, loader_last = 0, unused = 0;
  pf_log_sink sink;
  pf_status* status;

  EXPECT(pf_get_abi_version() == PF_ABI_VERSION);
  EXPECT(strcmp(pf_get_version_string(), PF_VERSION_STRING) == 0);

  memset(&sink, 0, sizeof(sink));
  sink.struct_size = sizeof(sink);
  sink.log = sink_log;
  sink.destroy = sink_destroy;
  CHECK_OK(pf_set_log_sink(&sink, PF_LOG_WARNING));

  /* Errors come back as statuses, even in C. */
  status = pf_trainer_step(NULL, NULL, NULL, NULL);
  EXPECT(pf_status_code(status) == PF_INVALID_ARGUMENT);
  EXPECT(strstr(pf_status_message(status), "trainer") != NULL);
  pf_status_destroy(status);

  train_from_host(host_a, &first, &last);
  printf("host:   loss %.4f -> %.4f, checksum %s\n", first, last, host_a);
  EXPECT(last < 0.7 * first);
  train_from_host(host_b, &unused, &unused);
  EXPECT(strcmp(host_a, host_b) == 0);

  train_from_loader(loader_a, &loader_first, &loader_last);
  printf("loader: loss %.4f -> %.4f, checksum %s\n", loader_first, loader_last, loader_a);
  EXPECT(loader_last < 0.7 * loader_first);
  train_from_loader(loader_b, &unused, &unused);
  EXPECT(strcmp(loader_a, loader_b) == 0);
  EXPECT(loaders_destroyed == 2);

  /* Same data, same micro-batch split: the two paths are bitwise equal. */
  EXPECT(strcmp(host_a, loader_a) == 0);
  EXPECT(first == loader_first && last == loader_last);

  CHECK_OK(pf_set_log_sink(NULL, PF_LOG_WARNING));
  EXPECT(log_sink_destroyed == 1);

  if (failures > 0) {
    fprintf(stderr, "%d expectation(s) failed\n", failures);
    return 1;
  }
  printf("PASS\n");
  return 0;
}

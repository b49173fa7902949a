/* Trains a small GPT as a character-level language model on the licence texts every Debian machine
 * has (/usr/share/common-licenses), through the PipeForge C API only. Shows a progress bar and the
 * falling loss.
 *
 *   bazel run //samples:train_char_gpt -- [--steps N] [--text-dir DIR] [--checkpoint FILE]
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "c_api/pipeforge.h"

enum { kRows = 8, kSeqLen = 64, kMicroBatches = 4 };

typedef struct corpus {
  int32_t* tokens; /* the text as token ids */
  size_t length;
  int32_t vocab;
  int32_t inputs[kRows * kSeqLen];
  int32_t targets[kRows * kSeqLen];
  int64_t shape[2];
} corpus;

static int check(pf_status* status, const char* what) {
  if (status == NULL) return 0;
  fprintf(stderr, "\n%s failed: [%s] %s\n", what, pf_code_name(pf_status_code(status)),
          pf_status_message(status));
  pf_status_destroy(status);
  return 1;
}

static int compare_names(const void* a, const void* b) {
  return strcmp(*(char* const*)a, *(char* const*)b);
}

/* Reads every regular file in `dir` (sorted by name) into one buffer. */
static char* read_texts(const char* dir, size_t* length) {
  DIR* d = opendir(dir);
  char* names[512];
  size_t count = 0, total = 0;
  char* text = NULL;
  struct dirent* entry;
  if (d == NULL) {
    fprintf(stderr, "cannot open text folder '%s'\n", dir);
    return NULL;
  }
  while ((entry = readdir(d)) != NULL && count < 512) {
    if (entry->d_name[0] != '.') names[count++] = strdup(entry->d_name);
  }
  closedir(d);
  qsort(names, count, sizeof(char*), compare_names);
  for (size_t i = 0; i < count; ++i) {
    char path[4096];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
    free(names[i]);
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue; /* skip links and folders */
    FILE* f = fopen(path, "rb");
    if (f == NULL) continue;
    text = realloc(text, total + (size_t)st.st_size);
    total += fread(text + total, 1, (size_t)st.st_size, f);
    fclose(f);
  }
  *length = total;
  return text;
}

/* Builds the vocabulary (sorted distinct bytes) and the token ids. */
static int tokenize(const char* text, size_t length, corpus* c) {
  int32_t id_of[256];
  int seen[256] = {0};
  c->vocab = 0;
  for (size_t i = 0; i < length; ++i) seen[(unsigned char)text[i]] = 1;
  for (int b = 0; b < 256; ++b) id_of[b] = seen[b] ? c->vocab++ : -1;
  c->tokens = malloc(length * sizeof(int32_t));
  if (c->tokens == NULL) return 1;
  for (size_t i = 0; i < length; ++i) c->tokens[i] = id_of[(unsigned char)text[i]];
  c->length = length;
  return 0;
}

/* SplitMix64: the window of (position, row) is a pure function of both, so a resumed run sees the
 * same data as one that never stopped. */
static uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static void fill_view(pf_tensor_view* view, int32_t* data, const int64_t* shape) {
  view->data = data;
  view->dtype = PF_DTYPE_I32;
  view->device_kind = PF_DEVICE_CPU;
  view->device_ordinal = 0;
  view->ndim = 2;
  view->shape = shape;
  view->strides = NULL;
}

static pf_status* next_micro_batch(void* user_data, int64_t position, pf_micro_batch* out) {
  corpus* c = user_data;
  for (int r = 0; r < kRows; ++r) {
    size_t start = (size_t)(mix((uint64_t)position * 1000003u + (uint64_t)r) % (c->length - kSeqLen - 1));
    memcpy(c->inputs + r * kSeqLen, c->tokens + start, kSeqLen * sizeof(int32_t));
    memcpy(c->targets + r * kSeqLen, c->tokens + start + 1, kSeqLen * sizeof(int32_t));
  }
  c->shape[0] = kRows;
  c->shape[1] = kSeqLen;
  fill_view(&out->inputs, c->inputs, c->shape);
  fill_view(&out->targets, c->targets, c->shape);
  return NULL;
}

static void draw_progress(int step, int steps, double loss, double tokens_per_s) {
  const int width = 30;
  int filled = step * width / steps;
  fprintf(stderr, "\r[");
  for (int i = 0; i < width; ++i) fputc(i < filled ? '#' : '.', stderr);
  fprintf(stderr, "] step %4d/%d  loss %.4f  %7.0f tok/s\033[K", step, steps, loss, tokens_per_s);
  fflush(stderr);
}

int main(int argc, char** argv) {
  int steps = 300;
  const char* text_dir = "/usr/share/common-licenses";
  const char* checkpoint = NULL;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      steps = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--text-dir") == 0 && i + 1 < argc) {
      text_dir = argv[++i];
    } else if (strcmp(argv[i], "--checkpoint") == 0 && i + 1 < argc) {
      checkpoint = argv[++i];
    } else {
      fprintf(stderr, "usage: %s [--steps N] [--text-dir DIR] [--checkpoint FILE]\n", argv[0]);
      return 2;
    }
  }
  if (steps < 1) {
    fprintf(stderr, "--steps must be >= 1\n");
    return 2;
  }

  size_t length = 0;
  char* text = read_texts(text_dir, &length);
  corpus* c = calloc(1, sizeof(corpus));
  if (text == NULL || length < 2 * kSeqLen || c == NULL || tokenize(text, length, c) != 0) {
    fprintf(stderr, "no usable text in '%s'\n", text_dir);
    return 1;
  }
  free(text);

  pf_gpt_config config;
  pf_gpt_config_init(&config);
  config.vocab = c->vocab;
  config.seq_len = kSeqLen;
  config.d_model = 64;
  config.heads = 4;
  config.layers = 2;
  pf_model* model = NULL;
  if (check(pf_model_create_gpt(&config, &model), "pf_model_create_gpt")) return 1;
  int64_t num_params = 0;
  pf_model_num_parameter_elements(model, &num_params);

  pf_trainer_options options;
  pf_trainer_options_init(&options);
  options.micro_batches = kMicroBatches;
  options.seed = 1;
  options.optimizer = PF_OPTIMIZER_ADAMW;
  options.lr = 3e-3f;
  options.clip_norm = 1.0f;
  pf_trainer* trainer = NULL;
  if (check(pf_trainer_create(model, &options, &trainer), "pf_trainer_create")) return 1;
  pf_model_destroy(model); /* the trainer retains it */

  pf_data_loader loader;
  memset(&loader, 0, sizeof(loader));
  loader.struct_size = sizeof(loader);
  loader.user_data = c;
  loader.next = next_micro_batch;
  if (check(pf_trainer_set_data_loader(trainer, &loader), "pf_trainer_set_data_loader")) return 1;

  printf("PipeForge %s: character GPT (%lld parameters, vocabulary %d) on %s, %zu characters\n",
         pf_get_version_string(), (long long)num_params, c->vocab, text_dir, c->length);
  printf("%d steps of %d micro-batches x %d sequences x %d characters\n", steps, kMicroBatches, kRows,
         kSeqLen);
  const int interactive = isatty(STDERR_FILENO);
  double first_loss = 0.0, loss = 0.0;
  for (int step = 1; step <= steps; ++step) {
    pf_step_result result;
    result.struct_size = sizeof(result);
    if (check(pf_trainer_step_from_loader(trainer, &result), "pf_trainer_step_from_loader")) return 1;
    loss = result.loss;
    if (step == 1) first_loss = loss;
    const double tokens_per_s = result.seconds > 0 ? (double)result.tokens / result.seconds : 0.0;
    if (step == 1 || step % 25 == 0 || step == steps) {
      /* A log line replaces the bar on its line; the bar is drawn again below it. */
      if (interactive) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
      }
      printf("step %4d  loss %.4f  %7.0f tok/s\n", step, loss, tokens_per_s);
      fflush(stdout);
    }
    if (interactive) draw_progress(step, steps, loss, tokens_per_s);
  }
  if (interactive) fputs("\r\033[K", stderr); /* the finished bar goes; the summary follows */
  if (checkpoint != NULL &&
      check(pf_trainer_save_checkpoint(trainer, checkpoint), "pf_trainer_save_checkpoint")) {
    return 1;
  }
  char checksum[65];
  pf_trainer_parameter_checksum(trainer, checksum);
  printf("loss %.4f -> %.4f; parameter checksum %s\n", first_loss, loss, checksum);
  pf_trainer_destroy(trainer); /* also destroys the loader (it has no destroy callback) */
  free(c->tokens);
  free(c);
  return loss < first_loss ? 0 : 1;
}

/* Asks the C API for a trainer on cuda:0 and prints the outcome ("ok" or the status's code and
 * message) on one line: what tests/c_api/cuda_backend_test.sh checks on machines without a GPU. */
#include <stdio.h>

#include "pipeforge.h"

int main(void) {
  pf_mlp_config config;
  pf_trainer_options options;
  pf_model* model = NULL;
  pf_trainer* trainer = NULL;
  pf_status* status;
  pf_mlp_config_init(&config);
  status = pf_model_create_mlp(&config, &model);
  if (status == NULL) {
    pf_trainer_options_init(&options);
    options.devices = "cuda:0";
    status = pf_trainer_create(model, &options, &trainer);
  }
  if (status == NULL) {
    printf("ok\n");
  } else {
    printf("%s: %s\n", pf_code_name(pf_status_code(status)), pf_status_message(status));
  }
  pf_status_destroy(status);
  pf_trainer_destroy(trainer);
  pf_model_destroy(model);
  return 0;
}

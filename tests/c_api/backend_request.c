/* Asks the C API for what needs a backend and prints the outcome ("ok" or the status's code and
 * message) on one line: `backend_request cuda` a trainer on cuda:0, `backend_request mpi` one process
 * per rank (1F1B on 2 ranks, PF_PROCESSES_MPI). tests/c_api/backend_loading_test.sh checks them. */
#include <stdio.h>
#include <string.h>

#include "pipeforge.h"

int main(int argc, char** argv) {
  pf_mlp_config config;
  pf_trainer_options options;
  pf_model* model = NULL;
  pf_trainer* trainer = NULL;
  pf_status* status;
  if (argc != 2 || (strcmp(argv[1], "cuda") != 0 && strcmp(argv[1], "mpi") != 0)) {
    fprintf(stderr, "usage: backend_request cuda|mpi\n");
    return 2;
  }
  pf_mlp_config_init(&config);
  status = pf_model_create_mlp(&config, &model);
  if (status == NULL) {
    pf_trainer_options_init(&options);
    if (strcmp(argv[1], "cuda") == 0) {
      options.devices = "cuda:0";
    } else {
      options.schedule = "1f1b";
      options.stages = 2;
      options.micro_batches = 2;
      options.processes = PF_PROCESSES_MPI;
    }
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

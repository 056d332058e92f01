/* Uses libmlatune_c.so through the installed headers from C: opens a
 * dispatcher on the installed fused MLA space and a database (argv[1]).  With
 * a GPU it prints what the family takes and the choice at one shape; without
 * one, mlatune_open must fail with MLATUNE_ENVIRONMENT and "no GPU: ...".
 * Exit 0 only when the library behaved as its header says. */
#include <stdio.h>
#include <string.h>

#include "cache/mla_c_api.h"
#include "data_dir.h"

static int with_gpu(mlatune_dispatcher* d) {
  const char* kernel = NULL;
  size_t variables = 0, buffers = 0;
  char choice[1024];
  if (mlatune_kernel_name(d, &kernel) != MLATUNE_OK || mlatune_shape_variable_count(d, &variables) != MLATUNE_OK ||
      mlatune_buffer_count(d, &buffers) != MLATUNE_OK ||
      mlatune_choice(d, 2, 64, 4, 16, 24, choice, sizeof choice) != MLATUNE_OK) {
    fprintf(stderr, "consumer_c: %s\n", mlatune_last_error(d));
    return 1;
  }
  printf("consumer_c: %s takes %zu shape variables and %zu buffers; at B=2,T=64,H=4,D=16,R=24: %s\n", kernel,
         variables, buffers, choice);
  return strcmp(kernel, "fused_mla_attention") == 0 && variables == 5 && buffers == 5 ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: consumer_c DATABASE\n");
    return 2;
  }
  const char* space = MLATUNE_DATA_DIR "/search_spaces/fused_mla_attention.yaml";
  if (mlatune_open(argv[1], space, NULL) != MLATUNE_INVALID_ARGUMENT) {
    fprintf(stderr, "consumer_c: mlatune_open accepted a NULL out-pointer\n");
    return 1;
  }
  mlatune_dispatcher* d = NULL;
  int status = mlatune_open(argv[1], space, &d);
  if (status == MLATUNE_OK) {
    int code = with_gpu(d);
    mlatune_close(d);
    return code;
  }
  const char* message = mlatune_last_error(NULL);
  if (status == MLATUNE_ENVIRONMENT && d == NULL && strncmp(message, "no GPU: ", 8) == 0) {
    printf("consumer_c: mlatune_open says %s\n", message);
    return 0;
  }
  fprintf(stderr, "consumer_c: mlatune_open: unexpected status %d: %s\n", status, message);
  return 1;
}

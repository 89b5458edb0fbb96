/* Uses only the C ABI, as an FFI user would: the version, and a problem that is rejected with a
 * status and a one-line message. Runs without a GPU. */
#include <cpgen/cpgen_c.h>

#include <stdio.h>
#include <string.h>

int main(void) {
  cpgen_problem p;
  printf("cpgen_version=%s\n", cpgen_version());
  if (cpgen_problem_init(&p) != CPGEN_OK) return 1;
  p.q_heads = 32;
  p.kv_heads = 8;
  p.head_dim = 128;
  p.seq_len = 131072;
  p.cp_size = 8;
  if (cpgen_problem_validate(&p) != CPGEN_OK) {
    printf("unexpected: %s\n", cpgen_last_error());
    return 1;
  }
  p.kv_heads = 5; /* 32 % 5 != 0 */
  cpgen_status status = cpgen_problem_validate(&p);
  printf("c_invalid=%s: %s\n", cpgen_status_name(status), cpgen_last_error());
  return status == CPGEN_ERR_BAD_INPUT && strstr(cpgen_last_error(), "kv_heads") ? 0 : 1;
}

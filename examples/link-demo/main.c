/* Uses only the C ABI, as an FFI user would: the version, a packed and windowed problem in
 * another layout, and problems that are rejected with a status and a one-line message. Runs
 * without a GPU. */
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
  /* Packed documents of any length (sum = seq_len), a sliding window and a layout. */
  static const int64_t documents[] = {100000, 1, 31071};
  p.documents = documents;
  p.document_count = 3;
  p.window_left = 4096;
  p.layout = CPGEN_LAYOUT_BSHD;
  if (cpgen_problem_validate(&p) != CPGEN_OK) {
    printf("unexpected: %s\n", cpgen_last_error());
    return 1;
  }
  int64_t rows = 0;
  if (cpgen_partition_rows(&p, 7, &rows) != CPGEN_OK) return 1;
  printf("c_packed_rows_rank7=%lld\n", (long long)rows);
  p.layout = 9;
  cpgen_status layout_status = cpgen_problem_validate(&p);
  printf("c_bad_layout=%s: %s\n", cpgen_status_name(layout_status), cpgen_last_error());
  if (layout_status != CPGEN_ERR_BAD_INPUT || !strstr(cpgen_last_error(), "layout 9")) return 1;
  p.layout = CPGEN_LAYOUT_BHSD;
  p.kv_heads = 5; /* 32 % 5 != 0 */
  cpgen_status status = cpgen_problem_validate(&p);
  printf("c_invalid=%s: %s\n", cpgen_status_name(status), cpgen_last_error());
  return status == CPGEN_ERR_BAD_INPUT && strstr(cpgen_last_error(), "kv_heads") ? 0 : 1;
}

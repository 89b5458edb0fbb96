// A C ABI call that fails while no host memory is left: its status and cpgen_last_error must come
// back (the header promises that no C++ exception crosses the boundary), where storing the error's
// message in the failing handler would throw out of the noexcept guard and abort the process.
// A program of its own: it replaces the global operator new, which every test of cpgen_tests
// would otherwise share. tests/runtime/api/c_api_test.cpp runs it.
#include <cstdio>
#include <cstdlib>
#include <new>

#include "cpgen/cpgen_c.h"

namespace {
thread_local bool g_fail_allocations = false;
}  // namespace

void* operator new(std::size_t size) {
  if (g_fail_allocations) throw std::bad_alloc();
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

int main() {
  cpgen_problem problem;
  if (cpgen_problem_init_sized(&problem, sizeof problem) != CPGEN_OK) return 2;
  problem.q_heads = 0;  // a bad field: the call's own message would need memory too
  g_fail_allocations = true;
  const cpgen_status status = cpgen_problem_validate(&problem);
  g_fail_allocations = false;
  std::printf("status %s\nlast error: %s\n", cpgen_status_name(status), cpgen_last_error());
  return status == CPGEN_ERR_INTERNAL ? 0 : 1;
}

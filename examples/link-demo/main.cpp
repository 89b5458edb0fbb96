// Uses the C++ API from an installed cpgen: describe a problem, validate it, print what was
// wrong with a bad one. Runs without a GPU.
#include <cpgen/cpgen_c.h>
#include <cpgen/error.h>
#include <cpgen/problem.h>
#include <cpgen/ring_attention.h>

#include <cstdio>
#include <cstring>

int main() {
  std::printf("cpgen_version=%s\n", cpgen_version());
  cpgen::Problem p;
  p.name = "llama3-8b-128k-cp8";
  p.q_heads = 32;
  p.kv_heads = 8;
  p.head_dim = 128;
  p.seq_len = 131072;
  p.cp_size = 8;
  p.validate();
  std::printf("valid=%s gqa=%lld local_seq=%lld\n", p.name.c_str(),
              static_cast<long long>(p.gqa_group()), static_cast<long long>(p.local_seq_len()));
  p.kv_heads = 5;  // query heads must be a multiple of the key/value heads
  try {
    p.validate();
  } catch (const cpgen::Error& e) {
    std::printf("invalid=%s: %s\n", cpgen::error_kind_name(e.kind()), e.what());
    return e.kind() == cpgen::ErrorKind::kBadInput && std::strstr(e.what(), "kv_heads") ? 0 : 1;
  }
  std::printf("unexpected: 32 query heads over 5 kv heads was accepted\n");
  return 1;
}

#include "runtime/ring/kernel_support.h"

#include "cpgen/error.h"
#include "runtime/ring/partition.h"

namespace cpgen {

namespace {

// Equal shards: seq_len splits evenly, and so does every packed document (each is partitioned on
// its own, runtime/ring/partition.h).
void check_equal_shards(const Problem& p, const std::string& where, const std::string& tail) {
  const int n = static_cast<int>(p.cp_size);
  try {
    check_partitionable(p.scheme, p.seq_len, n);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kBadInput) throw;
    throw_bad_input(where + ": seq_len " + std::to_string(p.seq_len) + " over " + std::to_string(p.cp_size) +
                    " ranks gives unequal shards, which" + tail + " (" + e.what() + ")");
  }
  if (p.documents.size() <= 1) return;
  for (size_t d = 0; d < p.documents.size(); ++d) {
    if (p.documents[d] == 0) continue;  // an empty document adds no token to any rank
    try {
      check_partitionable(p.scheme, p.documents[d], n);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kBadInput) throw;
      throw_bad_input(where + ": documents[" + std::to_string(d) + "] of length " + std::to_string(p.documents[d]) +
                      " over " + std::to_string(p.cp_size) + " ranks gives unequal shards, which" + tail + " (" +
                      e.what() + ")");
    }
  }
}

}  // namespace

void check_kernel_ring_problem(const Problem& p, const std::string& what) {
  const std::string where = p.name.empty() ? std::string("problem") : "problem '" + p.name + "'";
  const std::string tail = " is not supported by the " + what + " yet (the CPU backend runs it)";
  if (!p.layout.empty() && p.layout != "bhsd") throw_bad_input(where + ": layout " + p.layout + tail);
  check_equal_shards(p, where, tail);
}

bool kernel_needs_key_intervals(const Problem& p) {
  return p.documents.size() > 1 || p.window_left >= 0 || p.window_right >= 0;
}

bool kernel_needs_softcap(const Problem& p) { return p.softcap > 0; }

}  // namespace cpgen

#include "runtime/ring/kernel_support.h"

#include "cpgen/error.h"
#include "runtime/ring/partition.h"

namespace cpgen {

void check_kernel_ring_problem(const Problem& p, const std::string& what) {
  const std::string where = p.name.empty() ? std::string("problem") : "problem '" + p.name + "'";
  const std::string tail = " is not supported by the " + what + " yet (the CPU backend runs it)";
  if (p.documents.size() > 1)
    throw_bad_input(where + ": documents (" + std::to_string(p.documents.size()) + " packed)" + tail);
  if (p.window_left >= 0) throw_bad_input(where + ": window_left " + std::to_string(p.window_left) + tail);
  if (p.window_right >= 0) throw_bad_input(where + ": window_right " + std::to_string(p.window_right) + tail);
  if (p.softcap > 0) throw_bad_input(where + ": softcap " + std::to_string(p.softcap) + tail);
  if (!p.layout.empty() && p.layout != "bhsd") throw_bad_input(where + ": layout " + p.layout + tail);
  try {
    check_partitionable(p.scheme, p.seq_len, static_cast<int>(p.cp_size));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kBadInput) throw;
    throw_bad_input(where + ": seq_len " + std::to_string(p.seq_len) + " over " + std::to_string(p.cp_size) +
                    " ranks gives unequal shards, which" + tail + " (" + e.what() + ")");
  }
}

}  // namespace cpgen

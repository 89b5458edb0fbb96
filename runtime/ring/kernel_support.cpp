#include "runtime/ring/kernel_support.h"

#include "cpgen/error.h"

namespace cpgen {

void check_kernel_ring_problem(const Problem& p, const std::string& what) {
  const std::string where = p.name.empty() ? std::string("problem") : "problem '" + p.name + "'";
  const std::string tail = " is not supported by the " + what + " yet (the CPU backend runs it)";
  if (p.documents.size() > 1)
    throw_bad_input(where + ": documents (" + std::to_string(p.documents.size()) + " packed)" + tail);
  if (p.window_left >= 0) throw_bad_input(where + ": window_left " + std::to_string(p.window_left) + tail);
  if (p.window_right >= 0) throw_bad_input(where + ": window_right " + std::to_string(p.window_right) + tail);
  if (p.softcap > 0) throw_bad_input(where + ": softcap " + std::to_string(p.softcap) + tail);
  // Every layout runs through strides and any seq_len over any cp_size (ranks may hold different
  // row counts): runtime/backend/kernel_ring_backend.h.
}

}  // namespace cpgen

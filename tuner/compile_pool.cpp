#include "tuner/compile_pool.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "cpgen/error.h"
#include "tuner/progress.h"

namespace cpgen {
namespace {

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

CompileOutcome compile_one(const KernelSpec& spec, std::string_view arch, const CompileFn& compile) {
  CompileOutcome out;
  out.spec = spec;
  try {
    CompiledKernel k = compile(spec, arch);
    if (k.stats.spill_bytes > 0) {
      out.disposition = Disposition::kInfeasible;
      out.detail = "ptxas reports " + std::to_string(k.stats.spill_bytes) + " spill bytes per thread at " +
                   std::to_string(k.stats.registers) + " registers";
      return out;
    }
    out.kernel = std::move(k);
  } catch (const Error& e) {
    out.disposition = e.kind() == ErrorKind::kInfeasible ? Disposition::kInfeasible : Disposition::kCompileFailed;
    out.detail = first_line(e.what());
  } catch (const std::exception& e) {
    out.disposition = Disposition::kCompileFailed;
    out.detail = first_line(e.what());
  }
  return out;
}

}  // namespace

std::vector<CompileOutcome> compile_candidates(const std::vector<KernelSpec>& specs, std::string_view arch,
                                               const CompileFn& compile, int jobs, bool quiet,
                                               const std::string& label) {
  std::vector<CompileOutcome> outcomes(specs.size());
  if (specs.empty()) return outcomes;
  const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int workers = std::clamp(jobs > 0 ? jobs : hw, 1, static_cast<int>(specs.size()));
  Progress progress(label, specs.size(), quiet);
  std::atomic<size_t> next{0};
  std::atomic<int> failed{0};
  auto work = [&] {
    for (size_t i = next++; i < specs.size(); i = next++) {
      outcomes[i] = compile_one(specs[i], arch, compile);
      if (!outcomes[i].kernel) ++failed;
      progress.advance(failed ? std::to_string(failed.load()) + " pruned or failed" : "");
    }
  };
  std::vector<std::thread> pool;
  for (int w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  progress.finish();
  return outcomes;
}

}  // namespace cpgen

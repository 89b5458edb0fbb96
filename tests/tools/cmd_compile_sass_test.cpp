// `cpgen compile --emit-cubin` on the sm_90a wgmma family, read back with `cuobjdump -sass`: the
// cubin a user gets holds HGMMA (warpgroup MMA) and UTMALDG (TMA tile loads), i.e. NVRTC kept the
// Hopper instructions the template asks for. Two defaults (both dtypes, head dims 64 and 128,
// causal and full, GQA 1 and 4). cuobjdump and nvdisasm come from PATH, the CUDA install, or the
// build folder's cuda-tools (tools/setup.sh fetches them from PyPI when the install lacks them);
// without them the test skips naming the packages. Needs no GPU.
#include <gtest/gtest.h>

#include <string>

#include "generator/kernel_spec.h"
#include "generator/kernel_spec_wgmma.h"
#include "temp_dir.h"
#include "test_util.h"

namespace cpgen {
namespace {

// The sm_90a SASS of `spec` as a user gets it: compile --emit-cubin, then cuobjdump -sass. Sets
// *skip when the disassembler is missing.
std::string sm90a_sass(const testing::TempDir& dir, const KernelSpec& spec, std::string* skip) {
  const std::string cubin = dir.path() + "/" + spec.uri() + ".cubin";
  const testing::CliResult r = testing::run_cli("compile --spec " + spec.uri() + " --arch sm_90a --emit-cubin " + cubin);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  return r.exit_code == 0 ? testing::disassemble_cubin(cubin, skip) : "";
}

TEST(CmdCompileSass, WgmmaCubinsHoldHgmmaAndUtmaldg) {
  testing::TempDir dir("wgmma_sass");
  for (const KernelSpec& spec :
       {wgmma_default_for(Dtype::kBf16, 128, true, 1), wgmma_default_for(Dtype::kFp16, 64, false, 4)}) {
    SCOPED_TRACE(spec.uri());
    std::string skip;
    const std::string text = sm90a_sass(dir, spec, &skip);
    if (!skip.empty()) GTEST_SKIP() << skip;
    EXPECT_NE(text.find(spec.uri()), std::string::npos) << "the cubin's function is the URI";
    for (const char* instruction : {"HGMMA", "UTMALDG"})
      EXPECT_NE(text.find(instruction), std::string::npos) << instruction << " missing from the SASS of " << spec.uri();
  }
}

// The softmax's exponentials are ex2.approx.ftz (templates/platform.cuh exp2_approx): a bare
// MUFU.EX2 each. exp2f would compile to ex2.approx without ftz, and ptxas would wrap each MUFU.EX2
// in a compare against -126 and two predicated multiplies (76 of each in the forward default
// before). Checked on the three families' head dim 128 defaults.
TEST(CmdCompileSass, SoftmaxExponentialsAreBareMufuEx2) {
  testing::TempDir dir("ex2_sass");
  for (const KernelSpec& spec :
       {KernelSpec::default_for(Dtype::kBf16, 128, true, 1), KernelSpec::backward_default_for(Dtype::kBf16, 128, true, 4),
        wgmma_default_for(Dtype::kBf16, 128, true, 1)}) {
    SCOPED_TRACE(spec.uri());
    std::string skip;
    const std::string text = sm90a_sass(dir, spec, &skip);
    if (!skip.empty()) GTEST_SKIP() << skip;
    EXPECT_NE(text.find("MUFU.EX2"), std::string::npos);
    EXPECT_EQ(text.find(", -126, PT"), std::string::npos) << "an exponential kept the subnormal fix-up";
  }
}

}  // namespace
}  // namespace cpgen

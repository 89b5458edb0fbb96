// `cpgen compile --emit-cubin` on the sm_90a wgmma family, read back with `cuobjdump -sass`: the
// cubin a user gets holds HGMMA (warpgroup MMA) and UTMALDG (TMA tile loads), i.e. NVRTC kept the
// Hopper instructions the template asks for. Two defaults (both dtypes, head dims 64 and 128,
// causal and full, GQA 1 and 4). cuobjdump and nvdisasm come from PATH, the CUDA install, or the
// build folder's cuda-tools (tools/setup.sh fetches them from PyPI when the install lacks them);
// without them the test skips naming the packages. Needs no GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "generator/kernel_spec_wgmma.h"
#include "temp_dir.h"
#include "test_util.h"

namespace cpgen {
namespace {

namespace fs = std::filesystem;

// `name` on PATH, in the CUDA install, or anywhere under the build folder's cuda-tools.
std::string find_tool(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && fs::exists(dir + "/" + name)) return dir + "/" + name;
  for (const char* dir : {"/usr/local/cuda/bin", "/usr/local/cuda-13.0/bin", "/usr/local/cuda-12/bin"})
    if (fs::exists(std::string(dir) + "/" + name)) return std::string(dir) + "/" + name;
  std::error_code ec;
  const fs::path fetched = fs::path(CPGEN_BINARY_DIR) / "cuda-tools";
  for (auto it = fs::recursive_directory_iterator(fetched, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file() && it->path().filename() == name) return it->path().string();
  return "";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(CmdCompileSass, WgmmaCubinsHoldHgmmaAndUtmaldg) {
  const std::string cuobjdump = find_tool("cuobjdump"), nvdisasm = find_tool("nvdisasm");
  if (cuobjdump.empty() || nvdisasm.empty())
    GTEST_SKIP() << "no cuobjdump/nvdisasm on PATH, in the CUDA install or in " << CPGEN_BINARY_DIR
                 << "/cuda-tools: pip install --target " << CPGEN_BINARY_DIR
                 << "/cuda-tools nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm (tools/setup.sh does)";
  testing::TempDir dir("wgmma_sass");
  for (const KernelSpec& spec :
       {wgmma_default_for(Dtype::kBf16, 128, true, 1), wgmma_default_for(Dtype::kFp16, 64, false, 4)}) {
    SCOPED_TRACE(spec.uri());
    const std::string cubin = dir.path() + "/" + spec.uri() + ".cubin", sass = cubin + ".sass";
    const testing::CliResult r =
        testing::run_cli("compile --spec " + spec.uri() + " --arch sm_90a --emit-cubin " + cubin);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    // cuobjdump hands sm_90a code to nvdisasm, found through NVDISASM_PATH.
    const std::string command = "NVDISASM_PATH='" + fs::path(nvdisasm).parent_path().string() + "' '" + cuobjdump +
                                "' -sass '" + cubin + "' > '" + sass + "' 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << read_file(sass);
    const std::string text = read_file(sass);
    EXPECT_NE(text.find(spec.uri()), std::string::npos) << "the cubin's function is the URI";
    for (const char* instruction : {"HGMMA", "UTMALDG"})
      EXPECT_NE(text.find(instruction), std::string::npos) << instruction << " missing from the SASS of " << spec.uri();
  }
}

}  // namespace
}  // namespace cpgen

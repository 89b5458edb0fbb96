// `cpgen compile --emit-cubin` on the sm_90a wgmma family, read back with `cuobjdump -sass`: the
// cubin a user gets holds HGMMA (warpgroup MMA) and UTMALDG (TMA tile loads), i.e. NVRTC kept the
// Hopper instructions the template asks for. Two defaults (both dtypes, head dims 64 and 128,
// causal and full, GQA 1 and 4). cuobjdump and nvdisasm come from PATH, the CUDA install, or the
// build folder's cuda-tools (tools/setup.sh fetches them from PyPI when the install lacks them);
// without them the test skips naming the packages. Needs no GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cpgen/traits.cuh"
#include "generator/kernel_spec.h"
#include "generator/kernel_spec_wgmma.h"
#include "temp_dir.h"
#include "test_util.h"

namespace cpgen {
namespace {

// The SASS of `spec` for `arch` as a user gets it: compile --emit-cubin, then cuobjdump -sass.
// Sets *skip when the disassembler is missing.
std::string arch_sass(const testing::TempDir& dir, const KernelSpec& spec, const std::string& arch, std::string* skip) {
  const std::string cubin = dir.path() + "/" + spec.uri() + "." + arch + ".cubin";
  const testing::CliResult r = testing::run_cli("compile --spec " + spec.uri() + " --arch " + arch + " --emit-cubin " + cubin);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  return r.exit_code == 0 ? testing::disassemble_cubin(cubin, skip) : "";
}

std::string sm90a_sass(const testing::TempDir& dir, const KernelSpec& spec, std::string* skip) {
  return arch_sass(dir, spec, "sm_90a", skip);
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

// One SASS instruction: its address and text (predicate included, no trailing ';').
struct SassLine {
  long address;
  std::string text;
};

std::vector<SassLine> sass_lines(const std::string& sass) {
  static const std::regex line(R"(^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;)");
  std::vector<SassLine> out;
  std::istringstream in(sass);
  std::smatch m;
  for (std::string l; std::getline(in, l);)
    if (std::regex_search(l, m, line)) out.push_back({std::stol(m[1].str(), nullptr, 16), m[2].str()});
  return out;
}

// The instructions of the outermost loop that runs MMAs: the backward branch with the longest
// body holding an HMMA (the forward kernel's key-tile loop).
std::vector<SassLine> tile_loop(const std::vector<SassLine>& all) {
  static const std::regex branch(R"(BRA (0x[0-9a-f]+))");
  std::vector<SassLine> best;
  std::smatch m;
  for (const SassLine& l : all) {
    if (!std::regex_search(l.text, m, branch)) continue;
    const long target = std::stol(m[1].str(), nullptr, 16);
    if (target >= l.address) continue;
    std::vector<SassLine> body;
    bool mma = false;
    for (const SassLine& b : all)
      if (b.address >= target && b.address <= l.address) {
        body.push_back(b);
        mma = mma || b.text.find("HMMA") != std::string::npos;
      }
    if (mma && body.size() > best.size()) best = body;
  }
  return best;
}

// The forward's K/V copy of a whole tile (every tile but a chunk's last) is one base address per
// thread stepped by a fixed number of rows: its cp.async run unpredicated (no row bound), and the
// tile loop does no integer division on the launchers' grid (the (batch, kv head) pair's division
// was redone per tile, with 64-bit stride products per row: about 370 of the loop's instructions
// per tile at head dim 128 before, about 125 after, NVRTC 13.0; the division is still there for a
// folded grid, behind a branch, as an unsigned I2F.U32.RP). Head dims 64, 128 and 256 (one chunk
// column per thread: 16, 8 and 4 rows per pass); head dim 96 keeps the general copy.
TEST(CmdCompileSass, ForwardTileLoopCopiesWholeTilesWithoutPerRowWork) {
  testing::TempDir dir("copy_sass");
  for (int hd : {64, 128, 256}) {
    const KernelSpec spec = KernelSpec::default_for(Dtype::kBf16, hd, true, 1);
    SCOPED_TRACE(spec.uri());
    std::string skip;
    const std::string text = sm90a_sass(dir, spec, &skip);
    if (!skip.empty()) GTEST_SKIP() << skip;
    const std::vector<SassLine> loop = tile_loop(sass_lines(text));
    ASSERT_FALSE(loop.empty()) << "no loop with HMMA in the SASS";
    int unpredicated_copies = 0;
    for (const SassLine& l : loop) {
      // The signed division of the old pair decode; the fold's unsigned one (I2F.U32.RP) is skipped.
      EXPECT_EQ(l.text.find("I2F.RP"), std::string::npos) << "a signed division in the tile loop: " << l.text;
      if (l.text.find("LDGSTS") != std::string::npos && l.text.back() == ']') ++unpredicated_copies;
    }
    const device::FwdLayout layout =
        device::fwd_layout(2, hd, spec.block_m, spec.block_n, spec.warps, spec.stages, spec.softcap);
    EXPECT_EQ(unpredicated_copies, 2 * layout.kv_loads_per_thread) << "K and V of a whole tile, no row bound";
  }
}

// The backward adds dQ by column pairs from sm_90: one red.global.add.v2.f32 (REDG.E.ADD.F32x2)
// per n8 tile and row half of a dQ item, where sm_80 has two scalar reductions; each lane's pairs
// of an item share one address and step by immediate offsets. And the mask is a pass of its own
// behind the tiles that need it: the exponentials of P run with no select among them (before,
// each element's mask test sat between them and ran on every tile). Head dim 128 defaults, causal
// and full.
TEST(CmdCompileSass, BackwardAddsDqByColumnPairsAndMasksInAPassOfItsOwn) {
  testing::TempDir dir("bwd_sass");
  for (bool causal : {true, false}) {
    const KernelSpec spec = KernelSpec::backward_default_for(Dtype::kBf16, 128, causal, 4);
    SCOPED_TRACE(spec.uri());
    std::string skip;
    const std::vector<SassLine> sm90 = sass_lines(arch_sass(dir, spec, "sm_90a", &skip));
    if (!skip.empty()) GTEST_SKIP() << skip;
    const std::vector<SassLine> sm80 = sass_lines(arch_sass(dir, spec, "sm_80", &skip));
    auto count = [](const std::vector<SassLine>& lines, const std::regex& what) {
      int n = 0;
      for (const SassLine& l : lines) n += std::regex_search(l.text, what) ? 1 : 0;
      return n;
    };
    const std::regex pair(R"(REDG\.E\.ADD\.F32x2\b)"), scalar(R"(REDG?\.E\.ADD\.F32\.)");
    constexpr int kPerItem = 2 * (32 / 8);  // row halves x n8 tiles of a 16 x 32 item
    EXPECT_EQ(count(sm90, pair), kPerItem);
    EXPECT_EQ(count(sm90, scalar), 0);
    EXPECT_EQ(count(sm80, pair), 0);
    EXPECT_EQ(count(sm80, scalar), 2 * kPerItem);
    // Immediate offsets: the later tiles of an item reuse the first one's address register.
    EXPECT_EQ(count(sm90, std::regex(R"(REDG\.E\.ADD\.F32x2.*\.64\+0x20\])")), 2);

    const std::vector<SassLine> loop = tile_loop(sm90);
    ASSERT_FALSE(loop.empty()) << "no loop with HMMA in the SASS";
    size_t first = loop.size(), last = 0;
    for (size_t i = 0; i < loop.size(); ++i)
      if (loop[i].text.find("MUFU.EX2") != std::string::npos) {
        first = std::min(first, i);
        last = i;
      }
    ASSERT_LT(first, last) << "no exponentials in the tile loop";
    for (size_t i = first; i <= last; ++i)
      EXPECT_EQ(loop[i].text.find("FSEL"), std::string::npos) << "a select among the exponentials: " << loop[i].text;
  }
}

// The backward's per-row table (lse, delta, positions) is loaded from global memory one query
// tile ahead: no global load of the tile loop, up to the barrier that publishes the table, has its
// result read before that barrier (before, the table's loads were read by its stores right there,
// and every query tile waited out a global round trip at the barrier). Head dim 128 defaults,
// causal and full, sm_90a.
TEST(CmdCompileSass, BackwardRowTableLoadsAreNotWaitedOnInTheirTile) {
  testing::TempDir dir("bwd_rows_sass");
  static const std::regex load(R"(^(@!?P\d+ )?LDG\.E(\.64|\.128)? (R\d+),)"), reg(R"(\bR(\d+)\b)");
  for (bool causal : {true, false}) {
    const KernelSpec spec = KernelSpec::backward_default_for(Dtype::kBf16, 128, causal, 4);
    SCOPED_TRACE(spec.uri());
    std::string skip;
    const std::vector<SassLine> loop = tile_loop(sass_lines(sm90a_sass(dir, spec, &skip)));
    if (!skip.empty()) GTEST_SKIP() << skip;
    ASSERT_FALSE(loop.empty()) << "no loop with HMMA in the SASS";
    // Registers written by global loads so far, up to the loop's second barrier.
    std::vector<int> loaded;
    int barriers = 0, loads = 0;
    std::smatch m;
    for (const SassLine& l : loop) {
      if (l.text.find("BAR.SYNC") != std::string::npos && ++barriers == 2) break;
      const bool is_load = std::regex_search(l.text, m, load);
      // Every register the instruction reads: all but a load's or an ALU result's first operand;
      // a store reads its first operand too.
      const size_t space = l.text.find(' ', l.text[0] == '@' ? l.text.find(' ') + 1 : 0);
      const std::string operands = space == std::string::npos ? "" : l.text.substr(space + 1);
      const bool store = l.text.find("STS") != std::string::npos || l.text.find("STG") != std::string::npos ||
                         l.text.find("RED") != std::string::npos;
      const size_t comma = operands.find(',');
      const std::string read = store || comma == std::string::npos ? operands : operands.substr(comma + 1);
      for (std::sregex_iterator it(read.begin(), read.end(), reg), end; it != end; ++it) {
        const int r = std::stoi((*it)[1].str());
        EXPECT_EQ(std::count(loaded.begin(), loaded.end(), r), 0)
            << "a global load's result read before the table's barrier: " << l.text;
      }
      if (is_load) {
        ++loads;
        const int first = std::stoi(m[3].str().substr(1));
        const int words = m[2].str() == ".64" ? 2 : m[2].str() == ".128" ? 4 : 1;
        for (int w = 0; w < words; ++w) loaded.push_back(first + w);
      }
    }
    EXPECT_EQ(barriers, 2) << "the tile loop's second barrier publishes the row table";
    EXPECT_GE(loads, 2) << "lse and delta of the next tile load before the barrier";
  }
}

}  // namespace
}  // namespace cpgen

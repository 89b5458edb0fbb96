// cmake/FindNCCL.cmake on made-up folder trees, in CMake's script mode: the library comes from the
// first folder, in the documented order, that holds either of its names, and nccl.h from beside
// that library, never from another installation.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "temp_dir.h"
#include "test_util.h"

namespace cpgen {
namespace {

namespace fs = std::filesystem;

class FindNccl : public ::testing::Test {
 protected:
  void touch(const std::string& relative) {
    const fs::path p = fs::path(dir_.path()) / relative;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << "";
  }
  std::string at(const std::string& relative) const { return dir_.path() + "/" + relative; }

  // The STATUS line FindNCCL prints. `nccl_home` and `wheel` may be empty. The search sees the
  // toolkit folder tk/, the hints, and sys/ as the system's prefix; nothing of this machine.
  std::string find(const std::string& nccl_home, const std::string& wheel) {
    std::ofstream(at("driver.cmake"))
        << "set(CUDAToolkit_LIBRARY_DIR " << at("tk/lib") << ")\n"
        << "set(CMAKE_SYSTEM_PREFIX_PATH " << at("sys") << ")\n"
        << "set(CMAKE_LIBRARY_ARCHITECTURE x86_64-linux-gnu)\n"
        << "set(CMAKE_FIND_LIBRARY_PREFIXES lib)\n"
        << "set(CMAKE_FIND_LIBRARY_SUFFIXES .so)\n"
        << "set(CPGEN_NCCL_WHEEL_DIR \"" << wheel << "\")\n"
        << "include(" << CPGEN_SOURCE_DIR << "/cmake/FindNCCL.cmake)\n";
    // The CMake that configured this build, by its path: the search runs with an empty
    // environment, and on the GPU machines cmake lives outside /usr/bin.
    const testing::ShellResult r = testing::run_shell(
        "env -i PATH=/usr/bin:/bin " + (nccl_home.empty() ? "" : "NCCL_HOME='" + nccl_home + "' ") + "'" +
            CPGEN_CMAKE_COMMAND + "' -P '" + at("driver.cmake") + "'",
        at("log.txt"));
    EXPECT_EQ(r.code, 0) << r.output;
    return r.output;
  }

  testing::TempDir dir_{"find_nccl"};
};

// The GPU image: no NCCL in the toolkit, the PyTorch wheel's (libnccl.so.2 only), and the system's
// (libnccl.so). The wheel comes first in the order, so both files are the wheel's; searching name
// by name took the system's libnccl.so, with the wheel's nccl.h.
TEST_F(FindNccl, TheWheelsLibraryAndHeaderGoTogetherBeforeTheSystems) {
  touch("wheel/lib/libnccl.so.2");
  touch("wheel/include/nccl.h");
  touch("sys/lib/x86_64-linux-gnu/libnccl.so");
  touch("sys/include/nccl.h");
  const std::string out = find("", at("wheel"));
  EXPECT_NE(out.find("NCCL: " + at("wheel/lib/libnccl.so.2") + " with " + at("wheel/include") + "/nccl.h"),
            std::string::npos)
      << out;
  // Without the wheel the system's pair, its header two folders up from a multiarch library.
  const std::string system = find("", "");
  EXPECT_NE(system.find("NCCL: " + at("sys/lib/x86_64-linux-gnu/libnccl.so") + " with " + at("sys/include") + "/nccl.h"),
            std::string::npos)
      << system;
}

// The toolkit, then $NCCL_HOME, then the wheel: the first that holds the library gives both files.
TEST_F(FindNccl, TheToolkitThenNcclHomeThenTheWheel) {
  touch("home/lib64/libnccl.so");
  touch("home/include/nccl.h");
  touch("wheel/lib/libnccl.so.2");
  touch("wheel/include/nccl.h");
  std::string out = find(at("home"), at("wheel"));
  EXPECT_NE(out.find("NCCL: " + at("home/lib64/libnccl.so") + " with " + at("home/include") + "/nccl.h"), std::string::npos)
      << out;
  touch("tk/lib/libnccl.so.2");
  touch("tk/include/nccl.h");
  out = find(at("home"), at("wheel"));
  EXPECT_NE(out.find("NCCL: " + at("tk/lib/libnccl.so.2") + " with " + at("tk/include") + "/nccl.h"), std::string::npos)
      << out;
}

// A library whose installation has no nccl.h leaves the transport out and says why, rather than
// pairing it with another installation's header.
TEST_F(FindNccl, ALibraryWithoutItsHeaderIsNotPairedWithAnothers) {
  touch("tk/lib/libnccl.so");
  touch("sys/lib/x86_64-linux-gnu/libnccl.so");
  touch("sys/include/nccl.h");
  const std::string out = find("", "");
  EXPECT_NE(out.find("NCCL: " + at("tk/lib/libnccl.so") + " has no nccl.h beside it"), std::string::npos) << out;
  EXPECT_EQ(out.find("sys/include"), std::string::npos) << out;
}

}  // namespace
}  // namespace cpgen

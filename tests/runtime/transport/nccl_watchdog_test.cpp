// The NCCL transport's watchdog (runtime/transport/nccl_transport.h) without a GPU: the probe
// (tests/nccl_probe/watchdog_probe.cpp) runs the real transport and ring loop on a stand-in CUDA
// driver and NCCL (tests/nccl_probe/standin_cuda.cpp) in situations that once ended in a false
// stall and an aborted communicator (the host a call or more ahead of the GPU, a global-mode
// capture started while an uncaptured call still runs, a send that fails), in a true stall, in a
// ring call that fails midway (which must abort at once), and checks the event query that
// RingAttention makes while its caller captures.
#include <gtest/gtest.h>

#include <string>

#include "tests/temp_dir.h"
#include "tests/test_util.h"

namespace cpgen {
namespace {

#ifdef CPGEN_WATCHDOG_PROBE_PATH

// The probe in `mode`, stopped after 60 s (a watchdog that never fires leaves it blocked: exit 124).
testing::ShellResult probe(const std::string& mode, const std::string& log, const std::string& env = "") {
  return testing::run_shell(std::string("env ") + env + " LD_LIBRARY_PATH='" + CPGEN_STANDIN_CUDA_DIR +
                                "' CPGEN_NCCL_LIBRARY='" CPGEN_STANDIN_CUDA_DIR
                                "/libcuda.so.1' timeout 60 '" CPGEN_WATCHDOG_PROBE_PATH "' " +
                                mode,
                            log);
}

class WatchdogStandIn : public ::testing::Test {
 protected:
  testing::TempDir dir_{"watchdog"};
};

TEST_F(WatchdogStandIn, AHostAheadOfTheGpuIsNoStall) {
  const testing::ShellResult r = probe("runahead", dir_.path() + "/log.txt");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("no stall"), std::string::npos) << r.output;
}

TEST_F(WatchdogStandIn, ACaptureWhileAnUncapturedCallRunsIsNoFailure) {
  const testing::ShellResult r = probe("capture", dir_.path() + "/log.txt");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("capture: no error"), std::string::npos) << r.output;
}

TEST_F(WatchdogStandIn, AFailedSendLeavesNoWatchBehind) {
  const testing::ShellResult r = probe("sendfail", dir_.path() + "/log.txt");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("synchronize returned at once"), std::string::npos) << r.output;
}

// A ring call that throws once its exchanges began aborts the communicator at once (the peers
// wait for this rank's exchanges; a later call would pair with theirs of this one); one that throws
// before any exchange leaves the ring usable.
TEST_F(WatchdogStandIn, ACallFailingMidRingAbortsAtOnceAndOneFailingBeforeItDoesNot) {
  const testing::ShellResult r = probe("callfail", dir_.path() + "/log.txt");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("callfail: aborted at once, NCCL ring on rank 0: a forward failed after its exchanges began"),
            std::string::npos)
      << r.output;
}

// A call that fails while capturing leaves the ring usable: the refused first capture sent
// nothing, and a captured call's exchanges only entered the graph, which the failure discards.
TEST_F(WatchdogStandIn, ACallFailingWhileCapturingLeavesTheRingUsable) {
  const testing::ShellResult r = probe("capfail", dir_.path() + "/log.txt");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("capfail: both failures left the ring usable (stand-in launch failure)"), std::string::npos)
      << r.output;
}

// Making a communicator on device 0 (nccl_comm_init, and the C ABI's unique-id bootstrap) leaves
// the caller's current context (device 1's) current: a PyTorch rank on another device would
// otherwise allocate its next tensors on device 0.
TEST_F(WatchdogStandIn, ACommunicatorOnAnotherDeviceLeavesTheCallersContextCurrent) {
  const testing::ShellResult r = probe("commctx", dir_.path() + "/log.txt", "FAKE_DEVICES=2");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("commctx: the caller's context is current again"), std::string::npos) << r.output;
}

// cpgen_device_arch names the stand-in's compute capability 9.0 "sm_90a"; a driver that sees no
// device is CPGEN_ERR_NO_DEVICE (8), not bad input.
TEST_F(WatchdogStandIn, DeviceArchOfTheStandInAndOfNoDevice) {
  const testing::ShellResult one = probe("devarch", dir_.path() + "/one.txt");
  EXPECT_EQ(one.code, 0) << one.output;
  EXPECT_NE(one.output.find("devarch: 0 sm_90a"), std::string::npos) << one.output;
  const testing::ShellResult none = probe("devarch", dir_.path() + "/none.txt", "FAKE_DEVICES=0");
  EXPECT_EQ(none.code, 0) << none.output;
  EXPECT_NE(none.output.find("devarch: 8  "), std::string::npos) << none.output;
  EXPECT_NE(none.output.find("no device"), std::string::npos) << none.output;
}

// RingAttention asks whether the previous call finished while the caller captures: the query runs
// in the relaxed mode, so it neither fails nor invalidates the caller's global-mode capture.
TEST_F(WatchdogStandIn, AQueryOutsideTheCaptureLeavesAGlobalCaptureValid) {
  const testing::ShellResult r = probe("query", dir_.path() + "/log.txt");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("query: answered not ready, the capture survived"), std::string::npos) << r.output;
}

// A stalled transfer while the host fills its launch queue: the watchdog aborts the ring within a
// few seconds, naming the stalled exchange's step (the host's record blocked on the full queue
// while holding the lock the watchdog needs, so it never fired; and a later exchange was named).
TEST_F(WatchdogStandIn, AStallIsAbortedAndNamedWhileTheHostWaitsOnAFullQueue) {
  const testing::ShellResult r = probe("stall", dir_.path() + "/log.txt", "FAKE_QMAX=5 FAKE_NCCL_SIZE=4");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("stall: aborted, NCCL ring stalled on rank 0 at K/V exchange of ring step 0:"),
            std::string::npos)
      << r.output;
}

#endif

}  // namespace
}  // namespace cpgen

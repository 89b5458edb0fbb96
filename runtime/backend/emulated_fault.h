// Turns a segmentation fault inside an emulated launch into a failed launch. The emulated device
// allocates every buffer between inaccessible guard pages (emulated_device.h), so a kernel's plain
// load or store past the end (or before the start) of one faults; while an EmulatedFaultTrap
// lives on a host thread, a SIGSEGV on that thread is handed to the emulator's recovery
// (emulation/emulated_launch.h, CpgenEmulatedFault), which jumps back into its launch and reports
// the thread, block and address.
//
// The handler is process-wide: the first live trap installs it (running on a per-thread
// alternate signal stack) and the last one restores the handler that was there before. A fault
// on a thread with no trap, or one its emulator does not claim (no launch running there), gets the
// previous handler's behaviour: that handler is called, or the default action (the process dies)
// is restored for the faulting instruction to run again. Ranks on several threads may each hold a
// trap at once.
#pragma once

#include <signal.h>

#include <memory>

#include "emulation/emulated_launch.h"

namespace cpgen {

class EmulatedFaultTrap {
 public:
  explicit EmulatedFaultTrap(CpgenEmulatedFault recover);
  ~EmulatedFaultTrap();
  EmulatedFaultTrap(const EmulatedFaultTrap&) = delete;
  EmulatedFaultTrap& operator=(const EmulatedFaultTrap&) = delete;

 private:
  CpgenEmulatedFault previous_recover_;  // an outer trap's, on the same thread
  std::unique_ptr<char[]> signal_stack_;
  stack_t previous_signal_stack_{};
};

}  // namespace cpgen

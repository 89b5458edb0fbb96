#include "runtime/backend/emulated_fault.h"

#include <mutex>

namespace cpgen {
namespace {

// Room for the handler and the emulator's jump; SIGSTKSZ is no longer a constant in recent glibc.
constexpr size_t kSignalStackBytes = 64 * 1024;

thread_local CpgenEmulatedFault t_recover = nullptr;

std::mutex g_install_mutex;
int g_live_traps = 0;          // guarded by g_install_mutex
struct sigaction g_previous{};  // the handler before the first live trap

void on_segv(int signal_number, siginfo_t* info, void* context) {
  if (CpgenEmulatedFault recover = t_recover) recover(info->si_addr);  // jumps away when it claims the fault
  // Not an emulated launch's fault: what would have happened without the trap.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) {
      g_previous.sa_sigaction(signal_number, info, context);
      return;
    }
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(signal_number);
    return;
  }
  // Default (an ignored SIGSEGV from a fault is fatal too): the instruction faults again on return
  // and the process dies as it would have.
  ::signal(SIGSEGV, SIG_DFL);
}

}  // namespace

EmulatedFaultTrap::EmulatedFaultTrap(CpgenEmulatedFault recover)
    : previous_recover_(t_recover), signal_stack_(new char[kSignalStackBytes]) {
  // The kernel's threads run on fiber stacks; the handler gets a stack of its own on this thread.
  stack_t stack{};
  stack.ss_sp = signal_stack_.get();
  stack.ss_size = kSignalStackBytes;
  ::sigaltstack(&stack, &previous_signal_stack_);
  t_recover = recover;
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (g_live_traps++ == 0) {
    struct sigaction action{};
    action.sa_sigaction = on_segv;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGSEGV, &action, &g_previous);
  }
}

EmulatedFaultTrap::~EmulatedFaultTrap() {
  {
    std::lock_guard<std::mutex> lock(g_install_mutex);
    if (--g_live_traps == 0) ::sigaction(SIGSEGV, &g_previous, nullptr);
  }
  t_recover = previous_recover_;
  ::sigaltstack(&previous_signal_stack_, nullptr);
}

}  // namespace cpgen

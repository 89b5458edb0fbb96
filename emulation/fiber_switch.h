// Switching between the emulator's fibers (emulation/cuda_emulation.cpp). On x86-64 a switch
// saves the callee-saved registers on the fiber's own stack and swaps stack pointers: no system
// call. glibc's swapcontext, which other targets keep, also saves and restores the signal mask
// with a sigprocmask system call at every switch, which was 70% of an emulated launch's time
// (bench/results/2026-11-23-emulated-step.md). The switch returns into another stack, so it
// assumes no hardware shadow stack (x86 CET user shadow stacks are opt-in and off by default). Header of the emulator only: standard headers and
// no project includes; included by cuda_emulation.cpp alone.
#pragma once

#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) && defined(__linux__)

extern "C" void cpgen_emulation_switch(void** save_sp, void* load_sp);

// System V x86-64: rbx, rbp, r12-r15 are callee-saved, so a switch that pushes them, stores rsp,
// loads the other fiber's rsp and pops its registers is a complete switch for code that calls it
// as a function. (The MXCSR and x87 control words are callee-saved too, but no emulated kernel
// changes them, so every fiber shares them.) Hidden: each emulated kernel's shared object has its
// own copy, which must not bind to another.
asm(R"(
  .text
  .globl cpgen_emulation_switch
  .hidden cpgen_emulation_switch
  .type cpgen_emulation_switch, @function
cpgen_emulation_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size cpgen_emulation_switch, .-cpgen_emulation_switch
)");

namespace cpgen::emulation {

struct FiberContext {
  void* sp = nullptr;
};

// A context that starts entry() on [stack, stack + bytes) at its first switch. entry must never
// return (the emulator's fibers end by switching away for good).
inline void fiber_prepare(FiberContext& context, char* stack, size_t bytes, void (*entry)()) {
  // Six zeroed registers, then entry as the address `ret` jumps to, then a zero return address
  // for entry itself: entry starts with rsp = 8 mod 16, as after a call.
  const uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + bytes) & ~static_cast<uintptr_t>(15);
  auto* frame = reinterpret_cast<uintptr_t*>(top - 8 * sizeof(uintptr_t));
  for (int i = 0; i < 6; ++i) frame[i] = 0;
  frame[6] = reinterpret_cast<uintptr_t>(entry);
  frame[7] = 0;
  context.sp = frame;
}

inline void fiber_switch(FiberContext& from, FiberContext& to) { cpgen_emulation_switch(&from.sp, to.sp); }

}  // namespace cpgen::emulation

#else  // other targets: ucontext

#include <ucontext.h>

namespace cpgen::emulation {

struct FiberContext {
  ucontext_t context;
};

inline void fiber_prepare(FiberContext& c, char* stack, size_t bytes, void (*entry)()) {
  getcontext(&c.context);
  c.context.uc_stack.ss_sp = stack;
  c.context.uc_stack.ss_size = bytes;
  c.context.uc_link = nullptr;
  makecontext(&c.context, entry, 0);
}

inline void fiber_switch(FiberContext& from, FiberContext& to) { swapcontext(&from.context, &to.context); }

}  // namespace cpgen::emulation

#endif

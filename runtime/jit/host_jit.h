// The emulated backend's compiler: a kernel's generated source (generator/render.h), compiled by
// the host C++ compiler against the CUDA emulator (emulation/, embedded in the library like the
// templates and written out next to the source, never read from the source tree) into a shared
// object whose exported symbols are the C entry points of emulation/emulated_launch.h. The object
// is self-contained: it links its own copy of the emulator's run time, an object compiled once
// per (emulator, flags, compiler) and kept in the store (it is most of a kernel's compile time).
// Both are kept in the compiled-kernel store like cubins, under keys of everything that decides
// their bytes.
#pragma once

#include <string>
#include <vector>

#include "generator/kernel_spec.h"
#include "runtime/jit/compiled_kernel.h"
#include "runtime/jit/kernel_store.h"

namespace cpgen {

// The "arch" of an emulated kernel in the store and in CompiledKernel::arch.
inline constexpr const char* kEmulatedArch = "host-emulated";

struct HostCompiler {
  std::string path;      // what is executed
  std::string identity;  // path and the first line of `--version`: part of store keys
};

// The compiler $CXX names (a name looked up on PATH, or a path), else the first of c++, g++,
// clang++ on `path_env`. Throws Error(kCompile) naming what was looked for and the Debian package
// to install when there is none.
std::string find_host_compiler(const char* cxx_env, const std::string& path_env);
// find_host_compiler on this process's environment, with its identity; looked up once.
const HostCompiler& host_compiler();

// The flags of every emulated compile (optimized, position independent, hidden symbols).
std::vector<std::string> host_compile_flags();
// What is compiled for `spec`: the emulator's header, the rendered source, and the entry points
// (the launch, and the recovery from a fault in one).
std::string emulated_source(const KernelSpec& spec);
// The translation unit of the emulator's run-time object that every emulated kernel links.
std::string emulator_runtime_source();
// A SHA-256 over the source, the embedded templates and emulator, the flags and the compiler.
std::string emulated_store_key(const std::string& source, const HostCompiler& compiler);

// The shared object of `spec` (CompiledKernel::cubin holds its bytes, arch is kEmulatedArch), from
// `store` when present there, else compiled and put there (`store` may be nullptr). Throws
// Error(kCompile) with the compiler's log and the folder holding the failed source.
CompiledKernel compile_emulated(const KernelSpec& spec, KernelStore* store = default_kernel_store());
// The same with a given compiler (tests; tools that pin one).
CompiledKernel compile_emulated(const KernelSpec& spec, KernelStore* store, const HostCompiler& compiler);
// How many host compiles this process has run (tests check that the store is used).
int host_compile_count();
// How many times this process compiled the emulator's run-time object (once at most per compiler).
int emulator_runtime_compile_count();

}  // namespace cpgen

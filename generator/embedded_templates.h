// The template headers and the CUDA emulator's files, embedded at build time
// (cmake/EmbedTemplates.cmake).
#pragma once

#include <cstddef>
#include <span>

namespace cpgen {

struct EmbeddedTemplate {
  const char* name;      // include name, e.g. "cpgen/step_fwd.cuh"
  const char* contents;  // NUL-terminated source
  size_t size;
};

std::span<const EmbeddedTemplate> embedded_templates();
// emulation/cuda_emulation.{h,cpp} as "cpgen/emulation/<file>": what the emulated backend
// compiles each kernel with (runtime/jit/host_jit.h).
std::span<const EmbeddedTemplate> embedded_emulation();

}  // namespace cpgen

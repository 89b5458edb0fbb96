// The template headers, embedded at build time (cmake/EmbedTemplates.cmake).
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

}  // namespace cpgen

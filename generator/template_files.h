// The template headers kernels are generated and compiled from: the ones embedded at build time,
// or, where the environment sets CPGEN_TEMPLATES_DIR, every *.cuh file of that directory under
// the same include names ("cpgen/<file>"). The override exists to compare two revisions of the
// templates on one machine in one session (bench/kernels.py --templates DIR): the kernel store's
// keys and the tuning records follow the files each kernel includes (included_templates), so the
// kernels and timings of two revisions never mix where they differ, and a byte-identical copy
// keys exactly as the embedded set.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "generator/embedded_templates.h"

namespace cpgen {

// Read once per process. A CPGEN_TEMPLATES_DIR that is not a readable directory holding at least
// one .cuh file is an Error (kBadInput) naming it.
std::span<const EmbeddedTemplate> template_files();

// The override directory in use, or "" with the embedded templates.
const std::string& template_files_dir();

// The templates of `templates` that `source` includes, directly or through one another: every
// line `#include "cpgen/NAME"` (or `<cpgen/NAME>`) counts, whatever #if surrounds it, so the set may hold a template
// a compile skips but never misses one it reads. In `templates`' order. What a kernel's code is
// made of beside its rendered source (the kernel store's keys, the tuning records' code hash).
std::vector<EmbeddedTemplate> included_templates(std::string_view source, std::span<const EmbeddedTemplate> templates);
// The names of text's `#include "NAME"` and `#include <NAME>` lines, in order (its own lines only).
std::vector<std::string_view> include_names(std::string_view text);
// `source` with each include of one of `templates` replaced by that template's text, recursively,
// every expansion inside an include guard of its own (CPGEN_FLAT_<NAME>) so that the preprocessor
// reads each template once, as #pragma once has it, whatever #if surrounds an include: one file
// that nvcc compiles with no include path for cpgen's headers (`cpgen compile --emit-source`;
// NVRTC would also need the JIT's prelude of integer types, runtime/jit/jit.cpp). Other includes
// (<cstdint>) stay as they are.
std::string flatten_includes(std::string_view source, std::span<const EmbeddedTemplate> templates);

}  // namespace cpgen

// The template headers kernels are generated and compiled from: the ones embedded at build time,
// or, where the environment sets CPGEN_TEMPLATES_DIR, every *.cuh file of that directory under
// the same include names ("cpgen/<file>"). The override exists to compare two revisions of the
// templates on one machine in one session (bench/kernels.py --templates DIR): the template hash,
// the kernel store's keys and the tuning records all follow the files in use, so the kernels and
// timings of two revisions never mix, and a byte-identical copy keys exactly as the embedded set.
#pragma once

#include <span>
#include <string>

#include "generator/embedded_templates.h"

namespace cpgen {

// Read once per process. A CPGEN_TEMPLATES_DIR that is not a readable directory holding at least
// one .cuh file is an Error (kBadInput) naming it.
std::span<const EmbeddedTemplate> template_files();

// The override directory in use, or "" with the embedded templates.
const std::string& template_files_dir();

}  // namespace cpgen

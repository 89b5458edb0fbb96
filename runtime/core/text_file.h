// Reading the text files a user names: a shapes file, a vectors file, a pretuned cache, a
// database export to import. One reader, so each refuses the same things in the same words: a
// folder, a file that cannot be opened or read, one longer than its limit, and (in the parsers)
// text holding a NUL byte, which nlohmann's parser would take for the end of the text. Their JSON
// is parsed by runtime/core/json_text.h.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace cpgen {

// The most a JSON file cpgen reads whole may hold (an import, a pretuned cache): far more than any
// real one, so a file longer than this is taken for the wrong file.
inline constexpr size_t kMaxJsonFileBytes = size_t{256} << 20;

// The bytes of the file at `path`, read in 64 KiB pieces and never more than one piece past
// max_bytes (so a device such as /dev/zero stops at the limit, not at the memory). Throws Error (kBadInput)
// "<label>: <reason>", where label names the file in the caller's terms (e.g. "import: x.json")
// and kind says what it should be (e.g. "a shapes file"):
//   "is a directory, not <kind>"   "cannot open <kind>: <strerror>"   "cannot read <kind>: ..."
//   "is longer than N MiB; <kind> is far smaller (is it the right file?)"
// kRegularOnly also refuses what is not a regular file (a link to one is followed), judged on the
// opened descriptor: "is not a regular file; <kind> is read only from one". A FIFO is opened
// without waiting for a writer. For files found in a folder rather than named by the user.
enum class FileKinds { kAny, kRegularOnly };
std::string read_text_file(const std::string& path, const std::string& label, std::string_view kind,
                           size_t max_bytes, FileKinds kinds = FileKinds::kAny);

// Writes `bytes` to `path` whole or not at all: into a new file beside it, then renamed over it,
// so a full disk, a size limit or a kill leaves the old file (or none) and no half-written one.
// The new file takes the old one's permissions (a new one 0666 less the umask); a link is
// followed and the file it names replaced (hard links to the old file keep the old bytes). A
// device, a pipe or a path under /dev or /proc (/dev/stdout) is written in place. Throws Error
// (kIo) "cannot write <label>: <strerror>" naming the reason; the temporary file is removed.
void write_file_atomically(const std::string& path, const std::string& label, std::string_view bytes);

// Throws Error (kBadInput) "<label>: a NUL byte at line L, column C; <kind> is JSON text" when
// `text` holds one.
void refuse_nul_byte(const std::string& text, const std::string& label, std::string_view kind);

}  // namespace cpgen

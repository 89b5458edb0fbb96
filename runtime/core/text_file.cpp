#include "runtime/core/text_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "cpgen/error.h"
#include "runtime/core/text_position.h"

namespace cpgen {

std::string read_text_file(const std::string& path, const std::string& label, std::string_view kind,
                           size_t max_bytes) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw_bad_input(label + ": is a directory, not " + std::string(kind));
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) throw_bad_input(label + ": cannot open " + std::string(kind) + ": " + std::strerror(errno));
  std::string text;
  char piece[1 << 16];
  while (true) {
    const size_t n = std::fread(piece, 1, sizeof piece, file.get());
    text.append(piece, n);
    if (text.size() > max_bytes) {
      const std::string limit =
          max_bytes >= (size_t{1} << 20) ? std::to_string(max_bytes >> 20) + " MiB" : std::to_string(max_bytes) + " bytes";
      throw_bad_input(label + ": is longer than " + limit + "; " + std::string(kind) +
                      " is far smaller (is it the right file?)");
    }
    if (n < sizeof piece) break;
  }
  if (std::ferror(file.get())) throw_bad_input(label + ": cannot read " + std::string(kind) + ": " + std::strerror(errno));
  return text;
}

void refuse_nul_byte(const std::string& text, const std::string& label, std::string_view kind) {
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    throw_bad_input(label + ": a NUL byte at " + line_column(text, nul) + "; " + std::string(kind) + " is JSON text");
}

}  // namespace cpgen

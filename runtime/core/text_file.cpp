#include "runtime/core/text_file.h"

#include <fcntl.h>
#include <unistd.h>

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

void write_file_atomically(const std::string& given, const std::string& label, std::string_view bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // A device or pipe (/dev/stdout, /dev/null) is written in place: renaming over it would replace
  // the node itself. A link is followed, so the file it names is the one replaced.
  const fs::file_status status = fs::status(given, ec);
  const bool special = fs::exists(status) && !fs::is_regular_file(status);
  std::string path = given;
  if (!special && fs::is_symlink(fs::symlink_status(given, ec))) {
    const fs::path target = fs::weakly_canonical(given, ec);
    if (!ec) path = target.string();
  }
  // In the same folder, so the rename stays on one file system; the name is the target's with a
  // suffix no user file is likely to have, and O_EXCL never takes over an existing file.
  const std::string temp = special ? path : path + ".cpgen-partial-" + std::to_string(::getpid());
  const int fd = special ? ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC)
                         : ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(ErrorKind::kIo, "cannot write " + label + ": " + std::strerror(errno));
  const auto fail = [&](int error) {
    ::close(fd);
    if (!special) ::unlink(temp.c_str());
    throw Error(ErrorKind::kIo, "cannot write " + label + ": " + std::strerror(error));
  };
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(n < 0 ? errno : ENOSPC);
    done += static_cast<size_t>(n);
  }
  if (!special && ::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) fail(errno);
  if (::close(fd) != 0) {
    const int error = errno;
    if (!special) ::unlink(temp.c_str());
    throw Error(ErrorKind::kIo, "cannot write " + label + ": " + std::strerror(error));
  }
  if (special) return;
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    throw Error(ErrorKind::kIo, "cannot write " + label + ": " + std::strerror(error));
  }
}

void refuse_nul_byte(const std::string& text, const std::string& label, std::string_view kind) {
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    throw_bad_input(label + ": a NUL byte at " + line_column(text, nul) + "; " + std::string(kind) + " is JSON text");
}

}  // namespace cpgen

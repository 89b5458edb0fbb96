#include "runtime/core/text_file.h"

#include <fcntl.h>
#include <sys/stat.h>
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
                           size_t max_bytes, FileKinds kinds) {
  const bool regular_only = kinds == FileKinds::kRegularOnly;
  // O_NONBLOCK: opening a FIFO would wait for a writer. The descriptor's own fstat then decides,
  // so the file judged is the file read (no swap between a check by name and the open).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (regular_only ? O_NONBLOCK : 0));
  if (fd < 0) throw_bad_input(label + ": cannot open " + std::string(kind) + ": " + std::strerror(errno));
  struct stat st {};
  const bool known = ::fstat(fd, &st) == 0;
  if (known && S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw_bad_input(label + ": is a directory, not " + std::string(kind));
  }
  if (regular_only && (!known || !S_ISREG(st.st_mode))) {
    ::close(fd);
    throw_bad_input(label + ": is not a regular file; " + std::string(kind) + " is read only from one");
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(::fdopen(fd, "rb"), &std::fclose);
  if (!file) {
    const int error = errno;
    ::close(fd);
    throw_bad_input(label + ": cannot open " + std::string(kind) + ": " + std::strerror(error));
  }
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
  // A link the user made is followed, so the file it names is the one replaced (a dangling one
  // too: its target is created). A device, a pipe, or a name under /dev or /proc (/dev/stdout
  // redirected to a file is that file) is written in place: renaming over it would replace the
  // node, or the redirect's file behind the shell's back.
  fs::path path = given;
  for (int hops = 0; hops < 40 && fs::is_symlink(fs::symlink_status(path, ec)); ++hops) {
    if (path.string().rfind("/dev/", 0) == 0 || path.string().rfind("/proc/", 0) == 0) break;
    const fs::path next = fs::read_symlink(path, ec);
    if (ec) break;
    path = (next.is_absolute() ? next : path.parent_path() / next).lexically_normal();
  }
  const std::string target = path.string();
  const fs::file_status status = fs::status(target, ec);
  const bool special = (fs::exists(status) && !fs::is_regular_file(status)) || target.rfind("/dev/", 0) == 0 ||
                       target.rfind("/proc/", 0) == 0 || given.rfind("/dev/", 0) == 0 || given.rfind("/proc/", 0) == 0;
  // In the same folder, so the rename stays on one file system; a unique name (mkostemp), so a
  // file left by a killed run never blocks the next.
  std::string temp = special ? target : target + ".cpgen-partial-XXXXXX";
  // In place, appended (as a shell's >> or > already left it: /dev/stdout truncated the file a
  // >> redirect was adding to).
  const int fd = special ? ::open(target.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC) : ::mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) throw Error(ErrorKind::kIo, "cannot write " + label + ": " + std::strerror(errno));
  const auto fail = [&](int error) {
    ::close(fd);
    if (!special) ::unlink(temp.c_str());
    throw Error(ErrorKind::kIo, "cannot write " + label + ": " + std::strerror(error));
  };
  if (!special) {
    // The replaced file's permissions, or a new file's (0666 less the umask); mkostemp's are 0600.
    struct stat old {};
    mode_t mode = 0;
    if (::stat(target.c_str(), &old) == 0) {
      mode = old.st_mode & 07777;
    } else {
      const mode_t mask = ::umask(0);
      ::umask(mask);
      mode = 0666 & ~mask;
    }
    if (::fchmod(fd, mode) != 0) fail(errno);
  }
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
  if (::rename(temp.c_str(), target.c_str()) != 0) {
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

#include "runtime/jit/kernel_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>

#include "cpgen/error.h"
#include "runtime/core/user_cache_dir.h"

namespace cpgen {
namespace {

// Entry layout: a magic line, one line of JSON metadata, then the cubin bytes. The metadata holds
// the cubin's size and checksum, so a truncated or damaged entry is detected and reads as absent.
constexpr std::string_view kMagic = "cpgen-kernel-store 2\n";
constexpr std::string_view kSuffix = ".cpgenk";

// Detects damage, not tampering: FNV-1a's multiply-xor step applied to 8-byte words (then to the
// tail bytes), about 8x faster than per byte, so an 80 KB cubin checks in ~10 us of the
// under-1-ms load budget.
uint64_t checksum(std::string_view bytes) {
  constexpr uint64_t kPrime = 1099511628211ull;
  uint64_t h = 1469598103934665603ull ^ bytes.size();
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes.data() + i, 8);
    h = (h ^ word) * kPrime;
    h ^= h >> 29;  // fold high bits down: the multiply alone never moves them to lower bits
  }
  for (; i < bytes.size(); ++i) h = (h ^ static_cast<unsigned char>(bytes[i])) * kPrime;
  return h;
}

std::string errno_text() { return std::strerror(errno); }

bool read_file(const std::string& path, std::string& out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  bool ok = ::fstat(fd, &st) == 0;
  if (ok) {
    out.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < out.size()) {
      ssize_t n = ::read(fd, out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ok = done == out.size();
  }
  ::close(fd);
  return ok;
}

void write_all(int fd, std::string_view bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(ErrorKind::kIo, "cannot write kernel store entry " + path + ": " + errno_text());
    done += static_cast<size_t>(n);
  }
}

// Unique among writers: the pid and a counter separate writers of one host, and a random part
// separates hosts sharing the directory (pids repeat across machines and containers).
std::string temp_name(const std::string& final_path) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t process_nonce = [] {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device();
  }();
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, ".tmp.%d.%016llx.%llu", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(process_nonce),
                static_cast<unsigned long long>(counter++));
  return final_path + suffix;
}

}  // namespace

DirectoryKernelStore::DirectoryKernelStore(std::string dir) : dir_(std::move(dir)) {}

std::string DirectoryKernelStore::entry_path(const std::string& key) const {
  return (std::filesystem::path(dir_) / (key + std::string(kSuffix))).string();
}

std::string DirectoryKernelStore::describe() const { return "directory " + dir_; }

std::optional<CompiledKernel> DirectoryKernelStore::get(const std::string& key) {
  std::string bytes;
  if (!read_file(entry_path(key), bytes)) return std::nullopt;
  if (bytes.compare(0, kMagic.size(), kMagic) != 0) return std::nullopt;
  size_t header_end = bytes.find('\n', kMagic.size());
  if (header_end == std::string::npos) return std::nullopt;
  nlohmann::json meta = nlohmann::json::parse(
      bytes.begin() + static_cast<std::ptrdiff_t>(kMagic.size()),
      bytes.begin() + static_cast<std::ptrdiff_t>(header_end), nullptr, /*allow_exceptions=*/false);
  if (!meta.is_object()) return std::nullopt;
  try {
    const std::string_view cubin = std::string_view(bytes).substr(header_end + 1);
    if (meta.at("key").get<std::string>() != key) return std::nullopt;
    if (meta.at("cubin_bytes").get<size_t>() != cubin.size()) return std::nullopt;
    if (meta.at("cubin_checksum").get<uint64_t>() != checksum(cubin)) return std::nullopt;
    CompiledKernel k;
    k.key = key;
    k.uri = meta.at("uri").get<std::string>();
    k.arch = meta.at("arch").get<std::string>();
    k.log = meta.at("log").get<std::string>();
    bytes.erase(0, header_end + 1);  // the cubin in place, without a second copy
    k.cubin = std::move(bytes);
    const nlohmann::json& s = meta.at("stats");
    k.stats.registers = s.at("registers").get<int>();
    k.stats.spill_bytes = s.at("spill_bytes").get<int>();
    k.stats.stack_bytes = s.at("stack_bytes").get<int>();
    k.stats.shared_bytes = s.at("shared_bytes").get<int>();
    k.stats.cubin_bytes = static_cast<int>(k.cubin.size());
    k.stats.compile_ms = s.at("compile_ms").get<double>();
    k.stats.from_store = true;
    return k;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // missing or mistyped field: written by something else, treat as absent
  }
}

void DirectoryKernelStore::put(const CompiledKernel& kernel) {
  if (kernel.key.empty()) throw Error(ErrorKind::kInternal, "kernel store: put of " + kernel.uri + " without a key");
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw Error(ErrorKind::kIo, "cannot create kernel store directory " + dir_ + ": " + ec.message());

  nlohmann::json meta = {
      {"key", kernel.key},
      {"uri", kernel.uri},
      {"arch", kernel.arch},
      {"cubin_bytes", kernel.cubin.size()},
      {"cubin_checksum", checksum(kernel.cubin)},
      {"log", kernel.log},
      {"stats",
       {{"registers", kernel.stats.registers},
        {"spill_bytes", kernel.stats.spill_bytes},
        {"stack_bytes", kernel.stats.stack_bytes},
        {"shared_bytes", kernel.stats.shared_bytes},
        {"compile_ms", kernel.stats.compile_ms}}}};
  std::string entry(kMagic);
  entry += meta.dump();  // one line: dump() escapes the log's newlines
  entry += '\n';
  entry += kernel.cubin;

  const std::string final_path = entry_path(kernel.key);
  const std::string temp_path = temp_name(final_path);
  int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(ErrorKind::kIo, "cannot create kernel store entry " + temp_path + ": " + errno_text());
  try {
    write_all(fd, entry, temp_path);
  } catch (...) {
    ::close(fd);
    ::unlink(temp_path.c_str());
    throw;
  }
  // Data must reach the disk before the rename publishes the name, or a crash could leave a
  // complete-looking name over an empty file (the checksum would still catch it, at a recompile).
  ::fsync(fd);
  ::close(fd);
  if (::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    std::string why = errno_text();
    ::unlink(temp_path.c_str());
    throw Error(ErrorKind::kIo, "cannot publish kernel store entry " + final_path + ": " + why);
  }
}

std::string default_kernel_dir() {
  if (std::string dir = env_or_empty("CPGEN_KERNEL_DIR"); !dir.empty()) return dir;
  if (std::string cache = user_cache_dir(); !cache.empty()) return cache + "/kernels";
  return (std::filesystem::temp_directory_path() / "cpgen" / "kernels").string();
}

KernelStore* default_kernel_store() {
  // One store per directory, kept for the life of the process so the pointer stays valid.
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<DirectoryKernelStore>> stores;
  std::string dir = default_kernel_dir();
  std::lock_guard<std::mutex> lock(mutex);
  auto& store = stores[dir];
  if (!store) store = std::make_unique<DirectoryKernelStore>(dir);
  return store.get();
}

}  // namespace cpgen

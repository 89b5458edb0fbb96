#include "runtime/jit/kernel_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
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
#include "runtime/core/content_checksum.h"
#include "runtime/core/user_cache_dir.h"

namespace cpgen {
namespace {

// Entry layout: a magic line, one line of JSON metadata, then the cubin bytes. The metadata holds
// the cubin's size and a checksum of itself (without that field) and the cubin together, so a
// truncated or damaged entry, header included, is detected and reads as absent. Format 2 covered
// the cubin alone: a flipped bit in its stats (spill_bytes 0 -> 8) was served.
constexpr std::string_view kMagic = "cpgen-kernel-store 3\n";
constexpr std::string_view kSuffix = ".cpgenk";
constexpr std::string_view kTempMarker = ".tmp.";
// A temporary file this old was left by a writer that died before its rename.
constexpr auto kStaleTemp = std::chrono::hours(1);

// An entry's bytes larger than this are no kernel this store wrote (cubins are tens of KB, an
// emulated kernel's object a few MB): they read as absent instead of being read into memory whole.
constexpr off_t kMaxEntryBytes = off_t{256} << 20;

// The metadata's one line. A log with bytes that are not UTF-8 (a template's #warning text) is
// written with U+FFFD in their place: dump() throws on them otherwise.
std::string meta_text(const nlohmann::json& meta) {
  return meta.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The checksum of an entry: its metadata as written (entry_checksum left out) and its cubin.
uint64_t entry_checksum(nlohmann::json meta, std::string_view cubin) {
  meta.erase("entry_checksum");
  return content_checksum(cubin, content_checksum(meta_text(meta)));
}

// Whether this process may trust what the file holds: it is owned by this user or by root and no
// one else may write it. An entry is loaded into the GPU, and an emulated kernel's is a shared
// object this process runs: one that another user wrote (a store folder others may write, as a
// CPGEN_KERNEL_DIR can be) reads as absent and is compiled again, and the new entry replaces it.
bool trusted_entry(const struct stat& st) {
  const bool owner = st.st_uid == ::geteuid() || st.st_uid == 0;
  return owner && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

std::string errno_text() { return std::strerror(errno); }

bool read_file(const std::string& path, std::string& out) {
  // O_NONBLOCK: a FIFO at an entry's name would block the open; only a regular file is read, of
  // at most kMaxEntryBytes and one trusted_entry accepts.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st;
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= kMaxEntryBytes && trusted_entry(st);
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
  std::snprintf(suffix, sizeof suffix, "%s%d.%016llx.%llu", std::string(kTempMarker).c_str(), static_cast<int>(::getpid()),
                static_cast<unsigned long long>(process_nonce),
                static_cast<unsigned long long>(counter++));
  return final_path + suffix;
}

}  // namespace

void keep_in_store(KernelStore* store, CompiledKernel& kernel) {
  if (!store) return;
  try {
    store->put(kernel);
  } catch (const std::exception& e) {
    kernel.log += "\ncpgen: not stored: " + std::string(e.what());
    kernel.not_stored = e.what();
  }
}

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
    if (meta.at("entry_checksum").get<uint64_t>() != entry_checksum(meta, cubin)) return std::nullopt;
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
      {"log", kernel.log},
      {"stats",
       {{"registers", kernel.stats.registers},
        {"spill_bytes", kernel.stats.spill_bytes},
        {"stack_bytes", kernel.stats.stack_bytes},
        {"shared_bytes", kernel.stats.shared_bytes},
        {"compile_ms", kernel.stats.compile_ms}}}};
  meta["entry_checksum"] = entry_checksum(meta, kernel.cubin);
  std::string entry(kMagic);
  entry += meta_text(meta);  // one line: dump() escapes the log's newlines
  entry += '\n';
  entry += kernel.cubin;

  std::call_once(swept_, [&] { remove_stale_temps(); });
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

void DirectoryKernelStore::remove_stale_temps() {
  // Another writer's temporary file is renamed within seconds; one an hour old belongs to a
  // process that died (killed, out of disk) between its create and its rename.
  std::error_code ec;
  const auto now = std::filesystem::file_time_type::clock::now();
  for (std::filesystem::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.find(std::string(kSuffix) + std::string(kTempMarker)) == std::string::npos) continue;
    std::error_code time_ec;
    const auto written = std::filesystem::last_write_time(it->path(), time_ec);
    if (!time_ec && now - written > kStaleTemp) std::filesystem::remove(it->path(), time_ec);
  }
}

std::string default_kernel_dir() {
  if (std::string dir = env_or_empty("CPGEN_KERNEL_DIR"); !dir.empty()) return dir;
  if (std::string cache = user_cache_dir(); !cache.empty()) return cache + "/kernels";
  // Per user and private, as host_jit.cpp's work folders (user_temp_dir checks the owner and mode
  // of a folder it finds: the name is predictable, and the store's objects are loaded).
  return user_temp_dir("kernels");
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

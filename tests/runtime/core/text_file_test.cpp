// read_text_file and refuse_nul_byte (runtime/core/text_file.h): the one reader of the JSON files
// a user names (shapes, vectors, pretuned caches, imports), so each is refused in the same words;
// and write_file_atomically, the one writer of the files a command is asked to write.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include "cpgen/error.h"
#include "runtime/core/text_file.h"
#include "tests/error_text.h"
#include "tests/temp_dir.h"

namespace cpgen {
namespace {

std::string error_of(const std::function<void()>& f) { return testing::error_text(f); }

TEST(TextFile, ReadsEveryByteUpToTheLimit) {
  testing::TempDir dir("text_file");
  const std::string path = dir.path() + "/a.json";
  // Longer than one 64 KiB piece, with a NUL byte: the reader keeps every byte; the parsers refuse.
  std::string text(200000, 'x');
  text[70000] = '\0';
  std::ofstream(path, std::ios::binary) << text;
  EXPECT_EQ(read_text_file(path, "a", "a file", text.size()), text);
  EXPECT_EQ(error_of([&] { read_text_file(path, "label", "a file", text.size() - 1); }),
            "label: is longer than 199999 bytes; a file is far smaller (is it the right file?)");
  EXPECT_EQ(error_of([&] { read_text_file(path, "label", "a file", size_t{1} << 17); }),
            "label: is longer than 131072 bytes; a file is far smaller (is it the right file?)");
}

TEST(TextFile, RefusesFoldersMissingFilesAndEndlessSources) {
  testing::TempDir dir("text_file");
  EXPECT_EQ(error_of([&] { read_text_file(dir.path(), "import: " + dir.path(), "a JSON file", 100); }),
            "import: " + dir.path() + ": is a directory, not a JSON file");
  EXPECT_EQ(error_of([&] { read_text_file(dir.path() + "/none.json", "x", "a shapes file", 100); }),
            "x: cannot open a shapes file: No such file or directory");
  // A source with no end stops one piece past the limit.
  if (std::filesystem::exists("/dev/zero")) {
    EXPECT_EQ(error_of([&] { read_text_file("/dev/zero", "z", "a cache", size_t{3} << 20); }),
              "z: is longer than 3 MiB; a cache is far smaller (is it the right file?)");
  }
}

// kRegularOnly (files found in a folder, not named by the user): a FIFO is refused without
// waiting for a writer, a device too, and a link to a regular file is read.
TEST(TextFile, RegularOnlyRefusesFifosAndDevicesAndFollowsLinks) {
  testing::TempDir dir("text_file");
  const std::string fifo = dir.path() + "/f.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { read_text_file(fifo, "f", "a cache", 100, FileKinds::kRegularOnly); }),
            "f: is not a regular file; a cache is read only from one");
  if (std::filesystem::exists("/dev/null")) {
    EXPECT_EQ(error_of([&] { read_text_file("/dev/null", "n", "a cache", 100, FileKinds::kRegularOnly); }),
              "n: is not a regular file; a cache is read only from one");
    EXPECT_EQ(read_text_file("/dev/null", "n", "a cache", 100), "");  // kAny reads it
  }
  std::ofstream(dir.path() + "/a.json") << "{}";
  std::filesystem::create_symlink(dir.path() + "/a.json", dir.path() + "/l.json");
  EXPECT_EQ(read_text_file(dir.path() + "/l.json", "l", "a cache", 100, FileKinds::kRegularOnly), "{}");
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(TextFile, AnAtomicWriteReplacesTheFileThroughALinkAndLeavesNothingElse) {
  testing::TempDir dir("text_file_write");
  const std::string path = dir.path() + "/out.json", link = dir.path() + "/link.json";
  write_file_atomically(path, "out", std::string("one\0two", 7));
  EXPECT_EQ(slurp(path), std::string("one\0two", 7));
  std::filesystem::create_symlink(path, link);
  write_file_atomically(link, "link", "three");
  EXPECT_TRUE(std::filesystem::is_symlink(link)) << "the link itself was replaced";
  EXPECT_EQ(slurp(path), "three");
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) files += entry.exists();
  EXPECT_EQ(files, 2u) << "a temporary file was left";
  // A link to a file not there yet: the file is made where it points, the link kept.
  std::filesystem::create_symlink("made.json", dir.path() + "/dangling.json");
  write_file_atomically(dir.path() + "/dangling.json", "dangling", "four");
  EXPECT_TRUE(std::filesystem::is_symlink(dir.path() + "/dangling.json"));
  EXPECT_EQ(slurp(dir.path() + "/made.json"), "four");
}

TEST(TextFile, AFailedWriteNamesTheReasonAndKeepsTheOldFile) {
  testing::TempDir dir("text_file_write");
  const Error missing = [&] {
    try {
      write_file_atomically(dir.path() + "/no/such/out.json", "the export", "x");
    } catch (const Error& e) {
      return e;
    }
    return Error(ErrorKind::kInternal, "no error");
  }();
  EXPECT_EQ(missing.kind(), ErrorKind::kIo);
  EXPECT_EQ(std::string(missing.what()), "cannot write the export: No such file or directory");
  // A device is written in place (renaming over it would replace the node): /dev/full says why.
  if (std::filesystem::exists("/dev/full")) {
    try {
      write_file_atomically("/dev/full", "/dev/full", "x");
      ADD_FAILURE() << "a write to /dev/full succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "cannot write /dev/full: No space left on device");
    }
    EXPECT_TRUE(std::filesystem::is_character_file("/dev/full"));
  }
}

// Past a file-size limit (ulimit -f) the write fails midway: the old file keeps its bytes and
// no temporary file is left. In a child process, whose limit ends with it.
TEST(TextFile, AWriteCutShortLeavesTheOldFileAndNoTemporaryOne) {
  testing::TempDir dir("text_file_write");
  const std::string path = dir.path() + "/out.json";
  std::ofstream(path) << "old";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{1024, 1024};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    int code = 0;
    try {
      write_file_atomically(path, "out", std::string(1 << 16, 'x'));
      code = 2;  // the write past the limit succeeded
    } catch (const Error& e) {
      if (std::string(e.what()).find("cannot write out: File too large") != 0) code = 3;
    }
    size_t files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir.path())) files += entry.exists();
    if (slurp(path) != "old") code = 4;
    if (files != 1) code = 5;
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: no error, 3: another message, 4: the old file changed, 5: a file was left";
}

// The replacement keeps the replaced file's permissions (a 0600 file is not made readable).
TEST(TextFile, AnAtomicWriteKeepsThePermissions) {
  testing::TempDir dir("text_file_write");
  const std::string path = dir.path() + "/secret.json";
  std::ofstream(path) << "old";
  std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  write_file_atomically(path, "secret", "new");
  EXPECT_EQ(slurp(path), "new");
  EXPECT_EQ(std::filesystem::status(path).permissions(),
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
}

TEST(TextFile, ANulByteIsNamedByLineAndColumn) {
  EXPECT_NO_THROW(refuse_nul_byte("{\"a\": 1}\n", "f.json", "a cache"));
  EXPECT_EQ(error_of([] { refuse_nul_byte(std::string("{\n \"a\0\": 1}", 11), "f.json", "a cache"); }),
            "f.json: a NUL byte at line 2, column 4; a cache is JSON text");
}

}  // namespace
}  // namespace cpgen

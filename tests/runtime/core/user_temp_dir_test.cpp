// user_temp_dir (runtime/core/user_cache_dir.h): this user's private folder under the temporary
// directory. Its name is predictable, and the emulated backend dlopens what it compiles there, so
// a folder another user made, a world-writable one or a link is refused, naming it.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "cpgen/error.h"
#include "runtime/core/user_cache_dir.h"
#include "tests/temp_dir.h"

namespace cpgen {
namespace {

namespace fs = std::filesystem;

// Runs user_temp_dir with TMPDIR at `tmp`; "" or the error's text.
std::string attempt(const std::string& tmp, std::string* made = nullptr) {
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  ::setenv("TMPDIR", tmp.c_str(), 1);
  std::string error;
  try {
    const std::string dir = user_temp_dir("kernels");
    if (made) *made = dir;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo) << e.what();
    error = e.what();
  }
  if (old) ::setenv("TMPDIR", saved.c_str(), 1); else ::unsetenv("TMPDIR");
  return error;
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  ::lstat(path.c_str(), &st);
  return st.st_mode & 07777;
}

TEST(UserTempDir, MadePrivateAndFoundAgain) {
  testing::TempDir tmp("user_temp");
  std::string dir;
  ASSERT_EQ(attempt(tmp.path(), &dir), "");
  const std::string base = tmp.path() + "/cpgen-" + std::to_string(::geteuid());
  EXPECT_EQ(dir, base + "/kernels");
  EXPECT_EQ(mode_of(base), 0700u);
  EXPECT_EQ(mode_of(dir), 0700u);
  EXPECT_EQ(attempt(tmp.path()), "") << "its own folders, found again";
}

TEST(UserTempDir, AFolderOthersMayWriteALinkOrAnotherUsersFolderIsRefused) {
  testing::TempDir tmp("user_temp_bad");
  const std::string base = tmp.path() + "/cpgen-" + std::to_string(::geteuid());
  ASSERT_EQ(::mkdir(base.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(base.c_str(), 0777), 0);
  std::string error = attempt(tmp.path());
  EXPECT_NE(error.find(base + " is not a private folder of this user (owner uid " + std::to_string(::geteuid()) +
                       ", mode 0777"),
            std::string::npos)
      << error;
  EXPECT_FALSE(fs::exists(base + "/kernels")) << "nothing made inside it";

  ASSERT_EQ(::rmdir(base.c_str()), 0);
  testing::TempDir elsewhere("user_temp_target");
  fs::create_directory_symlink(elsewhere.path(), base);
  error = attempt(tmp.path());
  EXPECT_NE(error.find(base + " is not a private folder of this user (a symbolic link"), std::string::npos) << error;
  fs::remove(base);

  if (::geteuid() == 0) {  // root can hand the folder to another user
    ASSERT_EQ(::mkdir(base.c_str(), 0700), 0);
    ASSERT_EQ(::chown(base.c_str(), 4242, 4242), 0);
    error = attempt(tmp.path());
    EXPECT_NE(error.find("(owner uid 4242, mode 0700"), std::string::npos) << error;
  }
}

}  // namespace
}  // namespace cpgen

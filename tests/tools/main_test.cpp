// The cpgen command line's own answers: an unknown command, and messages printed once with the
// program's name.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "test_util.h"

namespace cpgen::testing {
namespace {

TEST(Cli, UnknownCommandIsNamedAndTheCommandsListed) {
  CliResult r = run_cli("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("unknown command 'frobnicate'"), std::string::npos) << r.err;
  for (const char* command : {"compile", "db", "explain", "plan", "tune", "verify"}) {
    EXPECT_NE(r.err.find(command), std::string::npos) << command << " missing from: " << r.err;
  }
  EXPECT_EQ(r.err.find("_nccl-rank"), std::string::npos) << "internal commands stay hidden: " << r.err;
  EXPECT_EQ(r.err.find("A subcommand is required"), std::string::npos) << r.err;
  // One line whatever the argument holds (a newline was printed as it is).
  r = run_cli("'frob\nnicate'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("unknown command 'frob\\x0anicate'"), std::string::npos) << r.err;
}

// A command's own subcommands answer a typo the same way (CLI11 said "A subcommand is required").
TEST(Cli, UnknownSubcommandIsNamedAndTheSubcommandsListed) {
  CliResult r = run_cli("db shwo");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("unknown db subcommand 'shwo'"), std::string::npos) << r.err;
  for (const char* sub : {"show", "export", "import", "merge", "verify"})
    EXPECT_NE(r.err.find(sub), std::string::npos) << sub << " missing from: " << r.err;
  r = run_cli("db 'sh\nwo'");
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("unknown db subcommand 'sh\\x0awo'"), std::string::npos) << r.err;
}

// What CLI11 refuses is one line that names the command and points at the command's own help: an
// unknown option lists the command's options, a missing subcommand the subcommands (they said
// "The following arguments were not expected: x --shape-file" and "A subcommand is required",
// each "(see cpgen --help)").
TEST(Cli, ParseErrorsNameTheCommandAndItsOwnHelp) {
  struct Case {
    const char* args;
    std::vector<std::string> says;
  };
  for (const Case& c : std::vector<Case>{
           {"plan --shape-file x",
            {"cpgen: plan: unknown option or extra argument: --shape-file x; its options: --shapes, --shape,",
             "(see cpgen plan --help)"}},
           {"db show --dbb x", {"db show: unknown option or extra argument: --dbb x; its options: --db, --json",
                                "(see cpgen db show --help)"}},
           {"db", {"db needs a subcommand: show, export, import, merge, verify (see cpgen db --help)"}},
           {"db import", {"db import: ", "(see cpgen db import --help)"}},
           {"plan --shapes", {"plan: --shapes", "(see cpgen plan --help)"}},
           // The words in their order, one with a space quoted (they were split and reversed).
           {"plan 'hello world' x", {"plan: unknown option or extra argument: 'hello world' x;"}},
           // A word CLI11 could not place is named beside its other refusals ('db import --bogus'
           // said only "file is required").
           {"db import --bogus", {"db import: file is required (unknown: --bogus)"}},
           {"db --bogus", {"db needs a subcommand: show, export, import, merge, verify (unknown: --bogus)"}},
           // Long names where an option has both (-o was listed for --output).
           {"db export --bogus", {"its options: --db, --json, --output, --defaults"}}}) {
    const CliResult r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args;
    EXPECT_EQ(line_count(r.err), 1) << c.args << ": " << r.err;
    for (const std::string& part : c.says) EXPECT_NE(r.err.find(part), std::string::npos) << c.args << ": " << r.err;
    EXPECT_EQ(r.err.find("(see cpgen --help)"), std::string::npos) << c.args << ": " << r.err;
  }
}

// An option before the command ("cpgen --help plan") was taken for a command and aborted the
// program with CLI11's uncaught OptionNotFound (exit 134).
TEST(Cli, AnOptionBeforeTheCommandIsCli11sToAnswer) {
  for (const char* args : {"--help plan", "-h db show", "--bogus plan"}) {
    CliResult r = run_cli(args);
    EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 2) << args << ": exit " << r.exit_code << "\n" << r.err;
    EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << args << ": " << r.err;
  }
}

// An empty value was taken as the option left out: --only '' ran a tune of both directions,
// --db '' opened the default database, -o '' wrote to the standard output.
TEST(Cli, AnEmptyValueIsRefusedNotTakenForTheDefault) {
  for (const char* args : {"tune --shapes x.json --only ''", "db show --db ''", "db export --defaults -o ''",
                           "explain --arch= --shapes x.json"}) {
    CliResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_EQ(line_count(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("is empty"), std::string::npos) << args << ": " << r.err;
  }
}

// Standard output that cannot be written (a full disk: /dev/full) fails the command with one line,
// where a truncated `db export > cache.json` exited 0 before.
TEST(Cli, AFailedWriteOfStandardOutputExitsOne) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  const std::filesystem::path err = std::filesystem::temp_directory_path() / ("cpgen_full_" + std::to_string(::getpid()));
  // verify prints with printf, whose failed flush was never seen (exit 0).
  for (const char* args : {"db export --defaults", "plan --shapes examples/shapes/gqa-heavy.json",
                           "verify --random --shape '{\"q_heads\": 2, \"kv_heads\": 1, \"head_dim\": 64, "
                           "\"seq_len\": 64, \"cp_size\": 2, \"dtype\": \"bf16\", \"causal\": true}'"}) {
    const std::string cmd = "cd " + source_dir() + " && " + CPGEN_CLI_PATH + " " + args + " >/dev/full 2>" + err.string();
    const int status = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(status)) << args;
    EXPECT_EQ(WEXITSTATUS(status), 1) << args;
    const std::string message = slurp(err.string());
    EXPECT_NE(message.find("cannot write the standard output"), std::string::npos) << args << ": " << message;
    EXPECT_EQ(line_count(message), 1) << message;
  }
  std::filesystem::remove(err);
}

// A control character in what the user typed (a newline in a file name) is written as \xNN, so
// an error stays one line.
TEST(Cli, AnErrorNamingAPathWithANewlineIsOneLine) {
  for (const char* command : {"db show --db 'no\nsuch.db'", "verify --vectors 'no\nsuch.json' --scheme zigzag --ranks 2"}) {
    CliResult r = run_cli(command);
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.err;
    EXPECT_EQ(line_count(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("no\\x0asuch"), std::string::npos) << r.err;
  }
}

TEST(Cli, NoDoubledCpgenPrefix) {
  CliResult unknown = run_cli("frobnicate");
  EXPECT_EQ(unknown.err.find("cpgen: cpgen"), std::string::npos) << unknown.err;
  // The GPU backend's errors began with "cpgen verify", printed after "cpgen: ". Without a GPU
  // (or without NCCL) the backend answers with one of them.
  const std::string vectors = vectors_dir() + "/mqa_causal_hd96_s48.json";
  if (!std::filesystem::exists(vectors)) GTEST_SKIP() << "no vectors file at " << vectors;
  for (const char* extra : {"", " --transport nccl"}) {
    CliResult r = run_cli("verify --vectors " + vectors + " --scheme zigzag --ranks 2 --backend gpu" + extra);
    if (r.exit_code == 0) continue;  // a GPU ran it: no error line to check
    EXPECT_EQ(r.err.find("cpgen: cpgen"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.rfind("cpgen: ", 0), 0u) << r.err;
  }
}

}  // namespace
}  // namespace cpgen::testing

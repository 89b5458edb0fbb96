// cpgen: the command line. Exit codes: 0 success, 2 bad input (one line naming the field and
// what is allowed), 1 any other failure; a command may choose another (tune --require-gpu: 3).
#include <csignal>
#include <cstdio>
#include <iostream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cpgen/error.h"
#include "runtime/core/json_text.h"
#include "tools/cli/command.h"

namespace cpgen::cli {
namespace {

std::map<std::string, CommandSetup>& registry() {
  static std::map<std::string, CommandSetup> commands;
  return commands;
}

int g_exit_code = 0;

}  // namespace

// Messages are printed after "cpgen: "; one that names the program itself would read
// "cpgen: cpgen verify ...".
std::string without_program_name(const std::string& message) {
  for (const char* prefix : {"cpgen: ", "cpgen "}) {
    if (message.rfind(prefix, 0) == 0) return message.substr(std::string(prefix).size());
  }
  return message;
}

// The visible commands, for the line that answers an unknown one.
std::vector<const CLI::App*> all_commands(const CLI::App& app) {
  return app.get_subcommands(std::function<bool(const CLI::App*)>([](const CLI::App*) { return true; }));
}

bool is_command(const CLI::App& app, const std::string& name) {
  for (const CLI::App* sub : all_commands(app))
    if (sub->get_name() == name) return true;
  return false;
}

std::string command_list(const CLI::App& app) {
  std::string names;
  for (const CLI::App* sub : all_commands(app)) {
    if (sub->get_group().empty()) continue;  // hidden (internal) commands
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  return names;
}

namespace {

// The commands argv names before its first option ("db import"), each a subcommand of the last,
// and the deepest of them (the app itself when argv names none).
struct CommandPath {
  std::string words;
  const CLI::App* app;
};
CommandPath command_path(const CLI::App& app, int argc, char** argv) {
  CommandPath path{"", &app};
  for (int i = 1; i < argc && argv[i][0] != '-' && is_command(*path.app, argv[i]); ++i) {
    path.app = path.app->get_subcommand(argv[i]);
    path.words += (path.words.empty() ? "" : " ") + std::string(argv[i]);
  }
  return path;
}

// The visible options of a command, for a line that answers an unexpected one.
std::string option_list(const CLI::App& app) {
  std::string names;
  for (const CLI::Option* option : app.get_options()) {
    if (option->get_group().empty() || !option->nonpositional()) continue;  // hidden, or a positional
    const std::vector<std::string>& longs = option->get_lnames();
    const std::string name = !longs.empty() ? "--" + longs.front() : "-" + option->get_snames().front();
    if (name == "--help") continue;
    names += (names.empty() ? "" : ", ") + name;
  }
  return names;
}

}  // namespace

// What CLI11 refused, as one line that names the command and points at its own --help: an
// unexpected word lists the command's options, a missing subcommand lists the subcommands.
std::string parse_error_line(const CLI::App& app, int argc, char** argv, const CLI::ParseError& e) {
  const CommandPath path = command_path(app, argc, argv);
  const std::string help = " (see cpgen " + (path.words.empty() ? "" : path.words + " ") + "--help)";
  const std::string what = one_line(without_program_name(e.what()));
  // The words CLI11 could not place, as given and in their order (its message lists them last one
  // first, split on spaces); a word with a space in quotes.
  std::string unplaced;
  for (const std::string& word : app.remaining(true))
    unplaced += (unplaced.empty() ? "" : " ") + (word.find(' ') == std::string::npos ? word : "'" + word + "'");
  unplaced = one_line(unplaced);
  if (dynamic_cast<const CLI::ExtrasError*>(&e) && !path.words.empty()) {
    const std::string options = option_list(*path.app);
    return path.words + ": unknown option or extra argument: " + (unplaced.empty() ? what : unplaced) +
           (options.empty() ? "" : "; its options: " + options) + help;
  }
  // Its other refusals leave them unsaid ('db import --bogus' was only "file is required").
  const std::string unknown = unplaced.empty() ? "" : " (unknown: " + unplaced + ")";
  if (dynamic_cast<const CLI::RequiredError*>(&e) && what.find("subcommand is required") != std::string::npos &&
      !path.words.empty())
    return path.words + " needs a subcommand: " + command_list(*path.app) + unknown + help;
  return (path.words.empty() ? "" : path.words + ": ") + what + unknown + help;
}

CommandRegistrar::CommandRegistrar(std::string name, CommandSetup setup) {
  registry().emplace(std::move(name), std::move(setup));
}

void set_exit_code(int code) { g_exit_code = code; }
int exit_code() { return g_exit_code; }

}  // namespace cpgen::cli

int main(int argc, char** argv) {
  // Past a file-size limit (ulimit -f) a write then fails with EFBIG, which the store and the
  // output files report, instead of the signal killing the process with a temporary file left.
  std::signal(SIGXFSZ, SIG_IGN);
  // No option or value of cpgen may be empty: an empty one was taken as the option left out
  // (--only '' tuned both directions, --db '' opened the default database, -o '' wrote to the
  // standard output).
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    const size_t equals = word.find('=');
    const bool empty_value = word.rfind("--", 0) == 0 && equals != std::string::npos && equals + 1 == word.size();
    if (word.empty() || empty_value) {
      const std::string what = (word.empty() ? "argument " + std::to_string(i) : word) +
                               (i > 1 && word.empty() ? " (after " + std::string(argv[i - 1]) + ")" : std::string());
      std::cerr << "cpgen: " << cpgen::one_line(what) << " is empty; give a value, or leave the option out for its default\n";
      return 2;
    }
  }
  CLI::App app{"cpgen: code-generating kernel compiler and autotuner for context-parallel ring attention"};
  app.require_subcommand(1);
  app.set_version_flag("--version", CPGEN_CLI_VERSION);
  for (auto& [name, setup] : cpgen::cli::registry()) setup(app);
  // CLI11 answers a misspelt command with "A subcommand is required", which hides the typo; the
  // same for a command's own subcommands (db show, export, ...).
  if (argc > 1 && argv[1][0] != '-' && !cpgen::cli::is_command(app, argv[1])) {
    std::cerr << "cpgen: "
              << cpgen::one_line("unknown command '" + std::string(argv[1]) + "'; commands: " +
                                 cpgen::cli::command_list(app) + " (see cpgen --help)")
              << "\n";
    return 2;
  }
  // argv[1] a command (an option first, as in "cpgen --help plan", is CLI11's to answer).
  if (argc > 2 && argv[1][0] != '-' && argv[2][0] != '-') {
    const CLI::App* command = app.get_subcommand(argv[1]);
    if (!cpgen::cli::all_commands(*command).empty() && !cpgen::cli::is_command(*command, argv[2])) {
      std::cerr << "cpgen: "
                << cpgen::one_line("unknown " + std::string(argv[1]) + " subcommand '" + std::string(argv[2]) +
                                   "'; subcommands: " + cpgen::cli::command_list(*command) + " (see cpgen " +
                                   std::string(argv[1]) + " --help)")
                << "\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, the way every other bad input is reported.
    std::cerr << "cpgen: " << cpgen::cli::parse_error_line(app, argc, argv, e) << "\n";
    return 2;
  } catch (const cpgen::Error& e) {
    std::cout.flush();
    const std::string message = cpgen::cli::without_program_name(e.what());
    const bool bad_input = e.kind() == cpgen::ErrorKind::kBadInput;
    std::cerr << "cpgen: " << (bad_input ? cpgen::one_line(message) : message) << "\n";
    return bad_input ? 2 : 1;
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "cpgen: internal error: " << e.what() << "\n";
    return 1;
  }
  // Output that never reached its file (a full disk, a closed descriptor) is a failure: a
  // truncated `cpgen db export > cache.json` must not exit 0.
  // C stdio (printf) and iostreams each keep their own error state: both are checked.
  std::cout.flush();
  const bool stdio_failed = std::fflush(stdout) != 0 || std::ferror(stdout);
  if (!std::cout || stdio_failed) {
    std::cerr << "cpgen: cannot write the standard output (a full disk or a closed file?); what was printed is incomplete\n";
    return 1;
  }
  return cpgen::cli::exit_code();
}

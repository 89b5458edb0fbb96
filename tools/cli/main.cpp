// cpgen: the command line. Exit codes: 0 success, 2 bad input (one line naming the field and
// what is allowed), 1 any other failure; a command may choose another (tune --require-gpu: 3).
#include <cstdio>
#include <iostream>
#include <map>

#include "cpgen/error.h"
#include "tools/cli/command.h"

namespace cpgen::cli {
namespace {

std::map<std::string, CommandSetup>& registry() {
  static std::map<std::string, CommandSetup> commands;
  return commands;
}

int g_exit_code = 0;

}  // namespace

CommandRegistrar::CommandRegistrar(std::string name, CommandSetup setup) {
  registry().emplace(std::move(name), std::move(setup));
}

void set_exit_code(int code) { g_exit_code = code; }
int exit_code() { return g_exit_code; }

}  // namespace cpgen::cli

int main(int argc, char** argv) {
  CLI::App app{"cpgen: code-generating kernel compiler and autotuner for context-parallel ring attention"};
  app.require_subcommand(1);
  app.set_version_flag("--version", CPGEN_CLI_VERSION);
  for (auto& [name, setup] : cpgen::cli::registry()) setup(app);
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
    std::cerr << "cpgen: " << e.what() << " (see cpgen --help)\n";
    return 2;
  } catch (const cpgen::Error& e) {
    std::cout.flush();
    std::cerr << "cpgen: " << e.what() << "\n";
    return e.kind() == cpgen::ErrorKind::kBadInput ? 2 : 1;
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "cpgen: internal error: " << e.what() << "\n";
    return 1;
  }
  return cpgen::cli::exit_code();
}

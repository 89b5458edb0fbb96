// Each subcommand lives in its own file and registers itself here, so adding a command touches
// no other file. Commands report bad input by throwing cpgen::Error(kBadInput) (exit 2); any other
// cpgen::Error exits 1; a command that needs another exit code calls set_exit_code.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace cpgen::cli {

using CommandSetup = std::function<void(CLI::App& root)>;

struct CommandRegistrar {
  CommandRegistrar(std::string name, CommandSetup setup);
};

void set_exit_code(int code);
int exit_code();

}  // namespace cpgen::cli

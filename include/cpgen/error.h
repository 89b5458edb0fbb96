// cpgen's one error type. Library code throws cpgen::Error and never exits the process; the
// command line maps ErrorKind::kBadInput to exit code 2 and every other kind to 1.
#pragma once

#include <stdexcept>
#include <string>

#include "cpgen/cxx_abi.h"

namespace cpgen {

enum class ErrorKind {
  kBadInput,     // a value the user gave is not allowed (message names the field and what is)
  kInfeasible,   // a kernel config that cannot fit the target (shared memory, registers, tiles)
  kCompile,      // NVRTC rejected a generated kernel
  kCuda,         // a CUDA driver or runtime call failed
  kNccl,         // an NCCL call failed or a peer stalled
  kDatabase,     // SQLite failed
  kIo,           // a file could not be read or written
  kNoDevice,     // the operation needs a GPU and none is present
  kInternal,     // a bug in cpgen
};

const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Shorthand for the most common case: a bad user-supplied value.
[[noreturn]] inline void throw_bad_input(const std::string& message) {
  throw Error(ErrorKind::kBadInput, message);
}

}  // namespace cpgen

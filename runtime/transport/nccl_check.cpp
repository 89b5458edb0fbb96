#include "runtime/transport/nccl_check.h"

#include <string>

#include "cpgen/error.h"

namespace cpgen::nccl {

void raise(ncclResult_t status, const char* call, const char* file, int line, ncclComm_t comm) {
  std::string message = std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                        ": " + api().ncclGetErrorString(status);
  const char* last = api().ncclGetLastError(comm);
  if (last && *last) message += " (" + std::string(last) + ")";
  throw Error(ErrorKind::kNccl, message);
}

}  // namespace cpgen::nccl

// What the NCCL entry points do in a build without NCCL: say so, with what to do about it.
#ifndef CPGEN_HAVE_NCCL

#include "cpgen/error.h"
#include "cpgen/nccl_bootstrap.h"

namespace cpgen {
namespace {

[[noreturn]] void no_nccl(const char* what) {
  throw Error(ErrorKind::kNccl, std::string(what) +
                                    ": cpgen was built without NCCL; install NCCL (or the "
                                    "nvidia-nccl Python package) and rebuild");
}

}  // namespace

bool nccl_available() { return false; }
const NcclLibrary& nccl_library() { no_nccl("nccl_library"); }
NcclUniqueId nccl_unique_id() { no_nccl("nccl_unique_id"); }
void* nccl_comm_init(const NcclUniqueId&, int, int, int) { no_nccl("nccl_comm_init"); }
void nccl_comm_destroy(void* comm) {
  if (comm) no_nccl("nccl_comm_destroy");
}
void* nccl_comm_from_file(const NcclFileBootstrap&) { no_nccl("nccl_comm_from_file"); }

}  // namespace cpgen

#endif  // CPGEN_HAVE_NCCL

// A stand-in libnccl.so.2 for the NCCL loader tests (tests/runtime/transport/nccl_library_test.cpp):
// it reports the version it was built with (CPGEN_STUB_NCCL_VERSION) and fails every other call.
// Built twice: a version cpgen accepts and one older than it needs.
#include <nccl.h>

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  *version = CPGEN_STUB_NCCL_VERSION;
  return ncclSuccess;
}
const char* ncclGetErrorString(ncclResult_t) { return "the stub NCCL of cpgen's tests does nothing"; }
const char* ncclGetLastError(ncclComm_t) { return ""; }
ncclResult_t ncclGetUniqueId(ncclUniqueId*) { return ncclInvalidUsage; }
ncclResult_t ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int) { return ncclInvalidUsage; }
ncclResult_t ncclCommSplit(ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*) { return ncclInvalidUsage; }
ncclResult_t ncclCommDestroy(ncclComm_t) { return ncclInvalidUsage; }
ncclResult_t ncclCommAbort(ncclComm_t) { return ncclInvalidUsage; }
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t*) { return ncclInvalidUsage; }
ncclResult_t ncclCommCount(const ncclComm_t, int*) { return ncclInvalidUsage; }
ncclResult_t ncclCommCuDevice(const ncclComm_t, int*) { return ncclInvalidUsage; }
ncclResult_t ncclCommUserRank(const ncclComm_t, int*) { return ncclInvalidUsage; }
ncclResult_t ncclGroupStart() { return ncclInvalidUsage; }
ncclResult_t ncclGroupEnd() { return ncclInvalidUsage; }
ncclResult_t ncclSend(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return ncclInvalidUsage; }
ncclResult_t ncclRecv(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return ncclInvalidUsage; }
ncclResult_t ncclBroadcast(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclInvalidUsage;
}

}  // extern "C"

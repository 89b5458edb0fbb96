# Finds NCCL in the CUDA toolkit, in $NCCL_HOME or $CUDA_HOME, or in an installed nvidia-nccl
# Python package (the one PyTorch loads; the GPU machines may carry NCCL only there), in that
# order, and only then in the system's folders. Sets CPGEN_NCCL_FOUND, NCCL_INCLUDE_DIR,
# NCCL_LIBRARY, NCCL_LIBRARY_DIR. NCCL is optional: without it the NCCL transport is left out.
#
# One installation gives both files. Each folder is searched for either name of the library (the
# wheel has only libnccl.so.2) before the next folder (NAMES_PER_DIR), and nccl.h is then taken
# from beside that library only. Searching name by name, the first H100 build (2026-11-26) took
# the system's libnccl.so with the wheel's nccl.h, two different versions.
set(_nccl_hints ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR} $ENV{NCCL_HOME}
    $ENV{CUDA_HOME})
# CPGEN_NCCL_WHEEL_DIR: the nvidia-nccl package's folder; asked of Python unless given (empty: none).
if(NOT DEFINED CPGEN_NCCL_WHEEL_DIR)
  set(CPGEN_NCCL_WHEEL_DIR "")
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    # The wheel's nvidia/nccl has no __init__.py: a namespace package, whose __file__ is None, so
    # its folder is read from __path__.
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])"
      OUTPUT_VARIABLE CPGEN_NCCL_WHEEL_DIR OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
endif()
if(CPGEN_NCCL_WHEEL_DIR)
  list(APPEND _nccl_hints ${CPGEN_NCCL_WHEEL_DIR})
endif()
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_nccl_hints} PATH_SUFFIXES lib lib64)
if(NCCL_LIBRARY)
  get_filename_component(NCCL_LIBRARY_DIR ${NCCL_LIBRARY} DIRECTORY)
  # <prefix>/lib, <prefix>/lib64, or a multiarch <prefix>/lib/<triplet> (Debian, Ubuntu).
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${NCCL_LIBRARY_DIR}/.. ${NCCL_LIBRARY_DIR}/../.. PATH_SUFFIXES include
            NO_DEFAULT_PATH)
endif()
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  set(CPGEN_NCCL_FOUND TRUE)
  message(STATUS "NCCL: ${NCCL_LIBRARY} with ${NCCL_INCLUDE_DIR}/nccl.h")
elseif(NCCL_LIBRARY)
  set(CPGEN_NCCL_FOUND FALSE)
  message(STATUS "NCCL: ${NCCL_LIBRARY} has no nccl.h beside it (include/ one or two folders up): "
                 "the NCCL transport is left out")
else()
  set(CPGEN_NCCL_FOUND FALSE)
  message(STATUS "NCCL not found: the NCCL transport is left out")
endif()

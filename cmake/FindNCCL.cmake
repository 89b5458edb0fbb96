# Finds NCCL in the CUDA toolkit, in $NCCL_HOME, or in an installed nvidia-nccl Python package
# (the GPU machines carry NCCL only there). Sets CPGEN_NCCL_FOUND, NCCL_INCLUDE_DIR, NCCL_LIBRARY,
# NCCL_LIBRARY_DIR. NCCL is optional: without it the NCCL transport is left out of the build.
set(_nccl_hints ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR} $ENV{NCCL_HOME} $ENV{CUDA_HOME})
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  # The wheel's nvidia/nccl has no __init__.py: a namespace package, whose __file__ is None, so
  # its folder is read from __path__.
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c "import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])"
    OUTPUT_VARIABLE _nccl_py OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_nccl_py)
    list(APPEND _nccl_hints ${_nccl_py})
  endif()
endif()
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${_nccl_hints} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR} ${_nccl_hints}
             PATH_SUFFIXES lib lib64)
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  set(CPGEN_NCCL_FOUND TRUE)
  get_filename_component(NCCL_LIBRARY_DIR ${NCCL_LIBRARY} DIRECTORY)
  message(STATUS "NCCL: ${NCCL_LIBRARY}")
else()
  set(CPGEN_NCCL_FOUND FALSE)
  message(STATUS "NCCL not found: the NCCL transport is left out")
endif()

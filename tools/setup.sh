# Sourced by run.sh and test.sh: installs missing Debian packages and builds into build/.
# Everything the build and the tests need is installed here (python3-numpy: the vectors generator
# tools/vectors/make_vectors.py, which a test reruns), so a fresh clone goes green with these
# scripts alone.
set -euo pipefail
CPGEN_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${CPGEN_BUILD_DIR:-$CPGEN_ROOT/build}

cpgen_find_cuda() {
  if ! command -v nvcc >/dev/null 2>&1; then
    for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
      [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break
    done
  fi
  if ! command -v nvcc >/dev/null 2>&1; then
    echo "cpgen: the CUDA toolkit (nvcc, NVRTC, NCCL) was not found; install CUDA 12 or 13 and put nvcc on PATH" >&2
    exit 1
  fi
}

cpgen_install_packages() {
  local need=()
  local pkg
  for pkg in cmake g++ make libsqlite3-dev nlohmann-json3-dev libgtest-dev libcli11-dev python3 python3-numpy; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
  done
  [ ${#need[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "cpgen: missing Debian packages: ${need[*]} (run as root or install them)" >&2
    exit 1
  fi
  echo "cpgen: installing ${need[*]}" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
}

# A caller may set the array CPGEN_CONFIGURE_ARGS before sourcing this file (tools/sanitize-cpu.sh
# does): then the build folder is configured with them every time, not only the first. (Not
# CPGEN_CMAKE_ARGS: that is a shell-quoted string in the environment, the configure hints
# tools/gpu-check.sh hands the clone test; as an array here it would reach cmake as one argument.)
cpgen_build() {
  local jobs
  jobs=$(nproc 2>/dev/null || echo 2)
  if [ ! -f "$BUILD_DIR/CMakeCache.txt" ] || [ -n "${CPGEN_CONFIGURE_ARGS+set}" ]; then
    cmake -S "$CPGEN_ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${CPGEN_CONFIGURE_ARGS[@]+"${CPGEN_CONFIGURE_ARGS[@]}"} >&2
  fi
  cmake --build "$BUILD_DIR" -j "$jobs" >&2
}

# cuobjdump and nvdisasm read the SASS of compiled kernels (a test checks the wgmma kernels for
# HGMMA and UTMALDG). Some CUDA installs lack them; NVIDIA ships both on PyPI, so they are fetched
# into the build folder when missing. Optional: a failure prints one line and the build goes on.
cpgen_fetch_sass_tools() {
  local dir="$BUILD_DIR/cuda-tools" major
  if command -v cuobjdump >/dev/null 2>&1 || [ -x "$(dirname "$(command -v nvcc)")/cuobjdump" ] ||
     { [ -n "$(find "$dir" -name cuobjdump -type f 2>/dev/null | head -n 1)" ] &&
       [ -n "$(find "$dir" -name nvdisasm -type f 2>/dev/null | head -n 1)" ]; }; then
    return 0
  fi
  major=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
  # Bounded: an unreachable index must not hold up the build (pip would retry for minutes).
  if ! PIP_BREAK_SYSTEM_PACKAGES=1 timeout 180 python3 -m pip install --quiet --disable-pip-version-check \
       --timeout 20 --retries 1 --no-deps --target "$dir" "nvidia-cuda-cuobjdump==${major}.*" "nvidia-cuda-nvdisasm==${major}.*" >/dev/null 2>&1; then
    echo "cpgen: cuobjdump/nvdisasm not found and not fetched from PyPI (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm); the SASS test will skip" >&2
  fi
}

cpgen_find_cuda
if command -v dpkg-query >/dev/null 2>&1; then cpgen_install_packages; fi
cpgen_build
cpgen_fetch_sass_tools

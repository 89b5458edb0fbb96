#include "cache/environment.h"

#include <map>
#include <mutex>

#include "cache/json_integer.h"
#include "cpgen/error.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/jit/jit.h"
#include "runtime/cuda/module.h"

namespace cpgen {
namespace {

std::string version_text(int encoded) {
  // The driver reports 1000 * major + 10 * minor.
  return std::to_string(encoded / 1000) + "." + std::to_string((encoded % 1000) / 10);
}

std::string json_string(const nlohmann::json& j, const char* field) {
  if (!j.contains(field) || !j[field].is_string()) {
    throw_bad_input(std::string("environment field '") + field + "' is missing or not a string");
  }
  return j[field].get<std::string>();
}

}  // namespace

bool Environment::matches(const Environment& o) const { return template_hash == o.template_hash && same_setup(o); }

bool Environment::same_setup(const Environment& o) const {
  return nvrtc_version == o.nvrtc_version && driver_version == o.driver_version && gpu_name == o.gpu_name &&
         sm_count == o.sm_count;
}

Environment Environment::for_kernel(const std::string& uri) const {
  if (!per_kernel) return *this;
  static std::mutex mutex;
  static std::map<std::string, std::string> hashes;
  Environment e = *this;
  e.per_kernel = false;
  std::lock_guard lock(mutex);
  auto it = hashes.find(uri);
  if (it == hashes.end()) {
    std::string hash;
    try {
      hash = kernel_code_hash(KernelSpec::parse(uri));
    } catch (const Error&) {
      hash = "no kernel " + uri;
    }
    it = hashes.emplace(uri, std::move(hash)).first;
  }
  e.template_hash = it->second;
  return e;
}

std::string Environment::key() const { return "template " + template_hash + ", " + setup_key(); }

std::string Environment::setup_key() const {
  return "NVRTC " + nvrtc_version + ", driver " + driver_version + ", " + gpu_name + " x" + std::to_string(sm_count) + " SMs";
}

nlohmann::json Environment::to_json() const {
  return {{"cpgen_version", cpgen_version}, {"template_hash", template_hash},
          {"nvrtc_version", nvrtc_version}, {"driver_version", driver_version},
          {"gpu_name", gpu_name},           {"sm_count", sm_count}};
}

Environment Environment::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw_bad_input("environment must be a JSON object");
  Environment e;
  e.cpgen_version = json_string(j, "cpgen_version");
  e.template_hash = json_string(j, "template_hash");
  e.nvrtc_version = json_string(j, "nvrtc_version");
  e.driver_version = json_string(j, "driver_version");
  e.gpu_name = json_string(j, "gpu_name");
  // Exactly, not modulo 2^32 (4294967428 read as an H200's 132); 0 is a machine without a GPU.
  const std::optional<int> sm_count = j.contains("sm_count") ? exact_integer<int>(j["sm_count"]) : std::nullopt;
  if (!sm_count || *sm_count < 0)
    throw_bad_input("environment field 'sm_count' must be an integer 0.." + std::to_string(INT32_MAX) + ", got " +
                    (j.contains("sm_count") ? j["sm_count"].dump() : std::string("nothing")));
  e.sm_count = *sm_count;
  return e;
}

Environment current_environment(int device) {
  Environment e;
  e.cpgen_version = CPGEN_VERSION;
  e.template_hash = "per-kernel";  // no one kernel's: for_kernel gives each its own
  e.per_kernel = true;
  e.nvrtc_version = nvrtc_version();
  e.driver_version = "none";
  e.gpu_name = "none";
  if (const cu::DriverApi* api = cu::try_driver()) {
    int version = 0;
    CPGEN_CU_CHECK(api->cuDriverGetVersion(&version));
    e.driver_version = version_text(version);
    DeviceClass dc = current_device_class("sm_90", device);
    e.gpu_name = dc.gpu_name;
    e.sm_count = dc.sm_count;
  }
  return e;
}

DeviceClass current_device_class(const std::string& fallback_arch, int device) {
  DeviceClass dc;
  dc.arch = fallback_arch;
  const cu::DriverApi* api = cu::try_driver();
  if (!api) return dc;
  CUdevice dev = 0;
  CPGEN_CU_CHECK(api->cuDeviceGet(&dev, device));
  char name[256] = {};
  CPGEN_CU_CHECK(api->cuDeviceGetName(name, sizeof name, dev));
  dc.gpu_name = name;
  CPGEN_CU_CHECK(api->cuDeviceGetAttribute(&dc.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  dc.arch = device_arch(device);  // the JIT's choice, so that workloads and cubins agree
  return dc;
}

DeviceClass device_class_for(const std::string& arch, int device) {
  DeviceClass dc = current_device_class(arch.empty() ? kFallbackArch : arch, device);
  if (!arch.empty()) dc.arch = arch;
  return dc;
}

}  // namespace cpgen

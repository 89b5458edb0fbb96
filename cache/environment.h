// The environment a record was made in. A timing is only trusted where the kernel code (template
// hash), the compiler (NVRTC), the driver and the device (name, SM count) are all the same;
// cpgen_version is kept for provenance but not compared, since the template hash already changes
// whenever the generated kernels do.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace cpgen {

struct Environment {
  std::string cpgen_version;
  std::string template_hash;
  std::string nvrtc_version;   // "13.0"
  std::string driver_version;  // "13.0", or "none" without a driver
  std::string gpu_name;        // "NVIDIA H200", or "none" without a device
  int sm_count = 0;

  // True when a record made in `other` may be trusted here.
  bool matches(const Environment& other) const;
  // The compared fields in one line, e.g. "tmpl 1f2e... nvrtc 13.0 driver 13.0 NVIDIA H200 x132".
  std::string key() const;
  nlohmann::json to_json() const;
  static Environment from_json(const nlohmann::json& j);  // throws kBadInput naming the field
  bool operator==(const Environment&) const = default;
};

// The device class a workload is tuned for.
struct DeviceClass {
  std::string gpu_name = "none";
  std::string arch = "sm_90";
  int sm_count = 0;
};

// This process's environment, on device `device` when a GPU is present.
Environment current_environment(int device = 0);
// The device class of device `device`; without a GPU: gpu "none", sm_count 0 and `fallback_arch`.
DeviceClass current_device_class(const std::string& fallback_arch, int device = 0);
// The device class that tune, explain and the runtime key workloads by, so that all three agree:
// device `device`'s, with its arch replaced by `arch` when one is given; without a GPU, gpu "none"
// and `arch`, else kFallbackArch.
inline constexpr const char* kFallbackArch = "sm_90a";
DeviceClass device_class_for(const std::string& arch, int device = 0);

}  // namespace cpgen

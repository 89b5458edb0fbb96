// The environment a record was made in. A timing is only trusted where the kernel's code, the
// compiler (NVRTC), the driver and the device (name, SM count) are all the same; cpgen_version is
// kept for provenance but not compared, since the code hash already changes whenever the kernel
// does. A record's template_hash is the hash of its own kernel's code (jit.h kernel_code_hash:
// the rendered source and the templates it includes), so a template edit retires the records of
// the kernels it changes and keeps the others (a backward fix keeps every forward timing).
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
  // This build's own environment (current_environment): its template_hash names no kernel's code
  // ("per-kernel"); for_kernel gives each kernel's. Not stored with records.
  bool per_kernel = false;

  // True when a record made in `other` may be trusted here (per_kernel is not compared: compare
  // a record with for_kernel of its kernel).
  bool matches(const Environment& other) const;
  // The same NVRTC, driver, GPU and SM count: matches but for the code hash.
  bool same_setup(const Environment& other) const;
  // The environment a record of kernel `uri` made here has: per_kernel, template_hash becomes
  // that kernel's code hash (a URI that does not parse gets one no record has); otherwise (a
  // record's own or a test's fixed environment) this one unchanged.
  Environment for_kernel(const std::string& uri) const;
  // The compared fields in one line: "template <code hash>, " then setup_key().
  std::string key() const;
  // The fields but the code hash, e.g. "NVRTC 13.0, driver 13.0, NVIDIA H200 x132 SMs".
  std::string setup_key() const;
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

#include "tools/cli/verify_backend.h"

#include <map>

namespace cpgen::cli {
namespace {

std::map<std::string, VerifyBackend>& backends() {
  static std::map<std::string, VerifyBackend> registry;
  return registry;
}

}  // namespace

VerifyBackendRegistrar::VerifyBackendRegistrar(VerifyBackend backend) {
  std::string name = backend.name;
  backends().emplace(std::move(name), std::move(backend));
}

const VerifyBackend* find_verify_backend(const std::string& name) {
  auto it = backends().find(name);
  return it == backends().end() ? nullptr : &it->second;
}

std::vector<std::string> verify_backend_names() {
  std::vector<std::string> names;
  for (const auto& [name, backend] : backends()) names.push_back(name);
  return names;
}

VerifyCheck relative_check(const std::string& tensor, const std::vector<float>& actual,
                           const std::vector<double>& expected, double limit) {
  return {tensor, "relative Frobenius", relative_error(actual, expected), limit};
}

}  // namespace cpgen::cli

#include "generator/template_files.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "cpgen/error.h"

namespace cpgen {
namespace {

namespace fs = std::filesystem;

// An override's files: the strings own the bytes the EmbeddedTemplate views point into.
struct Loaded {
  std::string dir;
  std::vector<std::string> names, contents;
  std::vector<EmbeddedTemplate> views;
};

std::unique_ptr<Loaded> load(const std::string& dir) {
  auto out = std::make_unique<Loaded>();
  out->dir = dir;
  const std::string what = "CPGEN_TEMPLATES_DIR=" + dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error(ErrorKind::kBadInput, what + " is not a directory (unset it to use the built-in templates)");
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".cuh" && e.is_regular_file(ec)) files.push_back(e.path());
  if (ec) throw Error(ErrorKind::kBadInput, what + " cannot be listed: " + ec.message());
  if (files.empty()) throw Error(ErrorKind::kBadInput, what + " holds no .cuh template files");
  std::sort(files.begin(), files.end());  // the embedded set's order: by name
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in) throw Error(ErrorKind::kBadInput, what + ": cannot read " + f.filename().string());
    out->names.push_back("cpgen/" + f.filename().string());
    out->contents.push_back(text.str());
  }
  for (size_t i = 0; i < files.size(); ++i)
    out->views.push_back({out->names[i].c_str(), out->contents[i].c_str(), out->contents[i].size()});
  return out;
}

const Loaded* override_files() {
  static const std::unique_ptr<Loaded> loaded = []() -> std::unique_ptr<Loaded> {
    const char* dir = std::getenv("CPGEN_TEMPLATES_DIR");
    if (!dir || !*dir) return nullptr;
    return load(dir);
  }();
  return loaded.get();
}

}  // namespace

std::span<const EmbeddedTemplate> template_files() {
  if (const Loaded* o = override_files()) return o->views;
  return embedded_templates();
}

const std::string& template_files_dir() {
  static const std::string none;
  const Loaded* o = override_files();
  return o ? o->dir : none;
}

}  // namespace cpgen

#include "generator/template_files.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <vector>

#include "cpgen/error.h"
#include "runtime/core/text_file.h"

namespace cpgen {
namespace {

namespace fs = std::filesystem;

// Far more than any template (the largest is about 40 KB): a file longer than this is not one.
constexpr size_t kMaxTemplateBytes = size_t{16} << 20;

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
    // Judged on the opened file, as the listing's kind may be another by the time it is read (a
    // FIFO there would hang the read).
    out->contents.push_back(read_text_file(f.string(), what + ": " + f.filename().string(), "a template",
                                           kMaxTemplateBytes, FileKinds::kRegularOnly));
    out->names.push_back("cpgen/" + f.filename().string());
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

std::vector<std::string_view> include_names(std::string_view text) {
  std::vector<std::string_view> names;
  for (size_t line = 0; line < text.size();) {
    size_t end = text.find('\n', line);
    if (end == std::string_view::npos) end = text.size();
    std::string_view l = text.substr(line, end - line);
    line = end + 1;
    const size_t first = l.find_first_not_of(" \t");
    if (first == std::string_view::npos || l[first] != '#') continue;
    l.remove_prefix(first + 1);
    l.remove_prefix(std::min(l.size(), l.find_first_not_of(" \t")));
    if (!l.starts_with("include")) continue;
    // "name" or <name>: NVRTC finds a template under either form among the program's headers.
    const size_t open = l.find_first_of("\"<", 7);
    const size_t close = open == std::string_view::npos ? open : l.find(l[open] == '"' ? '"' : '>', open + 1);
    if (close != std::string_view::npos) names.push_back(l.substr(open + 1, close - open - 1));
  }
  return names;
}

std::vector<EmbeddedTemplate> included_templates(std::string_view source, std::span<const EmbeddedTemplate> templates) {
  std::vector<bool> taken(templates.size(), false);
  std::vector<std::string_view> pending{source};
  while (!pending.empty()) {
    const std::string_view text = pending.back();
    pending.pop_back();
    for (std::string_view name : include_names(text)) {
      for (size_t i = 0; i < templates.size(); ++i) {
        if (taken[i] || name != templates[i].name) continue;
        taken[i] = true;
        pending.emplace_back(templates[i].contents, templates[i].size);
      }
    }
  }
  std::vector<EmbeddedTemplate> out;
  for (size_t i = 0; i < templates.size(); ++i)
    if (taken[i]) out.push_back(templates[i]);
  return out;
}

const std::string& template_files_dir() {
  static const std::string none;
  const Loaded* o = override_files();
  return o ? o->dir : none;
}

}  // namespace cpgen

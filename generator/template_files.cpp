#include "generator/template_files.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
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

namespace {

// The name of one line's `#include "NAME"` or `#include <NAME>`, or nothing.
std::optional<std::string_view> include_name_of_line(std::string_view l) {
  const size_t first = l.find_first_not_of(" \t");
  if (first == std::string_view::npos || l[first] != '#') return std::nullopt;
  l.remove_prefix(first + 1);
  l.remove_prefix(std::min(l.size(), l.find_first_not_of(" \t")));
  if (!l.starts_with("include")) return std::nullopt;
  // "name" or <name>: NVRTC finds a template under either form among the program's headers.
  const size_t open = l.find_first_of("\"<", 7);
  const size_t close = open == std::string_view::npos ? open : l.find(l[open] == '"' ? '"' : '>', open + 1);
  if (close == std::string_view::npos) return std::nullopt;
  return l.substr(open + 1, close - open - 1);
}

// Calls visit(line) for each line of text, without its newline.
template <typename Visit>
void for_each_line(std::string_view text, Visit visit) {
  for (size_t line = 0; line < text.size();) {
    size_t end = text.find('\n', line);
    if (end == std::string_view::npos) end = text.size();
    visit(text.substr(line, end - line));
    line = end + 1;
  }
}

bool is_pragma_once(std::string_view l) {
  const size_t first = l.find_first_not_of(" \t");
  return first != std::string_view::npos && l.substr(first).starts_with("#pragma once");
}

void flatten_into(std::string_view text, std::span<const EmbeddedTemplate> templates, std::vector<std::string_view>& stack,
                  std::string& out) {
  for_each_line(text, [&](std::string_view line) {
    const std::optional<std::string_view> name = include_name_of_line(line);
    const EmbeddedTemplate* t = nullptr;
    if (name)
      for (const EmbeddedTemplate& candidate : templates)
        if (*name == candidate.name) t = &candidate;
    if (!t) {
      if (!(stack.size() > 0 && is_pragma_once(line))) (out += line) += '\n';
      return;
    }
    // A template being expanded that includes itself back: #pragma once would read nothing.
    if (std::find(stack.begin(), stack.end(), *name) != stack.end()) return;
    std::string guard = "CPGEN_FLAT_";
    for (char c : *name) guard += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::toupper(c)) : '_';
    out += "// ---- " + std::string(*name) + " ----\n#ifndef " + guard + "\n#define " + guard + "\n";
    stack.push_back(*name);
    flatten_into(std::string_view(t->contents, t->size), templates, stack, out);
    stack.pop_back();
    out += "#endif  // " + guard + "\n";
  });
}

}  // namespace

std::vector<std::string_view> include_names(std::string_view text) {
  std::vector<std::string_view> names;
  for_each_line(text, [&](std::string_view l) {
    if (const auto name = include_name_of_line(l)) names.push_back(*name);
  });
  return names;
}

std::string flatten_includes(std::string_view source, std::span<const EmbeddedTemplate> templates) {
  std::string out;
  std::vector<std::string_view> stack;
  flatten_into(source, templates, stack, out);
  return out;
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

// Parsing the JSON texts a user hands cpgen (shapes files and --shape texts, vectors files,
// pretuned caches, database imports) one way, so that each refuses the same things in the same
// words: text that is not one JSON document (with the line and column where the parser stopped),
// a key named twice in one object (nlohmann would keep the last one silently), and nesting
// deeper than the caller allows (with the path of keys where it happens). Messages are one line
// whatever the text holds.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

#include "runtime/core/text_file.h"

namespace cpgen {

// `text` for a one-line message: control bytes, non-ASCII bytes (which may not even be UTF-8 in
// a path), backslashes and quotes escaped, cut after max_chars with "...".
std::string printable(std::string_view text, size_t max_chars = 60);
std::string in_quotes(std::string_view text, size_t max_chars = 60);

// A whole message as one line: control bytes (a newline in a file name or a quoted value) written
// as \xNN, everything else kept; past max_chars cut, with "... (N characters in all)" (a value
// quoted from a file, 200 MB, made a 200 MB line). The command line's bad-input lines and every
// warning (cache/database.h, warn) pass through it.
std::string one_line(std::string_view message, size_t max_chars = 2000);

// The document in `text`. Throws Error (kBadInput) "<source>: <reason>": "empty; expected JSON
// text" for nothing but white space, "not valid JSON at
// line L, column C: <parser's reason>" (with a hint where the text ends early), "<path>: field
// \"k\" appears twice; each field may be given once", or "JSON nested deeper than <max_depth>
// levels at <path>" followed by "; <depth_hint>" when one is given. The caller checks for NUL
// bytes first (runtime/core/text_file.h, refuse_nul_byte): the parser takes one for the end.
nlohmann::json parse_json_text(const std::string& text, const std::string& source, int max_depth,
                               std::string_view depth_hint = {});

// The document in the file at `path`: read_text_file's refusals (runtime/core/text_file.h, with
// `label` and `kind`), a NUL byte, then parse_json_text's with `label` as the source.
nlohmann::json read_json_file(const std::string& path, const std::string& label, std::string_view kind,
                              size_t max_bytes, int max_depth, FileKinds kinds = FileKinds::kAny);

// The depth the readers allow: far more than any of cpgen's files needs (a shapes file 3, a
// cache 4), little enough that no parse or destruction of the document nests too deep.
inline constexpr int kMaxJsonDepth = 32;

}  // namespace cpgen

#include "runtime/core/json_text.h"

#include <cstdio>

#include <set>
#include <vector>

#include "cpgen/error.h"
#include "runtime/core/text_file.h"
#include "runtime/core/text_position.h"

namespace cpgen {

std::string printable(std::string_view text, size_t max_chars) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (out.size() >= max_chars) {
      out += "...";
      break;
    }
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte >= 0x20 && byte < 0x7f && byte != '\\' && byte != '"') {
      out += static_cast<char>(byte);
    } else if (byte == '\\' || byte == '"') {
      out += '\\';
      out += static_cast<char>(byte);
    } else {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    }
  }
  return out;
}

std::string one_line(std::string_view message, size_t max_chars) {
  std::string out;
  for (const char c : message) {
    if (out.size() >= max_chars) {
      out += "... (" + std::to_string(message.size()) + " characters in all)";
      break;
    }
    if (static_cast<unsigned char>(c) >= 0x20) {
      out += c;
      continue;
    }
    char escaped[8];
    std::snprintf(escaped, sizeof escaped, "\\x%02x", static_cast<unsigned char>(c));
    out += escaped;
  }
  return out;
}

std::string in_quotes(std::string_view text, size_t max_chars) { return "\"" + printable(text, max_chars) + "\""; }

namespace {

using Json = nlohmann::json;

// Bounds nesting and refuses duplicate keys while the text is parsed (each key is seen before the
// value that would replace an earlier one), naming where the problem sits.
class StructureGuard {
 public:
  StructureGuard(const std::string& source, int max_depth, std::string_view depth_hint)
      : source_(source), max_depth_(max_depth), depth_hint_(depth_hint) {}

  void open(bool is_object) {
    count_element();
    if (frames_.size() >= static_cast<size_t>(max_depth_)) {
      throw_bad_input(source_ + ": JSON nested deeper than " + std::to_string(max_depth_) + " levels at " + path(true) +
                      (depth_hint_.empty() ? "" : "; " + std::string(depth_hint_)));
    }
    frames_.push_back(Frame{is_object, {}, {}, 0});
  }
  void close() {
    if (!frames_.empty()) frames_.pop_back();
  }
  void key(const std::string& key) {
    Frame& frame = frames_.back();
    if (!frame.keys.insert(key).second) {
      throw_bad_input(source_ + ": " + path() + ": field " + in_quotes(key, 40) +
                      " appears twice; each field may be given once");
    }
    frame.current_key = key;
  }
  void value() { count_element(); }

 private:
  struct Frame {
    bool is_object;
    std::set<std::string> keys;
    std::string current_key;
    int64_t elements;
  };

  void count_element() {
    if (!frames_.empty() && !frames_.back().is_object) ++frames_.back().elements;
  }

  // A readable location such as shapes[2], built from the open containers. The innermost
  // object's last key names where a value opens (a container too deep); for a key it names only
  // the key before it, so it is left out there.
  std::string path(bool with_last_key = false) const {
    std::string out;
    for (size_t i = 0; i < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      if (f.is_object) {
        if ((with_last_key || i + 1 < frames_.size()) && !f.current_key.empty())
          out += (out.empty() ? "" : ".") + printable(f.current_key, 30);
      } else if (f.elements > 0) {
        out += "[" + std::to_string(f.elements - 1) + "]";
      }
    }
    return out.empty() ? "the top level" : out;
  }

  std::string source_;
  int max_depth_;
  std::string_view depth_hint_;
  std::vector<Frame> frames_;
};

// Builds the document from nlohmann's SAX events, with the guard's checks on the way. (nlohmann's
// own parser with a callback scans the enclosing container every time an object ends: an array
// of 400,000 objects took 27 s to read, a pretuned cache of 1.5 million entries minutes.)
class GuardedBuilder final : public nlohmann::json_sax<Json> {
 public:
  explicit GuardedBuilder(StructureGuard& guard) : guard_(guard) {}
  Json take() { return std::move(root_); }

  bool null() override { return add(nullptr); }
  bool boolean(bool value) override { return add(value); }
  bool number_integer(number_integer_t value) override { return add(value); }
  bool number_unsigned(number_unsigned_t value) override { return add(value); }
  bool number_float(number_float_t value, const string_t&) override { return add(value); }
  bool string(string_t& value) override { return add(std::move(value)); }
  bool binary(binary_t& value) override { return add(Json::binary(std::move(value))); }
  bool start_object(std::size_t) override { return open(true); }
  bool key(string_t& key) override {
    guard_.key(key);
    slot_ = &(*open_.back())[key];
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    // Thrown as the type the parser made (parse_error, or out_of_range for a number too large).
    if (const auto* parse = dynamic_cast<const Json::parse_error*>(&e)) throw *parse;
    if (const auto* range = dynamic_cast<const Json::out_of_range*>(&e)) throw *range;
    throw Error(ErrorKind::kInternal, e.what());
  }

 private:
  // `value` where the parser is: the document itself, the next element of the innermost array,
  // or the value of the innermost object's last key.
  Json* place(Json value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    if (open_.back()->is_array()) {
      open_.back()->push_back(std::move(value));
      return &open_.back()->back();
    }
    *slot_ = std::move(value);
    return slot_;
  }
  bool add(Json value) {
    guard_.value();
    place(std::move(value));
    return true;
  }
  bool open(bool is_object) {
    guard_.open(is_object);
    open_.push_back(place(is_object ? Json::object() : Json::array()));
    return true;
  }
  bool close() {
    guard_.close();
    open_.pop_back();
    return true;
  }

  StructureGuard& guard_;
  Json root_;
  std::vector<Json*> open_;  // the containers being filled, outermost first
  Json* slot_ = nullptr;     // the value of the innermost object's last key
};

// nlohmann's message after its own "[json.exception...] parse error at line L, column C: "
// prefix (its "last read: '...'" shows the bytes before the stop, a newline as <U+000A>).
std::string parse_reason(const std::string& what) {
  size_t start = what.find("column ");
  start = start == std::string::npos ? std::string::npos : what.find(": ", start);
  std::string reason = start == std::string::npos ? what : what.substr(start + 2);
  if (reason.rfind("[json.exception.", 0) == 0) {
    const size_t close = reason.find("] ");
    if (close != std::string::npos) reason = reason.substr(close + 2);
  }
  return printable(reason, 200);
}

}  // namespace

Json parse_json_text(const std::string& text, const std::string& source, int max_depth, std::string_view depth_hint) {
  if (text.find_first_not_of(" \t\n\r") == std::string::npos) throw_bad_input(source + ": empty; expected JSON text");
  StructureGuard guard(source, max_depth, depth_hint);
  GuardedBuilder builder(guard);
  try {
    Json::sax_parse(text, &builder);
    return builder.take();
  } catch (const Json::parse_error& e) {
    // e.byte is the 1-based count of bytes read when the parser gave up.
    const size_t offset = e.byte == 0 ? 0 : e.byte - 1;
    const bool at_end = offset >= text.size();
    throw_bad_input(source + ": not valid JSON at " + line_column(text, offset) +
                    (at_end ? " (the text ends early; is it truncated?)" : "") + ": " + parse_reason(e.what()));
  } catch (const Json::exception& e) {
    // out_of_range.406, "number overflow parsing '1e400'", carries no position: find the literal.
    const std::string what = e.what();
    std::string where;
    const size_t open = what.find("parsing '");
    const size_t close = open == std::string::npos ? open : what.find('\'', open + 9);
    if (close != std::string::npos) {
      const size_t at = text.find(what.substr(open + 9, close - open - 9));
      if (at != std::string::npos) where = " at " + line_column(text, at);
    }
    throw_bad_input(source + ": not valid JSON" + where + ": " + parse_reason(what));
  }
}

Json read_json_file(const std::string& path, const std::string& label, std::string_view kind, size_t max_bytes,
                    int max_depth, FileKinds kinds) {
  const std::string text = read_text_file(path, label, kind, max_bytes, kinds);
  refuse_nul_byte(text, label, kind);
  return parse_json_text(text, label, max_depth);
}

}  // namespace cpgen

// SHA-256 of byte strings, used for compiled-kernel store keys: a key must change whenever the
// generated source, a template, an option or the compiler changes, and two different inputs must
// never share a cubin, so a cryptographic digest is used rather than a fast 64-bit hash.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cpgen {

class Sha256 {
 public:
  Sha256();
  Sha256& update(std::string_view bytes);
  // Adds the length before the bytes, so that ("ab","c") and ("a","bc") hash differently.
  Sha256& update_field(std::string_view bytes);
  std::array<uint8_t, 32> digest();  // finalizes; the object must not be updated afterwards
  std::string hex_digest();

 private:
  void compress(const uint8_t* block);
  std::array<uint32_t, 8> state_;
  uint8_t pending_[64];
  size_t pending_size_ = 0;
  uint64_t total_bytes_ = 0;
};

std::string sha256_hex(std::string_view bytes);

}  // namespace cpgen

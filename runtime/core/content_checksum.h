// A checksum that detects damage (a flipped bit, a truncation), not tampering: FNV-1a's
// multiply-xor step applied to 8-byte words (then to the tail bytes), about 8x faster than per
// byte, so an 80 KB cubin checks in ~10 us of a stored kernel's under-1-ms load. Chained: pass the
// checksum of the bytes before as `previous` to cover two pieces as one.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace cpgen {

inline uint64_t content_checksum(std::string_view bytes, uint64_t previous = 1469598103934665603ull) {
  constexpr uint64_t kPrime = 1099511628211ull;
  uint64_t h = previous ^ bytes.size();
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes.data() + i, 8);
    h = (h ^ word) * kPrime;
    h ^= h >> 29;  // fold high bits down: the multiply alone never moves them to lower bits
  }
  for (; i < bytes.size(); ++i) h = (h ^ static_cast<unsigned char>(bytes[i])) * kPrime;
  return h;
}

}  // namespace cpgen

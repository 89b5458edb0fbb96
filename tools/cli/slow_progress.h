// Progress on stderr for work over many items (shapes of a large file) that stays silent when the
// whole job finishes within a second, and otherwise prints "<what>: i/n" about once a second
// (rewriting one line on a terminal), and a last line when it ends.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace cpgen::cli {

class SlowProgress {
 public:
  SlowProgress(std::string what, size_t total)
      : what_(std::move(what)), total_(total), tty_(::isatty(2) != 0), start_(Clock::now()), next_(start_ + kFirst) {}
  ~SlowProgress() {
    if (!printed_) return;
    std::fprintf(stderr, "%s%s: %zu/%zu done\n", tty_ ? "\r" : "", what_.c_str(), done_, total_);
  }
  SlowProgress(const SlowProgress&) = delete;
  SlowProgress& operator=(const SlowProgress&) = delete;

  void advance(size_t n = 1) {
    done_ += n;
    // Reading the clock costs ~20 ns; every 256 items keeps it far below the work per item.
    if ((done_ & 255) != 0 && done_ != total_) return;
    const Clock::time_point now = Clock::now();
    if (now < next_) return;
    next_ = now + kEvery;
    printed_ = true;
    std::fprintf(stderr, "%s%s: %zu/%zu%s", tty_ ? "\r" : "", what_.c_str(), done_, total_, tty_ ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kFirst{1000};
  static constexpr std::chrono::milliseconds kEvery{1000};
  std::string what_;
  size_t total_;
  size_t done_ = 0;
  bool tty_;
  bool printed_ = false;
  Clock::time_point start_, next_;
};

}  // namespace cpgen::cli

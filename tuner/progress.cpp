#include "tuner/progress.h"

#include <unistd.h>

#include <cstdio>

namespace cpgen {

Progress::Progress(std::string label, size_t total, bool quiet)
    : label_(std::move(label)), total_(total), quiet_(quiet || total == 0), tty_(::isatty(2) != 0) {}

void Progress::advance(const std::string& note) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++done_;
  if (quiet_) return;
  const bool tenth = done_ == total_ || done_ * 10 / total_ != (done_ - 1) * 10 / total_;
  if (!tty_ && !tenth) return;
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(done_ * kWidth / total_);
  std::string bar(filled, '#');
  bar.append(kWidth - filled, '.');
  std::fprintf(stderr, "%s%s [%s] %zu/%zu%s%s%s", tty_ ? "\r" : "", label_.c_str(), bar.c_str(), done_, total_,
               note.empty() ? "" : "  ", note.c_str(), tty_ ? "\x1b[K" : "\n");
  std::fflush(stderr);
}

void Progress::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_ || quiet_) return;
  finished_ = true;
  if (tty_) std::fputc('\n', stderr);
}

}  // namespace cpgen

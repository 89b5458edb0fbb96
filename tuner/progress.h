// A progress line on stderr for long tuner phases: rewritten in place on a terminal, one line per
// tenth of the work in a log, silent when quiet. Thread-safe.
#pragma once

#include <cstddef>
#include <mutex>
#include <string>

namespace cpgen {

class Progress {
 public:
  Progress(std::string label, size_t total, bool quiet);
  // One more item finished; `note` is shown after the count (e.g. "3 failed").
  void advance(const std::string& note = "");
  void finish();

 private:
  std::mutex mutex_;
  std::string label_;
  size_t total_;
  size_t done_ = 0;
  bool quiet_;
  bool tty_;
  bool finished_ = false;
};

}  // namespace cpgen

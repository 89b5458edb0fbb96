// CPU transport: N virtual ranks as threads of one process, exchanging host buffers through the
// Transport interface. This is how CI (no GPU) runs the real ring driver, schedule and merges.
//
// Each exchange is a rendezvous between neighbours: start() posts the send buffers; finish()
// waits for the previous rank's post of the same id, copies its bytes into the receive buffers,
// then waits until the next rank has copied ours (so send buffers are free on return). No rank
// waits on anything but its neighbours reaching the same exchange, so ranks that call the same
// ids in the same order never deadlock.
//
// Failure never hangs the others: a rank that fails calls CpuRing::abort (run_ring_threads does
// it for every exception), which wakes every waiter with an error naming the failed rank; a wait
// that exceeds the watchdog timeout aborts the ring itself, naming the rank, id and peer.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "runtime/ring/transport.h"

namespace cpgen {

// The shared state of one ring of N CPU ranks.
class CpuRing {
 public:
  explicit CpuRing(int size, std::chrono::milliseconds watchdog = std::chrono::seconds(120));
  int size() const { return size_; }

  // Fails every pending and future wait of every rank with `reason` (the first reason wins).
  void abort(const std::string& reason);
  bool aborted() const;

 private:
  friend class CpuTransport;
  struct Posted {
    std::vector<RingExchange> exchanges;
    bool consumed = false;  // the next rank has copied the send buffers
  };

  // Both throw Error(kInternal) naming the rank, id and peer when the ring is aborted or the
  // watchdog expires. Called with lock held.
  void wait_for(std::unique_lock<std::mutex>& lock, const std::function<bool()>& ready, int rank,
                int id, int peer, const char* what);

  const int size_;
  const std::chrono::milliseconds watchdog_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  // (rank, exchange id, generation): the generation counts earlier uses of the id on that rank,
  // so a neighbour still leaving a finished exchange is never mistaken for its next use.
  std::map<std::tuple<int, int, int>, Posted> posted_;
  bool aborted_ = false;
  std::string abort_reason_;
};

class CpuTransport final : public Transport {
 public:
  CpuTransport(std::shared_ptr<CpuRing> ring, int rank);
  int rank() const override { return rank_; }
  int size() const override { return ring_->size(); }
  void start(std::span<const RingExchange> exchanges, int id) override;
  void finish(int id) override;

 private:
  std::shared_ptr<CpuRing> ring_;
  int rank_;
  std::map<int, int> started_, finished_;  // per exchange id: how many times, on this rank
};

// Runs body(rank, transport) on `size` threads, one per rank, and joins them. If any rank
// throws, the ring is aborted so the others stop waiting, and the first failure (the root cause,
// not the aborts it caused) is rethrown after every thread has ended.
void run_ring_threads(int size, const std::function<void(int rank, Transport& transport)>& body,
                      std::chrono::milliseconds watchdog = std::chrono::seconds(120));

}  // namespace cpgen

#include "runtime/transport/cpu_transport.h"

#include <cstring>
#include <exception>
#include <thread>

#include "cpgen/error.h"

namespace cpgen {

CpuRing::CpuRing(int size, std::chrono::milliseconds watchdog) : size_(size), watchdog_(watchdog) {
  if (size < 1) throw_bad_input("CPU ring: size must be >= 1; got " + std::to_string(size));
}

void CpuRing::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_) return;
    aborted_ = true;
    abort_reason_ = reason;
  }
  changed_.notify_all();
}

bool CpuRing::aborted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return aborted_;
}

void CpuRing::wait_for(std::unique_lock<std::mutex>& lock, const std::function<bool()>& ready,
                       int rank, int id, int peer, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + watchdog_;
  while (!aborted_ && !ready()) {
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout && !aborted_ && !ready()) {
      const std::string reason =
          "CPU ring: rank " + std::to_string(rank) + " waited more than " +
          std::to_string(watchdog_.count()) + " ms in exchange " + std::to_string(id) +
          " for rank " + std::to_string(peer) + " to " + what;
      aborted_ = true;
      abort_reason_ = reason;
      changed_.notify_all();
      throw Error(ErrorKind::kInternal, reason);
    }
  }
  if (aborted_)
    throw Error(ErrorKind::kInternal, "CPU ring: rank " + std::to_string(rank) +
                                          " stopped in exchange " + std::to_string(id) +
                                          " because the ring was aborted: " + abort_reason_);
}

CpuTransport::CpuTransport(std::shared_ptr<CpuRing> ring, int rank)
    : ring_(std::move(ring)), rank_(rank) {
  if (rank < 0 || rank >= ring_->size())
    throw_bad_input("CPU transport: rank " + std::to_string(rank) + " is outside [0, " +
                    std::to_string(ring_->size()) + ")");
}

void CpuTransport::start(std::span<const RingExchange> exchanges, int id) {
  {
    std::lock_guard<std::mutex> lock(ring_->mutex_);
    if (ring_->aborted_)
      throw Error(ErrorKind::kInternal, "CPU ring: rank " + std::to_string(rank_) +
                                            " cannot start exchange " + std::to_string(id) +
                                            ": the ring was aborted: " + ring_->abort_reason_);
    if (started_[id] != finished_[id])
      throw Error(ErrorKind::kInternal, "CPU ring: rank " + std::to_string(rank_) +
                                            " started exchange " + std::to_string(id) +
                                            " twice: it is still in flight");
    const int generation = started_[id]++;
    ring_->posted_[{rank_, id, generation}].exchanges.assign(exchanges.begin(), exchanges.end());
  }
  ring_->changed_.notify_all();
}

void CpuTransport::finish(int id) {
  CpuRing& ring = *ring_;
  const int n = ring.size();
  const int prev = (rank_ - 1 + n) % n, next = (rank_ + 1) % n;
  std::unique_lock<std::mutex> lock(ring.mutex_);
  if (started_[id] == finished_[id])
    throw Error(ErrorKind::kInternal, "CPU ring: rank " + std::to_string(rank_) +
                                          " finished exchange " + std::to_string(id) +
                                          " that it never started");
  const int generation = finished_[id]++;
  auto mine = ring.posted_.find({rank_, id, generation});
  const std::tuple<int, int, int> from_key{prev, id, generation};
  ring.wait_for(lock, [&] { return ring.posted_.count(from_key) != 0; }, rank_, id, prev,
                "start the same exchange");
  // std::map nodes stay put while other ranks insert and erase theirs, and prev leaves its entry
  // alone until we mark it consumed, so the copy can run without the lock.
  CpuRing::Posted& from = ring.posted_.find(from_key)->second;
  const std::vector<RingExchange>& sends = from.exchanges;
  const std::vector<RingExchange>& recvs = mine->second.exchanges;
  if (sends.size() != recvs.size()) {
    const std::string reason = "CPU ring: exchange " + std::to_string(id) + ": rank " +
                               std::to_string(prev) + " sends " + std::to_string(sends.size()) +
                               " buffers but rank " + std::to_string(rank_) + " receives " +
                               std::to_string(recvs.size());
    lock.unlock();
    ring.abort(reason);
    throw Error(ErrorKind::kInternal, reason);
  }
  for (size_t i = 0; i < sends.size(); ++i)
    if (sends[i].bytes != recvs[i].bytes) {
      const std::string reason =
          "CPU ring: exchange " + std::to_string(id) + " buffer " + std::to_string(i) +
          ": rank " + std::to_string(prev) + " sends " + std::to_string(sends[i].bytes) +
          " bytes but rank " + std::to_string(rank_) + " receives " +
          std::to_string(recvs[i].bytes);
      lock.unlock();
      ring.abort(reason);
      throw Error(ErrorKind::kInternal, reason);
    }
  lock.unlock();
  for (size_t i = 0; i < sends.size(); ++i)
    if (sends[i].bytes) std::memmove(recvs[i].recv, sends[i].send, sends[i].bytes);
  lock.lock();
  from.consumed = true;
  ring.changed_.notify_all();
  ring.wait_for(lock, [&] { return mine->second.consumed; }, rank_, id, next,
                "receive our buffers");
  ring.posted_.erase(mine);
}

void run_ring_threads(int size, const std::function<void(int rank, Transport& transport)>& body,
                      std::chrono::milliseconds watchdog) {
  auto ring = std::make_shared<CpuRing>(size, watchdog);
  std::mutex failure_mutex;
  std::exception_ptr first_failure;
  std::vector<std::thread> threads;
  threads.reserve(size);
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        CpuTransport transport(ring, rank);
        body(rank, transport);
      } catch (...) {
        std::string what = "unknown exception";
        try {
          throw;
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        {
          // The first exception recorded is the root cause: the ones the abort causes on the
          // other ranks can only come after it.
          std::lock_guard<std::mutex> lock(failure_mutex);
          if (!first_failure) first_failure = std::current_exception();
        }
        ring->abort("rank " + std::to_string(rank) + " failed: " + what);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (first_failure) std::rethrow_exception(first_failure);
}

}  // namespace cpgen

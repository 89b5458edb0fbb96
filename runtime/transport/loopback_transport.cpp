#include "runtime/transport/loopback_transport.h"

#include <chrono>

#include "cpgen/error.h"
#include "runtime/cuda/cuda_driver.h"

namespace cpgen::gpu {

class LoopbackRing::Endpoint final : public Transport {
 public:
  Endpoint(LoopbackRing& ring, int rank) : ring_(ring), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return ring_.size(); }
  void start(std::span<const RingExchange> exchanges, int id) override {
    ring_.start(rank_, exchanges, id);
  }
  void finish(int id) override { ring_.finish(rank_, id); }

 private:
  LoopbackRing& ring_;
  int rank_;
};

// One exchange id across all virtual ranks.
struct LoopbackRing::Exchange {
  explicit Exchange(int size)
      : posted(size, false), sends(size), ready(size), copied(size, false), finished(size, false) {
    for (int r = 0; r < size; ++r) {
      ready[r] = std::make_unique<Event>();
      copy_done.push_back(std::make_unique<Event>());
    }
  }
  std::vector<bool> posted;                       // rank called start
  std::vector<std::vector<RingExchange>> sends;   // what each rank posted
  std::vector<std::unique_ptr<Event>> ready;      // recorded on the rank's compute stream at start
  std::vector<bool> copied;                       // the copy into rank r is enqueued
  std::vector<std::unique_ptr<Event>> copy_done;  // recorded after the copy into rank r
  std::vector<bool> finished;

  // Back to the state of a fresh exchange; the events stay.
  void clear() {
    const size_t n = posted.size();
    posted.assign(n, false);
    copied.assign(n, false);
    finished.assign(n, false);
    for (auto& s : sends) s.clear();
  }
};

LoopbackRing::LoopbackRing(int size, double timeout_seconds)
    : size_(size),
      timeout_seconds_(timeout_seconds),
      compute_streams_(size > 0 ? size : 0, nullptr),
      starts_(size > 0 ? size : 0),
      finishes_(size > 0 ? size : 0) {
  if (size < 1) throw_bad_input("loopback ring size " + std::to_string(size) + " must be >= 1");
  for (int r = 0; r < size; ++r) {
    endpoints_.push_back(std::make_unique<Endpoint>(*this, r));
    comm_streams_.push_back(std::make_unique<Stream>());
    comm_marks_.push_back(std::make_unique<Event>());
  }
}

LoopbackRing::~LoopbackRing() = default;

Transport& LoopbackRing::endpoint(int rank) { return *endpoints_.at(rank); }

void LoopbackRing::set_compute_stream(int rank, CUstream stream) {
  std::lock_guard lock(mutex_);
  compute_streams_.at(rank) = stream;
}

void LoopbackRing::abort(const std::string& why) {
  std::lock_guard lock(mutex_);
  if (abort_reason_.empty()) abort_reason_ = why;
  posted_.notify_all();
}

size_t LoopbackRing::spare_exchanges() const {
  std::lock_guard lock(mutex_);
  return spare_.size();
}

void LoopbackRing::order_after_copies(CUstream stream) {
  for (int r = 0; r < size_; ++r) {
    comm_marks_[r]->record(comm_streams_[r]->get());
    CPGEN_CU_CHECK(cu::driver().cuStreamWaitEvent(stream, comm_marks_[r]->get(), 0));
  }
}

void LoopbackRing::reset() {
  std::lock_guard lock(mutex_);
  for (auto& [key, exchange] : exchanges_) {
    exchange->clear();
    spare_.push_back(std::move(exchange));
  }
  exchanges_.clear();
  for (auto& counts : starts_) counts.clear();
  for (auto& counts : finishes_) counts.clear();
  abort_reason_.clear();
}

void LoopbackRing::start(int rank, std::span<const RingExchange> exchanges, int id) {
  std::unique_lock lock(mutex_);
  if (!abort_reason_.empty()) throw Error(ErrorKind::kInternal, abort_reason_);
  const long long use = starts_[rank][id]++;
  auto& slot = exchanges_[{id, use}];
  if (!slot) {
    if (spare_.empty()) {
      slot = std::make_unique<Exchange>(size_);
    } else {
      slot = std::move(spare_.back());
      spare_.pop_back();
    }
  }
  Exchange& exchange = *slot;  // fresh for this rank: its use count just moved on
  exchange.sends[rank].assign(exchanges.begin(), exchanges.end());
  exchange.ready[rank]->record(compute_streams_[rank]);
  exchange.posted[rank] = true;
  const int prev = (rank - 1 + size_) % size_;
  const int next = (rank + 1) % size_;
  if (exchange.posted[prev] && !exchange.copied[rank]) enqueue_copy_into(exchange, rank, id);
  if (exchange.posted[next] && !exchange.copied[next]) enqueue_copy_into(exchange, next, id);
  posted_.notify_all();
}

void LoopbackRing::enqueue_copy_into(Exchange& exchange, int receiver, int id) {
  const int sender = (receiver - 1 + size_) % size_;
  const auto& recv = exchange.sends[receiver];
  const auto& send = exchange.sends[sender];
  if (recv.size() != send.size())
    throw Error(ErrorKind::kInternal, "loopback ring: exchange " + std::to_string(id) + ": rank " +
                                          std::to_string(sender) + " sends " +
                                          std::to_string(send.size()) + " buffers, rank " +
                                          std::to_string(receiver) + " receives " +
                                          std::to_string(recv.size()));
  const cu::DriverApi& api = cu::driver();
  CUstream stream = comm_streams_[receiver]->get();
  CPGEN_CU_CHECK(api.cuStreamWaitEvent(stream, exchange.ready[receiver]->get(), 0));
  CPGEN_CU_CHECK(api.cuStreamWaitEvent(stream, exchange.ready[sender]->get(), 0));
  for (size_t i = 0; i < recv.size(); ++i) {
    if (recv[i].bytes != send[i].bytes)
      throw Error(ErrorKind::kInternal,
                  "loopback ring: exchange " + std::to_string(id) + " buffer " + std::to_string(i) +
                      ": rank " + std::to_string(sender) + " sends " + std::to_string(send[i].bytes) +
                      " bytes, rank " + std::to_string(receiver) + " expects " +
                      std::to_string(recv[i].bytes));
    CPGEN_CU_CHECK(api.cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(recv[i].recv),
                                         reinterpret_cast<CUdeviceptr>(send[i].send),
                                         send[i].bytes, stream));
  }
  exchange.copy_done[receiver]->record(stream);
  exchange.copied[receiver] = true;
}

void LoopbackRing::finish(int rank, int id) {
  std::unique_lock lock(mutex_);
  const int next = (rank + 1) % size_;
  const long long use = finishes_[rank][id];
  auto it = exchanges_.find({id, use});
  if (it == exchanges_.end() || !it->second->posted[rank])
    throw Error(ErrorKind::kInternal, "loopback ring: rank " + std::to_string(rank) +
                                          " finished exchange " + std::to_string(id) +
                                          " that was never started");
  Exchange& exchange = *it->second;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(timeout_seconds_);
  // Wait for the other threads to enqueue (not for the GPU): the copy into this rank needs the
  // previous rank's post, the copy out of it needs the next rank's.
  while (!(exchange.copied[rank] && exchange.copied[next]) && abort_reason_.empty()) {
    if (posted_.wait_until(lock, deadline) == std::cv_status::timeout &&
        !(exchange.copied[rank] && exchange.copied[next])) {
      const int missing = !exchange.copied[rank] ? (rank - 1 + size_) % size_ : next;
      throw Error(ErrorKind::kInternal,
                  "loopback ring: virtual rank " + std::to_string(rank) + " waited " +
                      std::to_string(timeout_seconds_) + " s at exchange " + std::to_string(id) +
                      " for virtual rank " + std::to_string(missing) + " to start it");
    }
  }
  if (!abort_reason_.empty()) throw Error(ErrorKind::kInternal, abort_reason_);
  const cu::DriverApi& api = cu::driver();
  CPGEN_CU_CHECK(api.cuStreamWaitEvent(compute_streams_[rank], exchange.copy_done[rank]->get(), 0));
  CPGEN_CU_CHECK(api.cuStreamWaitEvent(compute_streams_[rank], exchange.copy_done[next]->get(), 0));
  exchange.finished[rank] = true;
  ++finishes_[rank][id];
  bool all = true;
  for (bool f : exchange.finished) all = all && f;
  if (all) {
    exchange.clear();
    spare_.push_back(std::move(it->second));
    exchanges_.erase(it);
  }
}

}  // namespace cpgen::gpu

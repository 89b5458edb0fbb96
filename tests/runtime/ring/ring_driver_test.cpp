// The ring driver's order of compute and communication, which every backend and transport
// relies on (runtime/ring/ring_driver.h): recorded with a backend and a transport that only log.
#include "runtime/ring/ring_driver.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cpgen/error.h"

namespace cpgen {
namespace {

// Four buffers per slot kind, recognisable by address: kv slot s is kv_[s], dkv slot s is dkv_[s].
struct Log {
  std::vector<std::string> events;
  char kv[2][2][8];
  char dkv[2][2][8];

  std::string slot_of(const void* p) const {
    for (int s = 0; s < 2; ++s)
      for (int b = 0; b < 2; ++b) {
        if (p == kv[s][b]) return "kv" + std::to_string(s);
        if (p == dkv[s][b]) return "dkv" + std::to_string(s);
      }
    return "?";
  }
};

class LoggingTransport final : public Transport {
 public:
  LoggingTransport(Log& log, int rank, int size) : log_(log), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void start(std::span<const RingExchange> exchanges, int id) override {
    EXPECT_EQ(exchanges.size(), 2u);
    // Both buffers of an exchange come from the same slot kind and go to the other slot.
    EXPECT_EQ(log_.slot_of(exchanges[0].send), log_.slot_of(exchanges[1].send));
    EXPECT_EQ(log_.slot_of(exchanges[0].recv), log_.slot_of(exchanges[1].recv));
    log_.events.push_back("start " + std::to_string(id) + " " + log_.slot_of(exchanges[0].send) +
                          "->" + log_.slot_of(exchanges[0].recv));
  }
  void finish(int id) override { log_.events.push_back("finish " + std::to_string(id)); }

 private:
  Log& log_;
  int rank_, size_;
};

class LoggingBackend final : public RingBackend {
 public:
  explicit LoggingBackend(Log& log) : log_(log) {}
  std::vector<BufferView> kv_buffers(int slot) override {
    return {{log_.kv[slot][0], 8}, {log_.kv[slot][1], 8}};
  }
  std::vector<BufferView> dkv_buffers(int slot) override {
    return {{log_.dkv[slot][0], 8}, {log_.dkv[slot][1], 8}};
  }
  void forward_begin() override { log_.events.push_back("fwd begin"); }
  void forward_step(const RingStep& s) override { log_.events.push_back("fwd " + describe(s)); }
  void backward_begin() override { log_.events.push_back("bwd begin"); }
  void backward_step(const RingStep& s) override { log_.events.push_back("bwd " + describe(s)); }
  void accumulate_dkv(int slot, bool is_first) override {
    log_.events.push_back("acc dkv" + std::to_string(slot) + (is_first ? " first" : ""));
  }
  void backward_end(int slot) override { log_.events.push_back("end dkv" + std::to_string(slot)); }

 private:
  static std::string describe(const RingStep& s) {
    return "step " + std::to_string(s.step) + " kv" + std::to_string(s.kv_slot) + " from " +
           std::to_string(s.kv_rank) + (s.is_first ? " first" : "") + (s.is_last ? " last" : "");
  }
  Log& log_;
};

TEST(RingDriver, ForwardOverlapsTheNextChunkWithTheCurrentStep) {
  Log log;
  LoggingBackend backend(log);
  LoggingTransport transport(log, 1, 3);
  ring_forward(backend, transport);
  const std::vector<std::string> expected = {
      "fwd begin",
      "start 0 kv0->kv1", "fwd step 0 kv0 from 1 first", "finish 0",
      "start 2 kv1->kv0", "fwd step 1 kv1 from 0",       "finish 2",
      "fwd step 2 kv0 from 2 last"};
  EXPECT_EQ(log.events, expected);
}

TEST(RingDriver, BackwardSendsTheAccumulatorWithTheChunkAndHomeAfterNSteps) {
  Log log;
  LoggingBackend backend(log);
  LoggingTransport transport(log, 2, 3);
  ring_backward(backend, transport);
  const std::vector<std::string> expected = {
      "bwd begin",
      "start 0 kv0->kv1", "bwd step 0 kv0 from 2 first", "acc dkv0 first",
      "start 1 dkv0->dkv1", "finish 0",
      "start 2 kv1->kv0", "bwd step 1 kv1 from 1", "finish 1", "acc dkv1",
      "start 3 dkv1->dkv0", "finish 2",
      "bwd step 2 kv0 from 0 last", "finish 3", "acc dkv0", "start 5 dkv0->dkv1",
      "finish 5", "end dkv1"};
  EXPECT_EQ(log.events, expected);
}

TEST(RingDriver, SingleRankNeedsNoKvExchange) {
  Log log;
  LoggingBackend backend(log);
  LoggingTransport transport(log, 0, 1);
  ring_forward(backend, transport);
  ring_backward(backend, transport);
  const std::vector<std::string> expected = {
      "fwd begin", "fwd step 0 kv0 from 0 first last",
      "bwd begin", "bwd step 0 kv0 from 0 first last", "acc dkv0 first",
      "start 1 dkv0->dkv1", "finish 1", "end dkv1"};
  EXPECT_EQ(log.events, expected);
}

// A backend whose accumulator travels in two parts: each part is finished, accumulated and
// started on its own, so part 1's transfer of step s-1 overlaps part 0's compute of step s.
class TwoPartBackend final : public RingBackend {
 public:
  explicit TwoPartBackend(Log& log) : log_(log), inner_(log) {}
  std::vector<BufferView> kv_buffers(int slot) override { return inner_.kv_buffers(slot); }
  std::vector<BufferView> dkv_buffers(int slot) override { return inner_.dkv_buffers(slot); }
  void forward_begin() override {}
  void forward_step(const RingStep&) override {}
  void backward_begin() override { inner_.backward_begin(); }
  void backward_step(const RingStep& s) override { inner_.backward_step(s); }
  void accumulate_dkv(int, bool) override { ADD_FAILURE() << "the driver must accumulate by part"; }
  int dkv_parts() const override { return 2; }
  std::vector<BufferView> dkv_part_buffers(int slot, int) override { return inner_.dkv_buffers(slot); }
  void accumulate_dkv_part(int slot, bool is_first, int part) override {
    log_.events.push_back("acc dkv" + std::to_string(slot) + " part " + std::to_string(part) + (is_first ? " first" : ""));
  }
  void backward_end(int slot) override { inner_.backward_end(slot); }

 private:
  Log& log_;
  LoggingBackend inner_;
};

TEST(RingDriver, BackwardPartsTravelAsTheirOwnExchanges) {
  Log log;
  TwoPartBackend backend(log);
  LoggingTransport transport(log, 0, 2);
  ring_backward(backend, transport);
  const int p1 = 1 << 20;  // dkv_exchange_id(step, 1) - dkv_exchange_id(step, 0)
  const std::vector<std::string> expected = {
      "bwd begin",
      "start 0 kv0->kv1", "bwd step 0 kv0 from 0 first",
      "acc dkv0 part 0 first", "start 1 dkv0->dkv1",
      "acc dkv0 part 1 first", "start " + std::to_string(1 + p1) + " dkv0->dkv1",
      "finish 0",
      "bwd step 1 kv1 from 1 last",
      "finish 1", "acc dkv1 part 0", "start 3 dkv1->dkv0",
      "finish " + std::to_string(1 + p1), "acc dkv1 part 1", "start " + std::to_string(3 + p1) + " dkv1->dkv0",
      "finish 3", "finish " + std::to_string(3 + p1), "end dkv0"};
  EXPECT_EQ(log.events, expected);
  EXPECT_EQ(dkv_exchange_id(1, 1), 3 + p1);
}

// Messages name an exchange by decoding its id: every K/V and dK/dV id of the driver decodes back
// to its kind, step and part (the NCCL watchdog once printed step 524288 + s for a second part).
TEST(RingDriver, ExchangeIdsDecodeToTheirKindStepAndPart) {
  for (int step = 0; step < 4096; step += 7) {
    const ExchangeName kv = exchange_name(kv_exchange_id(step));
    EXPECT_FALSE(kv.dkv);
    EXPECT_EQ(kv.step, step);
    EXPECT_EQ(kv.part, 0);
    for (int part = 0; part < 3; ++part) {
      const ExchangeName dkv = exchange_name(dkv_exchange_id(step, part));
      EXPECT_TRUE(dkv.dkv);
      EXPECT_EQ(dkv.step, step);
      EXPECT_EQ(dkv.part, part);
    }
  }
}

// A rank's calls through a log shared by every rank, prefixed "rR " so the interleaving shows.
class RankTransport final : public Transport {
 public:
  RankTransport(std::vector<std::string>& all, Log& own, int rank, int size)
      : all_(all), inner_(own, rank, size), own_(own), rank_(rank) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void start(std::span<const RingExchange> exchanges, int id) override {
    inner_.start(exchanges, id);
    all_.push_back("r" + std::to_string(rank_) + " " + own_.events.back());
  }
  void finish(int id) override {
    inner_.finish(id);
    all_.push_back("r" + std::to_string(rank_) + " " + own_.events.back());
  }

 private:
  std::vector<std::string>& all_;
  LoggingTransport inner_;
  Log& own_;
  int rank_;
};

class RankBackend final : public RingBackend {
 public:
  RankBackend(std::vector<std::string>& all, Log& own, int rank) : all_(all), inner_(own), own_(own), rank_(rank) {}
  std::vector<BufferView> kv_buffers(int slot) override { return inner_.kv_buffers(slot); }
  std::vector<BufferView> dkv_buffers(int slot) override { return inner_.dkv_buffers(slot); }
  void forward_begin() override { note([&] { inner_.forward_begin(); }); }
  void forward_step(const RingStep& s) override { note([&] { inner_.forward_step(s); }); }
  void backward_begin() override { note([&] { inner_.backward_begin(); }); }
  void backward_step(const RingStep& s) override { note([&] { inner_.backward_step(s); }); }
  void accumulate_dkv(int slot, bool is_first) override { note([&] { inner_.accumulate_dkv(slot, is_first); }); }
  void backward_end(int slot) override { note([&] { inner_.backward_end(slot); }); }

 private:
  template <typename F>
  void note(F call) {
    call();
    all_.push_back("r" + std::to_string(rank_) + " " + own_.events.back());
  }
  std::vector<std::string>& all_;
  LoggingBackend inner_;
  Log& own_;
  int rank_;
};

// The loopback ring drives every rank from one thread: each rank's own calls are exactly
// ring_forward's, and the ranks interleave in the documented fixed schedule (all starts of a step,
// then all computes, then all finishes), never in a thread race.
TEST(RingDriver, ForwardAllRunsEveryRankInAFixedScheduleFromOneThread) {
  constexpr int n = 3;
  std::vector<std::string> all;
  Log own[n], alone[n];
  std::vector<std::unique_ptr<RankTransport>> transports;
  std::vector<std::unique_ptr<RankBackend>> backends;
  std::vector<Transport*> t;
  std::vector<RingBackend*> b;
  for (int r = 0; r < n; ++r) {
    transports.push_back(std::make_unique<RankTransport>(all, own[r], r, n));
    backends.push_back(std::make_unique<RankBackend>(all, own[r], r));
    t.push_back(transports.back().get());
    b.push_back(backends.back().get());
  }
  ring_forward_all(b, t);
  for (int r = 0; r < n; ++r) {
    LoggingBackend backend(alone[r]);
    LoggingTransport transport(alone[r], r, n);
    ring_forward(backend, transport);
    EXPECT_EQ(own[r].events, alone[r].events) << "rank " << r;
  }
  const std::vector<std::string> expected = {
      "r0 fwd begin", "r1 fwd begin", "r2 fwd begin",
      "r0 start 0 kv0->kv1", "r1 start 0 kv0->kv1", "r2 start 0 kv0->kv1",
      "r0 fwd step 0 kv0 from 0 first", "r1 fwd step 0 kv0 from 1 first", "r2 fwd step 0 kv0 from 2 first",
      "r0 finish 0", "r1 finish 0", "r2 finish 0",
      "r0 start 2 kv1->kv0", "r1 start 2 kv1->kv0", "r2 start 2 kv1->kv0",
      "r0 fwd step 1 kv1 from 2", "r1 fwd step 1 kv1 from 0", "r2 fwd step 1 kv1 from 1",
      "r0 finish 2", "r1 finish 2", "r2 finish 2",
      "r0 fwd step 2 kv0 from 1 last", "r1 fwd step 2 kv0 from 2 last", "r2 fwd step 2 kv0 from 0 last"};
  EXPECT_EQ(all, expected);
}

// The loopback backward: each rank's calls are exactly ring_backward's, and no rank finishes an
// exchange (K/V or dK/dV) before every rank has started it, which is what lets the loopback
// transport run on one thread.
TEST(RingDriver, BackwardAllMakesRingBackwardsCallsAndStartsEveryExchangeBeforeAnyFinish) {
  for (int n : {1, 2, 4}) {
    std::vector<std::string> all;
    std::vector<Log> own(n), alone(n);
    std::vector<std::unique_ptr<RankTransport>> transports;
    std::vector<std::unique_ptr<RankBackend>> backends;
    std::vector<Transport*> t;
    std::vector<RingBackend*> b;
    for (int r = 0; r < n; ++r) {
      transports.push_back(std::make_unique<RankTransport>(all, own[r], r, n));
      backends.push_back(std::make_unique<RankBackend>(all, own[r], r));
      t.push_back(transports.back().get());
      b.push_back(backends.back().get());
    }
    ring_backward_all(b, t);
    for (int r = 0; r < n; ++r) {
      LoggingBackend backend(alone[r]);
      LoggingTransport transport(alone[r], r, n);
      ring_backward(backend, transport);
      EXPECT_EQ(own[r].events, alone[r].events) << "rank " << r << " of " << n;
    }
    // Per exchange id: how many ranks have started it when each finish happens.
    std::map<int, int> started;
    for (const std::string& e : all) {
      const size_t at = e.find(' ');
      const std::string what = e.substr(at + 1);
      if (what.rfind("start ", 0) == 0) ++started[std::stoi(what.substr(6))];
      if (what.rfind("finish ", 0) == 0)
        EXPECT_EQ(started[std::stoi(what.substr(7))], n) << e << " (ring of " << n << ")";
    }
    // Every rank ends with its own chunk's accumulator, in dkv slot n % 2.
    EXPECT_EQ(all.back(), "r" + std::to_string(n - 1) + " end dkv" + std::to_string(n % 2));
  }
}

TEST(RingDriver, ForwardAllRefusesTransportsOutOfRankOrder) {
  Log log[2];
  LoggingTransport t0(log[0], 1, 2), t1(log[1], 0, 2);
  LoggingBackend b0(log[0]), b1(log[1]);
  std::vector<Transport*> t = {&t0, &t1};
  std::vector<RingBackend*> b = {&b0, &b1};
  EXPECT_THROW(ring_forward_all(b, t), Error);
  EXPECT_TRUE(log[0].events.empty());
}

}  // namespace
}  // namespace cpgen

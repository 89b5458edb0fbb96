// The CPU transport: data moves one rank forward, several exchanges may be in flight, and a
// failure or a stall on one rank stops every rank with an error instead of a hang.
#include "runtime/transport/cpu_transport.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "cpgen/error.h"

namespace cpgen {
namespace {

using namespace std::chrono_literals;

std::string failure_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(CpuTransport, MovesEveryBufferToTheNextRank) {
  for (int n : {1, 2, 3, 5}) {
    std::vector<std::vector<int>> received(n);
    run_ring_threads(n, [&](int rank, Transport& t) {
      EXPECT_EQ(t.rank(), rank);
      EXPECT_EQ(t.size(), n);
      // Two exchanges in flight at once, finished in the opposite order, as the backward does.
      std::vector<int> a_send = {rank, 10 * rank}, a_recv = {-1, -1};
      std::vector<int> b_send = {100 + rank}, b_recv = {-1};
      const RingExchange a[] = {{&a_send[0], &a_recv[0], sizeof(int)},
                                {&a_send[1], &a_recv[1], sizeof(int)}};
      const RingExchange b[] = {{b_send.data(), b_recv.data(), sizeof(int)}};
      t.start(a, 0);
      t.start(b, 1);
      t.finish(1);
      t.finish(0);
      received[rank] = {a_recv[0], a_recv[1], b_recv[0]};
    });
    for (int r = 0; r < n; ++r) {
      const int prev = (r - 1 + n) % n;
      EXPECT_EQ(received[r], (std::vector<int>{prev, 10 * prev, 100 + prev})) << "n=" << n;
    }
  }
}

TEST(CpuTransport, RingOfStepsPassesAChunkAllTheWayAround) {
  const int n = 4;
  std::vector<std::vector<int>> seen(n);
  run_ring_threads(n, [&](int rank, Transport& t) {
    int slots[2] = {rank, -1};
    for (int step = 0; step < n; ++step) {
      seen[rank].push_back(slots[step % 2]);
      if (step + 1 == n) break;
      const RingExchange e[] = {{&slots[step % 2], &slots[(step + 1) % 2], sizeof(int)}};
      t.start(e, step);
      t.finish(step);
    }
  });
  for (int r = 0; r < n; ++r)
    for (int s = 0; s < n; ++s) EXPECT_EQ(seen[r][s], ((r - s) % n + n) % n);
}

TEST(CpuTransport, FailureOnOneRankStopsTheOthers) {
  const auto begin = std::chrono::steady_clock::now();
  std::atomic<int> stopped_by_abort{0};
  const std::string what = failure_of([&] {
    run_ring_threads(
        4,
        [&](int rank, Transport& t) {
          int send = rank, recv = -1;
          const RingExchange e[] = {{&send, &recv, sizeof(int)}};
          for (int step = 0; step < 3; ++step) {
            if (rank == 2 && step == 1) throw Error(ErrorKind::kBadInput, "rank 2 broke at step 1");
            t.start(e, step);
            try {
              t.finish(step);
            } catch (const Error& err) {
              ++stopped_by_abort;
              EXPECT_NE(std::string(err.what()).find("rank 2 failed"), std::string::npos)
                  << err.what();
              throw;
            }
          }
        },
        60s);
  });
  EXPECT_EQ(what, "rank 2 broke at step 1");  // the root cause, not a consequence
  EXPECT_GE(stopped_by_abort.load(), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 10s) << "the abort must wake the waiters";
}

TEST(CpuTransport, WatchdogNamesTheStalledExchange) {
  const std::string what = failure_of([&] {
    run_ring_threads(
        3,
        [&](int rank, Transport& t) {
          if (rank == 1) return;  // never joins the exchange
          int send = rank, recv = -1;
          const RingExchange e[] = {{&send, &recv, sizeof(int)}};
          t.start(e, 7);
          t.finish(7);
        },
        200ms);
  });
  EXPECT_NE(what.find("waited more than 200 ms in exchange 7 for rank 1"), std::string::npos)
      << what;
}

TEST(CpuTransport, MismatchedSizesFailOnBothSides) {
  const std::string what = failure_of([&] {
    run_ring_threads(2, [&](int rank, Transport& t) {
      char send[8] = {}, recv[8] = {};
      const RingExchange e[] = {{send, recv, rank == 0 ? size_t{8} : size_t{4}}};
      t.start(e, 0);
      t.finish(0);
    });
  });
  EXPECT_NE(what.find("bytes"), std::string::npos) << what;
}

TEST(CpuTransport, MisuseIsReported) {
  EXPECT_NE(failure_of([] {
              run_ring_threads(1, [](int, Transport& t) { t.finish(3); });
            }).find("never started"),
            std::string::npos);
  EXPECT_NE(failure_of([] {
              run_ring_threads(1, [](int, Transport& t) {
                t.start({}, 0);
                t.start({}, 0);
              });
            }).find("still in flight"),
            std::string::npos);
  EXPECT_THROW(CpuRing(0), Error);
}

}  // namespace
}  // namespace cpgen

namespace cpgen {
namespace {

// Regression: the backward reuses the forward's exchange ids. A rank could reach its next use of
// id 0 while its neighbour had not yet removed its finished entry for id 0, pair with that stale
// entry, copy stale bytes, and leave its own post unconsumed: a hang (caught only by the
// watchdog). Each use of an id must pair with the same use on the neighbours.
TEST(CpuTransport, ReusedExchangeIdsPairUseByUse) {
  for (int n : {2, 3}) {
    const int uses = 400;
    std::vector<int> mismatches(n, 0);
    run_ring_threads(
        n,
        [&](int rank, Transport& t) {
          for (int use = 0; use < uses; ++use) {
            int send = use * 100 + rank, recv = -1;
            const RingExchange e[] = {{&send, &recv, sizeof(int)}};
            t.start(e, 0);
            t.finish(0);
            if (recv != use * 100 + (rank - 1 + n) % n) ++mismatches[rank];
          }
        },
        std::chrono::seconds(20));
    for (int r = 0; r < n; ++r) EXPECT_EQ(mismatches[r], 0) << "n=" << n << " rank " << r;
  }
}

}  // namespace
}  // namespace cpgen

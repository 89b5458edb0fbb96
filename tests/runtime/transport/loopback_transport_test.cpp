// The loopback transport on its own (no kernel): virtual ranks on host threads exchange device
// buffers around the ring through the ring driver's start/finish contract. GPU only.
#include "runtime/transport/loopback_transport.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "cpgen/error.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/module.h"
#include "test_util.h"

namespace cpgen {
namespace {

// Every rank passes what it holds to rank + 1 for `steps` exchanges; after step s rank r must hold
// the values rank r - s - 1 started with. Two buffers per exchange, double-buffered as the ring
// driver does.
// With reuse_id, every step uses exchange id 0 (as the backward reuses the forward's ids and each
// run restarts at 0) and rank 0 runs ahead of the others, so it starts the next use of the id
// while its neighbours are still on the previous one.
// With one_thread, the calling thread drives every rank in the schedule ring_forward_all uses
// (all ranks start a step's exchange, then all finish it), as RingAttention does.
void pass_chunks_around(int n, bool reuse_id, bool one_thread = false) {
  {
    use_primary_context(0);
    gpu::LoopbackRing ring(n, 30);
    const size_t count = 1 << 16;
    std::vector<std::array<DeviceBuffer, 2>> a(n), b(n);
    std::vector<std::unique_ptr<gpu::Stream>> streams;
    for (int r = 0; r < n; ++r) {
      std::vector<int> mine(count), other(count);
      for (size_t i = 0; i < count; ++i) {
        mine[i] = r * 1000000 + static_cast<int>(i);
        other[i] = -1 - r;
      }
      a[r][0] = DeviceBuffer::from_host(0, mine);
      b[r][0] = DeviceBuffer::from_host(0, other);
      a[r][1] = DeviceBuffer(0, count * sizeof(int));
      b[r][1] = DeviceBuffer(0, count * sizeof(int));
      a[r][1].poison();
      b[r][1].poison();
      streams.push_back(std::make_unique<gpu::Stream>());
      ring.set_compute_stream(r, streams[r]->get());
    }
    const int steps = n;  // one full turn brings every chunk home
    std::vector<std::string> errors(n);
    auto exchange_of = [&](int r, int s) {
      const int from = s % 2, to = (s + 1) % 2;
      return std::vector<RingExchange>{{a[r][from].as<void>(), a[r][to].as<void>(), count * sizeof(int)},
                                       {b[r][from].as<void>(), b[r][to].as<void>(), count * sizeof(int)}};
    };
    if (one_thread) {
      // Twice, so the second run reuses the exchanges (and their events) of the first.
      for (int run = 0; run < 2; ++run) {
        ring.reset();
        for (int s = run * steps; s < (run + 1) * steps; ++s) {
          const int id = reuse_id ? 0 : 2 * s;
          for (int r = 0; r < n; ++r) ring.endpoint(r).start(exchange_of(r, s), id);
          for (int r = 0; r < n; ++r) ring.endpoint(r).finish(id);
        }
        if (n > 1) EXPECT_GE(ring.spare_exchanges(), 1u);
      }
    }
    std::vector<std::thread> threads;
    for (int r = 0; r < n && !one_thread; ++r)
      threads.emplace_back([&, r] {
        try {
          use_primary_context(0);
          Transport& t = ring.endpoint(r);
          for (int s = 0; s < steps; ++s) {
            if (reuse_id && r != 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
            const int id = reuse_id ? 0 : 2 * s;
            t.start(exchange_of(r, s), id);
            t.finish(id);
          }
        } catch (const std::exception& e) {
          errors[r] = e.what();
          ring.abort(e.what());
        }
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
    for (auto& s : streams) CPGEN_CU_CHECK(cu::driver().cuStreamSynchronize(s->get()));
    // Two full turns (one_thread) bring every chunk home just as one turn does.
    const int total_steps = one_thread ? 2 * steps : steps;
    for (int r = 0; r < n; ++r) {
      const int slot = total_steps % 2;
      const std::vector<int> got_a = a[r][slot].download_as<int>(), got_b = b[r][slot].download_as<int>();
      // After n steps the chunk has gone round: each rank holds its own again.
      const int origin = ((r - total_steps) % n + n) % n;
      for (size_t i = 0; i < count; i += 997) {
        ASSERT_EQ(got_a[i], origin * 1000000 + static_cast<int>(i)) << "N=" << n << " rank " << r << " a[" << i << "]";
        ASSERT_EQ(got_b[i], -1 - origin) << "N=" << n << " rank " << r << " b[" << i << "]";
      }
    }
  }
}

TEST(LoopbackTransport, ChunksTravelAroundTheRing) {
  CPGEN_REQUIRE_GPU();
  for (int n : {1, 2, 3, 8}) pass_chunks_around(n, false);
}

// Regression: exchanges were keyed by id alone, so a rank that started id 0 again before its
// neighbour finished the previous id 0 failed with "started exchange 0 twice".
TEST(LoopbackTransport, ReusedExchangeIdsPairUseByUse) {
  CPGEN_REQUIRE_GPU();
  for (int n : {2, 3, 4}) pass_chunks_around(n, true);
}

TEST(LoopbackTransport, OneThreadDrivesEveryRankInTheFixedSchedule) {
  CPGEN_REQUIRE_GPU();
  for (int n : {1, 2, 3, 8}) pass_chunks_around(n, false, true);
  for (int n : {2, 3}) pass_chunks_around(n, true, true);
}

TEST(LoopbackTransport, MismatchedSizesAreNamed) {
  CPGEN_REQUIRE_GPU();
  use_primary_context(0);
  gpu::LoopbackRing ring(2, 5);
  DeviceBuffer x(0, 1024), y(0, 1024), z(0, 2048), w(0, 2048);
  gpu::Stream s0, s1;
  ring.set_compute_stream(0, s0.get());
  ring.set_compute_stream(1, s1.get());
  std::vector<RingExchange> e0 = {{x.as<void>(), y.as<void>(), 1024}};
  std::vector<RingExchange> e1 = {{z.as<void>(), w.as<void>(), 2048}};
  ring.endpoint(0).start(e0, 0);
  try {
    ring.endpoint(1).start(e1, 0);
    FAIL() << "a 2048-byte send into a 1024-byte receive was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1024"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("2048"), std::string::npos) << e.what();
  }
}

TEST(LoopbackTransport, MissingPeerTimesOutNamingIt) {
  CPGEN_REQUIRE_GPU();
  use_primary_context(0);
  gpu::LoopbackRing ring(2, 0.2);
  DeviceBuffer x(0, 256), y(0, 256);
  gpu::Stream s0;
  ring.set_compute_stream(0, s0.get());
  std::vector<RingExchange> e0 = {{x.as<void>(), y.as<void>(), 256}};
  ring.endpoint(0).start(e0, 4);
  try {
    ring.endpoint(0).finish(4);
    FAIL() << "finish returned although rank 1 never started";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("virtual rank 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cpgen

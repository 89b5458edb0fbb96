#include "runtime/ring/ring_driver.h"

#include <string>

#include "cpgen/error.h"
#include "runtime/ring/schedule.h"

namespace cpgen {
namespace {

// Pairs the buffers of the slot we send with those of the slot the previous rank fills.
std::vector<RingExchange> pair_slots(const std::vector<BufferView>& send,
                                     const std::vector<BufferView>& recv, const char* what) {
  if (send.size() != recv.size())
    throw Error(ErrorKind::kInternal, std::string("ring driver: ") + what +
                                          " slots have different buffer counts (" +
                                          std::to_string(send.size()) + " vs " +
                                          std::to_string(recv.size()) + ")");
  std::vector<RingExchange> exchanges;
  for (size_t i = 0; i < send.size(); ++i) {
    if (send[i].bytes != recv[i].bytes)
      throw Error(ErrorKind::kInternal, std::string("ring driver: ") + what + " buffer " +
                                            std::to_string(i) + " differs in size between slots");
    exchanges.push_back({send[i].data, recv[i].data, send[i].bytes});
  }
  return exchanges;
}

void check_transport(const Transport& transport) {
  if (transport.size() < 1 || transport.rank() < 0 || transport.rank() >= transport.size())
    throw Error(ErrorKind::kInternal, "ring driver: transport reports rank " +
                                          std::to_string(transport.rank()) + " of " +
                                          std::to_string(transport.size()));
}

// The chunk for step s+1 moves (slot s % 2 into the other) while step s computes; nothing moves
// after the last step. Returns whether an exchange was started, for the matching finish.
bool start_kv_pass(RingBackend& backend, Transport& transport, int s, int n) {
  if (s + 1 >= n) return false;
  const std::vector<BufferView> send = s == 0 ? backend.first_kv_send_buffers() : backend.kv_buffers(s % 2);
  transport.start(pair_slots(send, backend.kv_buffers((s + 1) % 2), "K/V"),
                  kv_exchange_id(s));
  return true;
}

// The accumulator part of step s (slot s % 2) to the next rank's other slot.
void start_dkv_pass(RingBackend& backend, Transport& transport, int s, int part) {
  transport.start(pair_slots(backend.dkv_part_buffers(s % 2, part), backend.dkv_part_buffers((s + 1) % 2, part),
                             "dK/dV"),
                  dkv_exchange_id(s, part));
}

int dkv_parts_of(const RingBackend& backend) {
  const int parts = backend.dkv_parts();
  if (parts < 1 || parts > 64)
    throw Error(ErrorKind::kInternal, "ring driver: the backend splits dK/dV into " + std::to_string(parts) + " parts");
  return parts;
}

}  // namespace

RingStep make_step(int rank, int step, int size) {
  RingStep s;
  s.step = step;
  s.kv_slot = step % 2;
  s.kv_rank = kv_source_rank(rank, step, size);
  s.is_first = step == 0;
  s.is_last = step == size - 1;
  return s;
}

void ring_forward(RingBackend& backend, Transport& transport) {
  check_transport(transport);
  const int n = transport.size(), rank = transport.rank();
  backend.forward_begin();
  for (int s = 0; s < n; ++s) {
    const RingStep step = make_step(rank, s, n);
    const bool pass_kv = start_kv_pass(backend, transport, s, n);
    backend.forward_step(step);
    if (pass_kv) transport.finish(kv_exchange_id(s));
  }
}

// The ranks of a one-thread ring: transports[r] must be rank r of backends.size() ranks.
static int check_all(std::span<RingBackend* const> backends, std::span<Transport* const> transports) {
  const int n = static_cast<int>(transports.size());
  if (n < 1 || backends.size() != transports.size())
    throw Error(ErrorKind::kInternal, "ring driver: " + std::to_string(backends.size()) +
                                          " backends for " + std::to_string(transports.size()) +
                                          " transports");
  for (int r = 0; r < n; ++r) {
    check_transport(*transports[r]);
    if (transports[r]->rank() != r || transports[r]->size() != n)
      throw Error(ErrorKind::kInternal, "ring driver: transport " + std::to_string(r) + " is rank " +
                                            std::to_string(transports[r]->rank()) + " of " +
                                            std::to_string(transports[r]->size()) + ", not " +
                                            std::to_string(r) + " of " + std::to_string(n));
  }
  return n;
}

void ring_forward_all(std::span<RingBackend* const> backends, std::span<Transport* const> transports) {
  const int n = check_all(backends, transports);
  for (int r = 0; r < n; ++r) backends[r]->forward_begin();
  for (int s = 0; s < n; ++s) {
    bool pass_kv = false;
    for (int r = 0; r < n; ++r) pass_kv = start_kv_pass(*backends[r], *transports[r], s, n);
    for (int r = 0; r < n; ++r) backends[r]->forward_step(make_step(r, s, n));
    if (!pass_kv) continue;
    for (int r = 0; r < n; ++r) transports[r]->finish(kv_exchange_id(s));
  }
}

void ring_backward(RingBackend& backend, Transport& transport) {
  check_transport(transport);
  const int n = transport.size(), rank = transport.rank();
  const int parts = dkv_parts_of(backend);
  backend.backward_begin();
  for (int s = 0; s < n; ++s) {
    const RingStep step = make_step(rank, s, n);
    const bool pass_kv = start_kv_pass(backend, transport, s, n);
    backend.backward_step(step);
    // The accumulator of the held chunk arrives from the previous rank (sent in its step s-1)
    // while this step computed; add this rank's part and pass it on.
    for (int part = 0; part < parts; ++part) {
      if (s > 0) transport.finish(dkv_exchange_id(s - 1, part));
      backend.accumulate_dkv_part(s % 2, s == 0, part);
      start_dkv_pass(backend, transport, s, part);
    }
    if (pass_kv) transport.finish(kv_exchange_id(s));
  }
  // The N-th accumulator exchange brings each rank the complete dK/dV of its own chunk.
  for (int part = 0; part < parts; ++part) transport.finish(dkv_exchange_id(n - 1, part));
  backend.backward_end(n % 2);
}

void ring_backward_all(std::span<RingBackend* const> backends, std::span<Transport* const> transports) {
  const int n = check_all(backends, transports);
  const int parts = dkv_parts_of(*backends[0]);
  for (int r = 1; r < n; ++r)
    if (dkv_parts_of(*backends[r]) != parts)
      throw Error(ErrorKind::kInternal, "ring driver: rank " + std::to_string(r) + " splits dK/dV into " +
                                            std::to_string(dkv_parts_of(*backends[r])) + " parts, rank 0 into " +
                                            std::to_string(parts));
  for (int r = 0; r < n; ++r) backends[r]->backward_begin();
  for (int s = 0; s < n; ++s) {
    bool pass_kv = false;
    for (int r = 0; r < n; ++r) pass_kv = start_kv_pass(*backends[r], *transports[r], s, n);
    for (int r = 0; r < n; ++r) backends[r]->backward_step(make_step(r, s, n));
    for (int part = 0; part < parts; ++part) {
      if (s > 0)
        for (int r = 0; r < n; ++r) transports[r]->finish(dkv_exchange_id(s - 1, part));
      for (int r = 0; r < n; ++r) backends[r]->accumulate_dkv_part(s % 2, s == 0, part);
      for (int r = 0; r < n; ++r) start_dkv_pass(*backends[r], *transports[r], s, part);
    }
    if (pass_kv)
      for (int r = 0; r < n; ++r) transports[r]->finish(kv_exchange_id(s));
  }
  for (int part = 0; part < parts; ++part)
    for (int r = 0; r < n; ++r) transports[r]->finish(dkv_exchange_id(n - 1, part));
  for (int r = 0; r < n; ++r) backends[r]->backward_end(n % 2);
}

}  // namespace cpgen

#!/usr/bin/env python3
"""A model (not a measurement) of how a persistent wgmma launch's CTAs share its work items: the
fixed stride (CTA c runs items c, c + G, c + 2G, ...) against taking the next untaken item from a
work counter (step_fwd_wgmma.cuh), over the item order of templates/layout.cuh (persistent_item:
L2 sections of pairs, each pair's query blocks heavy first). An item costs its key tiles plus a
fixed overhead (in tiles); the launch ends with its busiest CTA. Prints each order's end against
an even split of all the work.

  python3 bench/persistent_schedule_model.py
"""
import argparse
import heapq
import math


def item_costs(q_len, kv_len, q_heads, group, batch, causal, block_m=128, block_n=128, head_dim=128,
               l2_bytes=60 * 2**20, overhead_tiles=3.0):
    """Each item's cost in persistent_item order (layout.cuh)."""
    kv_heads = q_heads // group
    blocks = math.ceil(q_len * group / block_m)
    pairs = batch * kv_heads
    # persistent_section_pairs: K and V of a section's pairs fill a third of the L2.
    section = min(max(1, l2_bytes // 3 // (2 * kv_len * head_dim * 2)), pairs)

    def tiles(m_block):
        if not causal:
            return math.ceil(kv_len / block_n)
        last_query = min(((m_block + 1) * block_m - 1) // group, q_len - 1)
        return min(math.ceil((last_query + 1) / block_n), math.ceil(kv_len / block_n))

    costs = []
    for item in range(blocks * pairs):
        first = item // (section * blocks) * section
        n = min(pairs - first, section)
        slot = (item - first * blocks) // n
        costs.append(tiles(blocks - 1 - slot) + overhead_tiles)  # heavy_first_block
    return costs


def fixed_stride_end(costs, ctas):
    loads = [0.0] * ctas
    for i, c in enumerate(costs):
        loads[i % ctas] += c
    return max(loads)


def work_counter_end(costs, ctas):
    """Each CTA takes the next item when it finishes its last (items in order)."""
    ends = [0.0] * ctas
    heapq.heapify(ends)
    for c in costs:
        heapq.heappush(ends, heapq.heappop(ends) + c)
    return max(ends)


CASES = [
    ("bf16 hd128 causal 16K, GQA 1, 2 x 32 heads (kernels.py at 16K)", dict(q_len=16384, kv_len=16384, q_heads=32, group=1, batch=2, causal=True)),
    ("bf16 hd128 causal 8K, GQA 1, 4 x 32 heads (kernels.py at 8K)", dict(q_len=8192, kv_len=8192, q_heads=32, group=1, batch=4, causal=True)),
    ("causal 4K x 4K, GQA 4, 32 heads (a ring step at 32K over 8 ranks)", dict(q_len=4096, kv_len=4096, q_heads=32, group=4, batch=1, causal=True)),
    ("full 4K x 2K, GQA 4, 32 heads (a zigzag half step at 32K over 8)", dict(q_len=4096, kv_len=2048, q_heads=32, group=4, batch=1, causal=False)),
    ("causal 32K, GQA 4, 32 heads", dict(q_len=32768, kv_len=32768, q_heads=32, group=4, batch=1, causal=True)),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ctas", type=int, default=132, help="resident CTAs (one per SM: an H100/H200 has 132)")
    ap.add_argument("--overhead-tiles", type=float, default=3.0, help="an item's fixed cost, in key tiles")
    args = ap.parse_args()
    print("| case | fixed stride / even split | work counter / even split |")
    print("|---|---|---|")
    for name, shape in CASES:
        costs = item_costs(**shape, overhead_tiles=args.overhead_tiles)
        ctas = min(args.ctas, len(costs))
        even = sum(costs) / ctas
        print(f"| {name} | {fixed_stride_end(costs, ctas) / even:.3f} | {work_counter_end(costs, ctas) / even:.3f} |")


if __name__ == "__main__":
    main()

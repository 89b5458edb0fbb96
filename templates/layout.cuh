// Index and layout helpers of the forward step kernel: the shared-memory swizzle, which lane
// owns which element of an MMA fragment, which shared-memory row a lane hands to ldmatrix, and
// the packed GQA row mapping, and how (batch, kv head) pairs fold into the grid. All
// __host__ __device__ so the CPU tests check them.
#pragma once

#include "cpgen/platform.cuh"

namespace cpgen {
namespace device {

// ---- Shared-memory tiles ---------------------------------------------------------------------
// A tile row of head_dim 16-bit elements is split into 16-byte chunks (8 elements; the unit of
// cp.async and of one ldmatrix row). ldmatrix reads one chunk from each of 8 consecutive rows; in
// a plain row-major tile whose row pitch is a multiple of 128 bytes those 8 chunks sit in the same
// 4 banks (8-way conflict). XOR-ing the chunk index with a function of the row spreads the 8 reads
// over all 32 banks without padding (padding would push head dim 256 with 2 stages past the
// 163 KB of sm_80).
//  - chunks_per_row a multiple of 8 (head dim 64, 128, 256): chunk ^ (row % 8).
//  - 12 chunks per row (head dim 96, pitch 192 B = 1.5 x 128 B): consecutive rows alternate
//    between bank offset 0 and 64 B, so rows 2i and 2i+1 already differ; XOR the low two chunk
//    bits with (row / 2) % 4, which keeps every chunk inside its aligned group of 4 (so inside
//    the row) and gives the 4 row pairs distinct banks.
CPGEN_HOST_DEVICE int chunk_xor(int row, int chunks_per_row) {
  return chunks_per_row % 8 == 0 ? row % 8 : (row / 2) % 4;
}
CPGEN_HOST_DEVICE int swizzle_chunk(int row, int chunk, int chunks_per_row) {
  return chunk ^ chunk_xor(row, chunks_per_row);
}

// Element offset of (row, col) in a swizzled tile; col is a multiple of 8 for chunk accesses and
// any value for single elements.
CPGEN_HOST_DEVICE int swizzled_offset(int row, int col, int head_dim) {
  const int chunks = head_dim / 8;
  return row * head_dim + swizzle_chunk(row, col / 8, chunks) * 8 + col % 8;
}

// The MMA loops read, at unrolled step s, chunk 2 s + c of row r + 16 i, where c (0 or 1) and r
// depend only on the lane and i is an unrolled row tile. chunk_xor is the same for r and r + 16 i,
// and 2 s shares no bit with c, so the swizzled chunk is (2 s) ^ (c ^ chunk_xor(r)), i.e. the
// lane's step-0 byte offset with its chunk bits XOR-ed by 32 s. When the row pitch is a power of
// two (head dim 64, 128, 256) the chunk bits lie below the row bits and the whole offset is XOR-ed:
// one register per operand and one XOR per step, where per-step addresses hoisted out of the tile
// loop cost registers. Head dim 96 (pitch 192 B) keeps the chunk part apart.
CPGEN_HOST_DEVICE int lane_chunk_bytes(int row, int col, int head_dim) {
  return swizzle_chunk(row, col / 8, head_dim / 8) * 16;
}
// More generally, chunk j + c of the row for any even j (a k-step's 2 s, or c0 / 8 for a column
// block c0 that is a multiple of 16): the lane's offset for j = 0 with its chunk bits XOR-ed by
// 16 j, the block's bytes.
CPGEN_HOST_DEVICE int chunk_xor_offset_bytes(int lane_offset_bytes, int lane_chunk, int xor_bytes,
                                             int head_dim) {
  const int pitch = head_dim * 2;
  if ((pitch & (pitch - 1)) == 0) return lane_offset_bytes ^ xor_bytes;
  return lane_offset_bytes - lane_chunk + (lane_chunk ^ xor_bytes);
}
CPGEN_HOST_DEVICE int step_offset_bytes(int lane_offset_bytes, int lane_chunk, int step,
                                        int head_dim) {
  return chunk_xor_offset_bytes(lane_offset_bytes, lane_chunk, step * 32, head_dim);
}

// ---- MMA m16n8k16 fragment ownership ---------------------------------------------------------
// Accumulator C/D of one 16x8 tile: lane l holds rows l/4 and l/4 + 8, columns 2(l%4) and
// 2(l%4)+1; register e (0..3) is row l/4 + 8*(e/2), column 2(l%4) + e%2.
CPGEN_HOST_DEVICE int acc_row(int lane, int e) { return lane / 4 + 8 * (e / 2); }
CPGEN_HOST_DEVICE int acc_col(int lane, int e) { return 2 * (lane % 4) + e % 2; }

// ldmatrix.x4 takes one row address per lane: lanes 8i..8i+7 give the 8 rows of matrix i, and
// register i of every lane receives matrix i.
// A operand (16x16, row-major in shared memory, e.g. Q[row][k]): the four matrices are
// (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15), which is the
// register order a0..a3 of mma.m16n8k16.
CPGEN_HOST_DEVICE int ldmatrix_a_row(int lane) { return lane % 16; }
CPGEN_HOST_DEVICE int ldmatrix_a_col(int lane) { return (lane / 16) * 8; }
// B operand from a [n][k] tile (K for S = Q K^T), two n8 tiles per x4: matrices
// (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15) -> b0,b1 of n-tile 0 then
// b0,b1 of n-tile 1.
CPGEN_HOST_DEVICE int ldmatrix_b_row(int lane) { return lane % 8 + (lane / 16) * 8; }
CPGEN_HOST_DEVICE int ldmatrix_b_col(int lane) { return ((lane / 8) % 2) * 8; }
// B operand from a [k][n] tile (V for O += P V) with .trans, two n8 tiles per x4: matrices
// (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15).
CPGEN_HOST_DEVICE int ldmatrix_bt_row(int lane) { return lane % 8 + ((lane / 8) % 2) * 8; }
CPGEN_HOST_DEVICE int ldmatrix_bt_col(int lane) { return (lane / 16) * 8; }

// ---- Packed GQA rows -------------------------------------------------------------------------
// Packed row p of a kv head's query block stands for query head kv_head * group + p % group at
// local query index p / group: the group's heads interleave, so a block of rows covers a short
// range of query positions (which keeps causal tiles tight) for all heads of the group.
struct PackedRow {
  int head_in_group;
  int query_index;
};
CPGEN_HOST_DEVICE PackedRow unpack_row(int packed_row, int group) {
  return {packed_row % group, packed_row / group};
}
CPGEN_HOST_DEVICE int pack_row(int head_in_group, int query_index, int group) {
  return query_index * group + head_in_group;
}

// ---- Running state rows ----------------------------------------------------------------------
// The per-row state of the ring (o, m, l in the forward; lse, delta, dq in the backward) is
// [batch, q_heads, pitch] rows, pitch the rank's local rows (state_len, which a launch over a view
// of the queries sets; 0 means q_len).
CPGEN_HOST_DEVICE int state_pitch(int state_len, int q_len) { return state_len > 0 ? state_len : q_len; }
CPGEN_HOST_DEVICE long long state_row(int batch, int q_heads, int q_head, int pitch, int query_index) {
  return (static_cast<long long>(batch) * q_heads + q_head) * pitch + query_index;
}

// Query rows of one CTA's block [first_packed, first_packed + block_m) cover query indices
// first_packed / group .. (first_packed + block_m - 1) / group, clipped to q_len - 1.
CPGEN_HOST_DEVICE int block_first_query(int m_block, int block_m, int group) {
  return m_block * block_m / group;
}
CPGEN_HOST_DEVICE int block_last_query(int m_block, int block_m, int group, int q_len) {
  const int last = ((m_block + 1) * block_m - 1) / group;
  return last < q_len - 1 ? last : q_len - 1;
}

// ---- Query blocks in launch order --------------------------------------------------------------
// The forward kernels run query block heavy_first_block(blockIdx.x, gridDim.x), the last first.
// Under a causal mask a block's key tiles grow with its queries' positions, which increase along
// every chunk of every scheme. The block scheduler starts CTAs in increasing blockIdx.x (what GPUs
// do, though CUDA does not promise it), so in grid order the longest blocks start first and the
// grid's last wave is made of the shortest: the SMs run out of work nearly together, where in
// plain order the longest block of the last (batch, kv head) pair started last and ran on alone.
// Without a mask every block runs the same tiles, and under a window about the same, so there the
// order changes little.
CPGEN_HOST_DEVICE int heavy_first_block(int block_x, int blocks) { return blocks - 1 - block_x; }

// ---- (batch, kv head) pairs in the grid ------------------------------------------------------
// grid.y and grid.z are limited to 65535 blocks each, and a training job's batch * kv_heads can
// exceed that (e.g. 8192 sequences x 16 kv heads). The pairs are folded over y and z: block
// (y, z) serves pair z * grid.y + y. The host launcher and every step kernel use this one helper,
// so they agree on the fold. grid.y is spread evenly over the z layers, so at most z - 1 blocks
// get an index past the last pair; those blocks return at once.
constexpr unsigned kMaxGridYZ = 65535;
struct FoldedPairs {
  unsigned y;
  unsigned z;
};
// count >= 1 pairs into y * z >= count blocks with y, z <= max_y (max_y: the hardware limit; the
// CPU tests pass small values to exercise the fold on tiny problems).
CPGEN_HOST_DEVICE FoldedPairs fold_pairs(long long count, unsigned max_y = kMaxGridYZ) {
  const long long z = (count + max_y - 1) / max_y;
  const long long y = (count + z - 1) / z;
  return {static_cast<unsigned>(y), static_cast<unsigned>(z)};
}
// The pair index of block (block_y, block_z) in a grid of grid_y blocks along y; callers check
// it against the pair count and return when it is past the end.
CPGEN_HOST_DEVICE long long unfold_pair(unsigned block_y, unsigned block_z, unsigned grid_y) {
  return static_cast<long long>(block_z) * grid_y + block_y;
}

// The launchers' (y, z): y = kv heads and z = batch where both fit (every realistic shape), the
// fold of fold_pairs otherwise. Either way block (y, z) serves pair z * grid.y + y.
CPGEN_HOST_DEVICE FoldedPairs pair_grid(long long batch, long long kv_heads, unsigned max_y = kMaxGridYZ) {
  if (batch <= max_y && kv_heads <= max_y) return {static_cast<unsigned>(kv_heads), static_cast<unsigned>(batch)};
  return fold_pairs(batch * kv_heads, max_y);
}

// The (batch, kv head) of block (block_y, block_z), for a block inside the pairs. Where grid_y is
// kv_heads (pair_grid's usual grid, or a fold that happens to give it), pair z * kv_heads + y is
// batch z and head y: no division, which in a kernel that takes its pair per tile (to keep it out
// of registers) is a dozen and a half instructions a tile. Otherwise the pair is divided.
struct BatchHead {
  int batch;
  int kv_head;
};
CPGEN_HOST_DEVICE BatchHead unfold_batch_head(unsigned block_y, unsigned block_z, unsigned grid_y, int kv_heads) {
  if (grid_y == static_cast<unsigned>(kv_heads)) return {static_cast<int>(block_z), static_cast<int>(block_y)};
  const long long pair = unfold_pair(block_y, block_z, grid_y);
  return {static_cast<int>(pair / kv_heads), static_cast<int>(pair % kv_heads)};
}

// ---- Work items of a persistent launch ----------------------------------------------------------
// A persistent forward kernel (the wgmma family's _persistent) is launched with about one CTA per
// SM, each looping over work items blockIdx.x, blockIdx.x + gridDim.x, ... of blocks * pairs.
// The items come in L2 sections: consecutive (batch, kv head) pairs, section_pairs of them (the
// last section may hold fewer), whose K and V together fit a share of the L2 cache, so that the
// CTAs running at one time read the keys of a few pairs and find them in L2. Inside a section,
// item i is query-block slot i / n of the section's pair i % n (n its pair count), the slot taken
// heavy first: every pair's longest block comes before any of the section's shorter ones, so the
// CTAs' round-robin shares of a causal step stay within about a block's work of each other and
// each section ends with its shortest blocks. (One section over all pairs put every pair's K and V
// in flight at once: on an H200, 64 pairs of 16K keys, 21% of the reads hit L2 against 96% for the
// plain grid, and the DRAM traffic pulled the SM clock from 1.72 to 1.46 GHz. A section of one
// pair is the plain grid's order, heavy first within the pair.)
struct PersistentItem {
  int m_block;
  int batch;
  int kv_head;
};
CPGEN_HOST_DEVICE PersistentItem persistent_item(long long item, int blocks, int batch_count, int kv_heads,
                                                 int section_pairs) {
  const long long pairs = static_cast<long long>(batch_count) * kv_heads;
  const long long per_section = section_pairs < 1 ? 1 : (section_pairs > pairs ? pairs : section_pairs);
  const long long section = item / (per_section * blocks);
  const long long in_section = item - section * per_section * blocks;
  const long long first_pair = section * per_section;
  const long long n = pairs - first_pair < per_section ? pairs - first_pair : per_section;
  const long long pair = first_pair + in_section % n;
  return {heavy_first_block(static_cast<int>(in_section / n), blocks), static_cast<int>(pair / kv_heads),
          static_cast<int>(pair % kv_heads)};
}
// The share of L2 one section's K and V may fill: a third, so that the two sections a round of
// CTAs can straddle fit beside the streamed Q and output.
constexpr int kL2SectionShare = 3;
// Pairs per section for a chunk of kv_len keys of head_dim elements of element_bytes each (K and
// V: 2 x kv_len x head_dim x element_bytes per pair) on an L2 of l2_bytes: at least 1.
CPGEN_HOST_DEVICE int persistent_section_pairs(long long kv_len, int head_dim, int element_bytes, long long l2_bytes) {
  const long long pair_bytes = 2 * kv_len * head_dim * element_bytes;
  if (pair_bytes <= 0) return 1 << 30;  // no keys to keep: one section
  const long long n = l2_bytes / kL2SectionShare / pair_bytes;
  return n < 1 ? 1 : (n > (1 << 30) ? (1 << 30) : static_cast<int>(n));
}
// CTAs of a persistent launch: one per resident slot, never more than there are items.
CPGEN_HOST_DEVICE long long persistent_ctas(long long items, int resident_slots) {
  return items < resident_slots ? items : resident_slots;
}

}  // namespace device
}  // namespace cpgen

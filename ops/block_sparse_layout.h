// The sparsity structure the block-sparse attention kernel runs (ops/attention_block_sparse.h): queries and keys
// cut into blocks of `block` positions; per (head, query block) the key blocks it sees, and inside each of them
// either "every element" or an exact bitmask. Ops know nothing of patterns: models/attention/sparse_pattern.h
// builds a layout from a pattern's block lists and element rule, and the kernel and the mask renderer
// (tools/bench/mask.cpp) read only this.
//
// Memory: O(entries) indices plus block x ceil(block / 64) words per partial block, so O(N w / block) for a
// pattern of w keys per query; a full block costs no bits (a dense pattern is not N^2 / 8 bytes).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace eng {

struct BlockSparseLayout {
  int64_t heads = 1;  // 1: every head of the input shares the layout; else one layout per head
  int64_t Lq = 0, Lk = 0, block = 64;
  // Rows: entries of (head h, query block qb) are row_start[r] .. row_start[r + 1] with r = h * q_blocks() + qb,
  // their key blocks increasing.
  std::vector<int64_t> row_start, key_block;
  // Per entry: -1 when every element of the block is allowed, else the offset in `bits` of its mask: `block`
  // rows of words() words, bit (j % 64) of word j / 64 of row i set when query i0 + i sees key j0 + j.
  std::vector<int64_t> bits_at;
  std::vector<uint64_t> bits;
  // Columns (the transpose, for the backward's dK, dV): entries of (head h, key block kb) are
  // col_entry[col_start[c] .. col_start[c + 1]] with c = h * k_blocks() + kb, query blocks increasing.
  std::vector<int64_t> col_start, col_entry, col_qblock;

  int64_t q_blocks() const { return (Lq + block - 1) / block; }
  int64_t k_blocks() const { return (Lk + block - 1) / block; }
  int64_t words() const { return (block + 63) / 64; }
  // Entry e allows query i0 + i against key j0 + j (i, j relative to the block).
  bool entry_allows(int64_t e, int64_t i, int64_t j) const {
    const int64_t at = bits_at[size_t(e)];
    return at < 0 || (bits[size_t(at + i * words() + j / 64)] >> (j % 64) & 1);
  }
  // Whether query i sees key j in head h (a layout head: 0 when heads == 1), by lookup.
  bool allowed(int64_t h, int64_t i, int64_t j) const;
  size_t bytes() const;  // heap memory held, for memory budgets
};

// Appends the key blocks query block qb of head h may see: a superset, any order, duplicates allowed.
using BlockLister = std::function<void(int64_t h, int64_t qb, std::vector<int64_t>& key_blocks)>;
// Whether query i sees key j in head h: the exact rule.
using ElementRule = std::function<bool(int64_t h, int64_t i, int64_t j)>;

// Evaluates `allowed` once on every element of every listed block (in parallel over rows): blocks with no allowed
// element are dropped, blocks with all allowed are kept without bits. `list` and `allowed` must be thread-safe.
// Cost O(listed blocks * block^2) rule calls.
BlockSparseLayout build_block_sparse_layout(int64_t heads, int64_t Lq, int64_t Lk, int64_t block,
                                            const BlockLister& list, const ElementRule& allowed);

// Checks that the layout fits inputs of H heads, Lq queries and Lk keys and is well formed; `op` names the caller.
void check_block_sparse_layout(const BlockSparseLayout& layout, int64_t H, int64_t Lq, int64_t Lk, const char* op);

}  // namespace eng

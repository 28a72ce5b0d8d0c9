#include "ops/block_sparse_layout.h"

#include <algorithm>

#include "engine/error.h"
#include "engine/threadpool.h"

namespace eng {

bool BlockSparseLayout::allowed(int64_t h, int64_t i, int64_t j) const {
  const int64_t r = h * q_blocks() + i / block;
  const auto first = key_block.begin() + row_start[size_t(r)], last = key_block.begin() + row_start[size_t(r + 1)];
  const auto it = std::lower_bound(first, last, j / block);
  return it != last && *it == j / block && entry_allows(it - key_block.begin(), i % block, j % block);
}

size_t BlockSparseLayout::bytes() const {
  size_t n = bits.capacity() * sizeof(uint64_t);
  for (const auto* v : {&row_start, &key_block, &bits_at, &col_start, &col_entry, &col_qblock})
    n += v->capacity() * sizeof(int64_t);
  return n;
}

namespace {

// What one (head, query block) keeps: its key blocks, and per block -1 (full) or an offset into `bits`.
struct Row {
  std::vector<int64_t> key_block, bits_at;
  std::vector<uint64_t> bits;
};

}  // namespace

BlockSparseLayout build_block_sparse_layout(int64_t heads, int64_t Lq, int64_t Lk, int64_t block,
                                            const BlockLister& list, const ElementRule& allowed) {
  ENG_CHECK(heads >= 1 && Lq >= 0 && Lk >= 0 && block >= 1,
            "block_sparse_layout: needs heads >= 1, lengths >= 0 "
            "and block >= 1, got heads ",
            heads, ", Lq ", Lq, ", Lk ", Lk, ", block ", block);
  BlockSparseLayout L;
  L.heads = heads, L.Lq = Lq, L.Lk = Lk, L.block = block;
  const int64_t nqb = L.q_blocks(), nkb = L.k_blocks(), W = L.words();
  std::vector<Row> rows(size_t(heads * nqb));
  parallel_for(0, heads * nqb, 1, [&](int64_t lo, int64_t hi) {
    std::vector<int64_t> listed;
    std::vector<uint64_t> tile(size_t(block * W));
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t h = r / nqb, qb = r % nqb, i0 = qb * block, nq = std::min(block, Lq - i0);
      listed.clear();
      list(h, qb, listed);
      std::sort(listed.begin(), listed.end());
      listed.erase(std::unique(listed.begin(), listed.end()), listed.end());
      Row& row = rows[size_t(r)];
      for (int64_t kb : listed) {
        ENG_CHECK(kb >= 0 && kb < nkb, "block_sparse_layout: key block ", kb, " listed for query block ", qb,
                  " of head ", h, " is outside [0, ", nkb, ")");
        const int64_t j0 = kb * block, nk = std::min(block, Lk - j0);
        std::fill(tile.begin(), tile.end(), uint64_t(0));
        int64_t count = 0;
        for (int64_t i = 0; i < nq; ++i)
          for (int64_t j = 0; j < nk; ++j)
            if (allowed(h, i0 + i, j0 + j)) {
              tile[size_t(i * W + j / 64)] |= uint64_t(1) << (j % 64);
              ++count;
            }
        if (count == 0) continue;
        row.key_block.push_back(kb);
        row.bits_at.push_back(count == nq * nk ? -1 : int64_t(row.bits.size()));
        if (count < nq * nk) row.bits.insert(row.bits.end(), tile.begin(), tile.end());
      }
    }
  });
  L.row_start.assign(1, 0);
  for (const Row& row : rows) {
    for (size_t e = 0; e < row.key_block.size(); ++e) {
      L.key_block.push_back(row.key_block[e]);
      L.bits_at.push_back(row.bits_at[e] < 0 ? -1 : row.bits_at[e] + int64_t(L.bits.size()));
    }
    L.bits.insert(L.bits.end(), row.bits.begin(), row.bits.end());
    L.row_start.push_back(int64_t(L.key_block.size()));
  }
  // The transpose by counting sort: rows are visited in increasing query block, so each column stays sorted.
  L.col_start.assign(size_t(heads * nkb + 1), 0);
  for (int64_t r = 0; r < heads * nqb; ++r)
    for (int64_t e = L.row_start[size_t(r)]; e < L.row_start[size_t(r + 1)]; ++e)
      ++L.col_start[size_t(r / nqb * nkb + L.key_block[size_t(e)] + 1)];
  for (size_t c = 1; c < L.col_start.size(); ++c) L.col_start[c] += L.col_start[c - 1];
  L.col_entry.resize(L.key_block.size());
  L.col_qblock.resize(L.key_block.size());
  std::vector<int64_t> fill(L.col_start.begin(), L.col_start.end() - 1);
  for (int64_t r = 0; r < heads * nqb; ++r)
    for (int64_t e = L.row_start[size_t(r)]; e < L.row_start[size_t(r + 1)]; ++e) {
      const int64_t at = fill[size_t(r / nqb * nkb + L.key_block[size_t(e)])]++;
      L.col_entry[size_t(at)] = e;
      L.col_qblock[size_t(at)] = r % nqb;
    }
  return L;
}

void check_block_sparse_layout(const BlockSparseLayout& L, int64_t H, int64_t Lq, int64_t Lk, const char* op) {
  ENG_CHECK(L.heads == 1 || L.heads == H, op, ": the layout has ", L.heads, " heads, the input ", H,
            " (a layout has 1 head, shared, or one per head)");
  ENG_CHECK(L.Lq == Lq && L.Lk == Lk, op, ": the layout is for ", L.Lq, " queries and ", L.Lk, " keys, the input has ",
            Lq, " and ", Lk);
  const size_t n = L.key_block.size();
  ENG_CHECK(L.block >= 1 && L.row_start.size() == size_t(L.heads * L.q_blocks() + 1) &&
                L.col_start.size() == size_t(L.heads * L.k_blocks() + 1) && L.bits_at.size() == n &&
                L.col_entry.size() == n && L.col_qblock.size() == n && L.row_start.back() == int64_t(n) &&
                L.col_start.back() == int64_t(n),
            op, ": malformed layout (build it with build_block_sparse_layout)");
}

}  // namespace eng

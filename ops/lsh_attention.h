// LSH chunk attention, fused: the inner step of Reformer attention (Kitaev et al. 2020, models/attention/reformer.h)
// without the chunked logits in memory.
//
// Per (batch, head, round) the N positions are sorted into Np = nc·c slots (layout.order; the last chunk padded with
// empty slots) and cut into nc chunks of c. The query of slot s in chunk ch = s / c sees the W keys of chunk ch and,
// when nc > 1, of chunk (ch + nc − 1) % nc (Eq. 5 with one chunk of look-back): W = 2c, or c for one chunk. Its logit
// against the key j of a slot is
//   −inf                      when the slot is padding or j >= key_end(i) (causality and key padding),
//   self_logit                when j == i (Sec. 2.1: a token attends to itself only when nothing else is visible),
//   q_i·k_j·scale − log N_ij  otherwise, the log term only with dedup and R > 1 (Eq. 9–10): N_ij counts the rounds
//                             in which j is in the own or the previous chunk of i.
// Window mode (layout.window = w > 0, Reformer's causal form, models/attention/reformer.h): key j is visible to
// query i in round r only when both share round r's bucket and 0 ≤ slot(i) − slot(j) < w: i itself and the w − 1
// positions sorted just before it in its bucket, which with a stable sort are its bucket's most recent earlier
// positions. Then c = min(w, N), so the own and the previous chunk cover every window, and N_ij counts the rounds in
// which j is in i's window. Row i then depends on positions <= i only (their buckets and ranks within a bucket).
// Each round r gives o^(r)_i = Σ_j softmax_j(l_ij) v_j and z^(r)_i = log Σ_j exp(l_ij) (Eq. 7–8's ingredients; the
// caller combines the rounds). A query with no visible key, in a round, gets o = 0 and z = −inf.
//
// q, k [B, H, N, D] and v [B, H, N, Dv] in original order; returns o [B, H, R, N, Dv] and z [B, H, R, N, 1], also in
// original order: two views of one [B, H, R, N, Dv + 1] result, so that one backward serves both gradients.
// Gradients flow to q, k and v (not through the self entries, whose logit is a constant).
//
// Forward: per (b, h, round, chunk) the c query and W key/value rows are gathered by `order`, the c × W logits made,
// masked and exponentiated in a per-thread scratch, and the rows of o and z written. Backward (flash-style, nothing
// but o and z kept): recomputes p_ij = exp(l_ij − z_i), dl_ij = p_ij (g_i·v_j − g_i·o_i + gz_i), and adds
// dq_i = scale Σ_j dl_ij k_j, dk_j = scale Σ_i dl_ij q_i over the real logits, dv_j = Σ_i p_ij g_i.
//
// Cost: time O(B·H·R·N·W·(D + Dv)) (and O(B·H·R²·N·W) more with dedup); memory O(B·H·R·N·(D + Dv)) (the result, and
// in the backward per-round gradients when there are fewer than 4 heads per thread) plus O(threads·(c·W + N·(D + Dv)))
// scratch: never the [nc, c, W] logits. Results are bitwise the same for any thread count: every gradient row sums
// its rounds in increasing order and, within a round, its chunks in increasing order, in either schedule.
#pragma once
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace eng {

// The sorted geometry of one call, computed by the caller and shared (immutable) with the backward.
struct LshChunkLayout {
  int64_t B = 0, H = 0, R = 1, N = 0;
  int64_t c = 1, nc = 0;           // chunk length and count: nc = ceil(N / c), Np = nc·c slots per (b, h, r)
  std::vector<int64_t> order;      // [B, H, R, Np]: the original position of each sorted slot, −1 for padding
  std::vector<int64_t> slot;       // [B, H, R, N]: the sorted slot of each original position (order's inverse)
  std::vector<int64_t> key_end;    // [B, N]: query i of batch element b sees keys j < key_end
  int64_t window = 0;              // > 0: window mode (causal: the W most recent positions of i's bucket)
  std::vector<int64_t> bucket;     // [B, H, R, N] in window mode: the bucket of each original position
  bool dedup = false;              // subtract log N_ij (when R > 1)
  double self_logit = 0;           // the logit of a query against its own key

  int64_t slots() const { return nc * c; }
  int64_t width() const { return nc > 1 ? 2 * c : c; }  // W: keys per query
};

// Checks the layout against q [B, H, N, D] (sizes, index ranges, order and slot inverse of each other); `op` names
// the caller.
void check_lsh_chunk_layout(const LshChunkLayout& L, int64_t B, int64_t H, int64_t N, const char* op);

std::pair<Tensor, Tensor> lsh_chunk_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const std::shared_ptr<const LshChunkLayout>& layout, double scale);

}  // namespace eng

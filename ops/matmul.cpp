#include "ops/matmul.h"

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/threadpool.h"
#include "ops/gemm.h"
#include "ops/kernel_util.h"
#include "ops/reduce.h"
#include "ops/view.h"

namespace eng {

ENG_REGISTER_OP("matmul");

namespace {

// Batched product of a [..., M, K] and b [..., K, N], both at least 2-D, batch dims broadcast.
Tensor batched_matmul(const Tensor& a, const Tensor& b) {
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(ba, bb, "matmul");
  Shape out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor out = empty(out_shape, a.dtype());
  // Batch offsets of each operand (stride 0 on broadcast batch dims).
  Shape full_a = batch, full_b = batch;
  full_a.insert(full_a.end(), {M, K});
  full_b.insert(full_b.end(), {K, N});
  Shape sa = broadcast_strides(a, full_a), sb = broadcast_strides(b, full_b);
  std::vector<int64_t> offs_a, offs_b;
  for_each_offset<2>(batch, {sa.data(), sb.data()}, {a.offset(), b.offset()}, [&](auto o) {
    offs_a.push_back(o[0]);
    offs_b.push_back(o[1]);
  });
  const int64_t nb = int64_t(offs_a.size());
  ENG_DISPATCH(a.dtype(), T, {
    const T* pa = static_cast<const T*>(a.storage()->data);
    const T* pb = static_cast<const T*>(b.storage()->data);
    T* pc = out.data<T>();
    // Parallel over (batch, row block) so that a single large matrix also uses every thread.
    const int64_t rb = 64, blocks = (M + rb - 1) / rb;
    parallel_for(0, nb * blocks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) {
        int64_t i = t / blocks, m0 = (t % blocks) * rb;
        GemmArgs<T> g;
        g.M = std::min(rb, M - m0);
        g.N = N;
        g.K = K;
        g.A = pa + offs_a[size_t(i)] + m0 * sa[sa.size() - 2];
        g.a_rs = sa[sa.size() - 2];
        g.a_cs = sa[sa.size() - 1];
        g.B = pb + offs_b[size_t(i)];
        g.b_rs = sb[sb.size() - 2];
        g.b_cs = sb[sb.size() - 1];
        g.C = pc + i * M * N + m0 * N;
        g.c_rs = N;
        gemm(g);
      }
    });
  });
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_same_dtype(a, b, "matmul");
  ENG_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least 1 dim, got a ", a.shape(), " and b ",
            b.shape());
  const int64_t kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  ENG_CHECK(a.size(-1) == kb, "matmul: inner dimensions differ: a ", a.shape(), " · b ", b.shape());
  if (a.dim() == 1 || b.dim() == 1) {
    Tensor a2 = a.dim() == 1 ? unsqueeze(a, 0) : a;
    Tensor b2 = b.dim() == 1 ? unsqueeze(b, 1) : b;
    Tensor r = matmul(a2, b2);
    if (a.dim() == 1) r = squeeze(r, -2);
    if (b.dim() == 1) r = squeeze(r, -1);
    return r;
  }
  Tensor out = batched_matmul(a, b);
  return record(out, "matmul", {a, b}, [a = a.detach(), b = b.detach()](const Tensor& g) {
    Tensor ga = sum_to(batched_matmul(g, transpose(b)), a.shape());
    Tensor gb = sum_to(batched_matmul(transpose(a), g), b.shape());
    return std::vector<Tensor>{ga, gb};
  });
}

}  // namespace eng

#include "ops/index.h"

#include "ops/binary.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_gradients;
using eng::test::uniform;

namespace {

Tensor ids(const std::vector<double>& v, const Shape& shape) { return from_vector(v, shape, DType::I64); }

}  // namespace

GRADCHECK("concat") {
  check_gradients([](auto v) { return concat({v[0], v[1], v[2]}, 1); },
                  {uniform({2, 1, 3}, 1), uniform({2, 2, 3}, 2), uniform({2, 3, 3}, 3)});
  // a non-contiguous piece, a negative axis, and the same tensor twice
  check_gradients([](auto v) { return concat({transpose(v[0]), v[1], v[1]}, -2); },
                  {uniform({3, 2}, 4), uniform({1, 3}, 5)});
}

GRADCHECK("index_select") {
  // repeated indices accumulate into the same row of the gradient
  check_gradients([](auto v) { return index_select(v[0], 1, v[1]); }, {uniform({2, 4, 3}, 1)}, {},
                  {ids({3, 0, 3, 3, 1}, {5})});
  check_gradients([](auto v) { return index_select(transpose(v[0]), 0, v[1]); }, {uniform({3, 4}, 2)}, {},
                  {ids({2, 2, 0}, {3})});
  check_gradients([](auto v) { return index_select(v[0], -1, v[1]); }, {uniform({3, 4}, 3)}, {},
                  {ids({1, 3, 1}, {3})});
}

GRADCHECK("index_add") {
  check_gradients([](auto v) { return index_add(v[0], 1, v[1], 4); }, {uniform({2, 5, 3}, 1)}, {},
                  {ids({3, 0, 3, 3, 1}, {5})});
  check_gradients([](auto v) { return index_add(transpose(v[0]), 0, v[1], 2); }, {uniform({3, 4}, 2)}, {},
                  {ids({1, 1, 0, 1}, {4})});
}

TEST_CASE("index: index_add by hand, and it is index_select's adjoint") {
  const Tensor src = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {3, 2}, DType::F64);
  CHECK(index_add(src, 0, ids({2, 0, 2}, {3}), 4).to_vector() == std::vector<double>{3, 4, 0, 0, 6, 8, 0, 0});
  CHECK(index_add(src, 1, ids({1, 1}, {2}), 3).to_vector() == std::vector<double>{0, 3, 0, 0, 7, 0, 0, 11, 0});
  CHECK(index_add(zeros({0, 2}, DType::F64), 0, ids({}, {0}), 2).to_vector() == std::vector<double>{0, 0, 0, 0});
  // <index_add(s), x> == <s, index_select(x)> for any s, x
  const Tensor s = uniform({6, 3}, 5), x = uniform({4, 3}, 6), idx = ids({3, 1, 1, 0, 3, 2}, {6});
  double a = 0, b = 0;
  const auto av = index_add(s, 0, idx, 4).to_vector(), xv = x.to_vector(), sv = s.to_vector(),
             bv = index_select(x, 0, idx).to_vector();
  for (size_t e = 0; e < av.size(); ++e) a += av[e] * xv[e];
  for (size_t e = 0; e < sv.size(); ++e) b += sv[e] * bv[e];
  CHECK(a == doctest::Approx(b).epsilon(1e-14));
  CHECK_THROWS_WITH(index_add(src, 0, ids({0, 4, 1}, {3}), 4),
                    "index_add: index 4 out of range [0, 4) for an output axis of size 4");
  CHECK_THROWS_WITH(index_add(src, 0, ids({0, 1}, {2}), 4),
                    "index_add: index of shape [2] must be 1-D with one entry per row of axis 0 of src of shape [3, 2]");
  CHECK_THROWS_WITH(index_add(src, 0, zeros({3}), 4), "index_add: index must be i64, got f32 [3]");
}

GRADCHECK("gather") {
  // index smaller than x outside the axis, with repeats
  check_gradients([](auto v) { return gather(v[0], 1, v[1]); }, {uniform({3, 4}, 1)}, {},
                  {ids({0, 0, 3, 2, 1, 2}, {2, 3})});
  // axis 0 (the serial scatter), on a non-contiguous x and a non-contiguous index
  check_gradients([](auto v) { return gather(transpose(v[0]), 0, transpose(v[1])); }, {uniform({2, 3}, 2)}, {},
                  {ids({2, 2, 0, 1, 0, 0}, {2, 3})});
  check_gradients([](auto v) { return gather(v[0], 2, v[1]); }, {uniform({2, 3, 4}, 3)}, {},
                  {ids({3, 3, 0, 1, 2, 0, 1, 1, 0, 2, 3, 3}, {2, 3, 2})});
}

GRADCHECK("embedding") {
  check_gradients([](auto v) { return embedding(v[0], v[1]); }, {uniform({5, 3}, 1)}, {},
                  {ids({4, 0, 4, 2, 4, 0}, {2, 3})});
  check_gradients([](auto v) { return embedding(transpose(v[0]), v[1]); }, {uniform({3, 4}, 2)}, {},
                  {ids({1, 1, 3}, {3})});
}

TEST_CASE("index: concat values and the views of split and chunk") {
  Tensor a = from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2});
  Tensor b = from_vector(std::vector<double>{5, 6}, {2, 1});
  CHECK(concat({a, b}, 1).to_vector() == std::vector<double>{1, 2, 5, 3, 4, 6});
  CHECK(concat({a, transpose(b)}, 0).to_vector() == std::vector<double>{1, 2, 3, 4, 5, 6});
  CHECK(concat({ids({1, 2}, {2}), ids({3}, {1})}).to_vector() == std::vector<double>{1, 2, 3});

  Tensor x = arange(7, DType::F64);
  auto parts = split(x, 3);
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].to_vector() == std::vector<double>{0, 1, 2});
  CHECK(parts[2].to_vector() == std::vector<double>{6});
  CHECK(parts[1].storage().get() == x.storage().get());  // a view, not a copy
  auto chunks = chunk(reshape(arange(12, DType::F64), {2, 6}), 4, 1);  // ceil(6 / 4) = 2 per piece
  REQUIRE(chunks.size() == 3);
  CHECK(chunks[1].shape() == Shape{2, 2});
  CHECK(chunks[1].to_vector() == std::vector<double>{2, 3, 8, 9});
  CHECK(chunk(x, 2).back().to_vector() == std::vector<double>{4, 5, 6});
}

TEST_CASE("index: split pieces carry gradients back to the whole") {
  Tensor x = uniform({5, 2}, 3);
  x.set_requires_grad(true);
  auto parts = split(x, 2, 0);
  Tensor y = concat({mul_scalar(parts[0], 2.0), parts[2]}, 0);
  y.backward(ones(y.shape(), DType::F64));
  CHECK(x.grad().to_vector() == std::vector<double>{2, 2, 2, 2, 0, 0, 0, 0, 1, 1});
}

TEST_CASE("index: index_select, gather and one_hot by hand") {
  Tensor x = reshape(arange(12, DType::F64), {3, 4});
  CHECK(index_select(x, 0, ids({2, 0, 2}, {3})).to_vector() ==
        std::vector<double>{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11});
  CHECK(index_select(x, 1, ids({3, 1}, {2})).to_vector() == std::vector<double>{3, 1, 7, 5, 11, 9});
  // out[i][j] = x[i][index[i][j]]
  CHECK(gather(x, 1, ids({1, 1, 0, 3, 2, 0}, {3, 2})).to_vector() == std::vector<double>{1, 1, 4, 7, 10, 8});
  // out[i][j] = x[index[i][j]][j]
  CHECK(gather(x, 0, ids({2, 0, 1, 1}, {1, 4})).to_vector() == std::vector<double>{8, 1, 6, 7});
  Tensor h = one_hot(ids({2, 0, 1, 2}, {2, 2}), 3);
  CHECK(h.shape() == Shape{2, 2, 3});
  CHECK(h.dtype() == DType::F32);
  CHECK(h.to_vector() == std::vector<double>{0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1});
  CHECK(one_hot(ids({1}, {1}), 2, DType::I64).to_vector() == std::vector<double>{0, 1});
}

TEST_CASE("index: embedding rows and gradients that accumulate over repeated ids") {
  Tensor w = reshape(arange(8), {4, 2});
  w.set_requires_grad(true);
  Tensor e = embedding(w, ids({3, 1, 3, 3}, {2, 2}));
  CHECK(e.shape() == Shape{2, 2, 2});
  CHECK(e.to_vector() == std::vector<double>{6, 7, 2, 3, 6, 7, 6, 7});
  e.backward(ones(e.shape()));
  CHECK(w.grad().to_vector() == std::vector<double>{0, 0, 1, 1, 0, 0, 3, 3});
}

TEST_CASE("index: large scatters (threaded) accumulate every contribution") {
  const int64_t V = 7, D = 64, N = 5000;
  std::vector<double> idv(N), counts(V, 0);
  for (int64_t i = 0; i < N; ++i) {
    idv[size_t(i)] = double((i * i) % V);
    counts[size_t((i * i) % V)] += 1;
  }
  Tensor w = zeros({V, D}, DType::F64);
  w.set_requires_grad(true);
  Tensor e = embedding(w, ids(idv, {N}));
  e.backward(ones(e.shape(), DType::F64));
  Tensor x = zeros({V, D}, DType::F64);
  x.set_requires_grad(true);
  Tensor s = index_select(x, 0, ids(idv, {N}));
  s.backward(ones(s.shape(), DType::F64));
  for (int64_t v = 0; v < V; ++v) {
    CHECK(w.grad().at({v, 0}) == counts[size_t(v)]);
    CHECK(w.grad().at({v, D - 1}) == counts[size_t(v)]);
    CHECK(x.grad().at({v, D / 2}) == counts[size_t(v)]);
  }
  // gather over many rows (threaded by row) against its definition
  Tensor src = uniform({N, 5}, 9);
  Tensor gi = ids(std::vector<double>(size_t(N) * 2, 4), {N, 2});
  Tensor gout = gather(src, 1, gi);
  CHECK(gout.at({N - 1, 1}) == src.at({N - 1, 4}));
  CHECK(gout.at({1234, 0}) == src.at({1234, 4}));
}

TEST_CASE("index: errors name the op, the shapes and the bad index") {
  Tensor x = zeros({3, 4});
  CHECK_THROWS_WITH(concat({x, zeros({3, 5})}, 0), "concat: shapes [3, 4] and [3, 5] differ outside axis 0");
  CHECK_THROWS_WITH(concat({x, zeros({3})}, 1), "concat: shapes [3, 4] and [3] differ outside axis 1");
  CHECK_THROWS_WITH(concat({x, zeros({3, 4}, DType::F64)}, 0), "concat: dtypes differ (f32 [3, 4] vs f64 [3, 4])");
  CHECK_THROWS_WITH(concat({}, 0), "concat: no tensors to join");
  CHECK_THROWS_WITH(split(x, 0, 1), "split: size must be positive, got 0");
  CHECK_THROWS_WITH(chunk(x, 0, 1), "chunk: chunks must be positive, got 0");
  CHECK_THROWS_WITH(index_select(x, 0, ids({0, 3}, {2})),
                    "index_select: index 3 out of range [0, 3) for axis 0 of x of shape [3, 4]");
  CHECK_THROWS_WITH(index_select(x, 1, ids({-1}, {1})),
                    "index_select: index -1 out of range [0, 4) for axis 1 of x of shape [3, 4]");
  CHECK_THROWS_WITH(index_select(x, 0, ids({0, 1}, {1, 2})), "index_select: index of shape [1, 2] must be 1-D");
  CHECK_THROWS_WITH(index_select(x, 0, zeros({2})), "index_select: index must be i64, got f32 [2]");
  CHECK_THROWS_WITH(index_select(ids({0}, {1}), 0, ids({0}, {1})), "index_select: x must be f32 or f64, got i64 [1]");
  CHECK_THROWS_WITH(gather(x, 1, ids({0, 4}, {1, 2})),
                    "gather: index 4 out of range [0, 4) for axis 1 of x of shape [3, 4]");
  CHECK_THROWS_WITH(gather(x, 1, ids({0, 1}, {2})),
                    "gather: index of shape [2] must have the rank of x of shape [3, 4]");
  CHECK_THROWS_WITH(gather(x, 1, zeros({4, 1}, DType::I64)),
                    "gather: index of shape [4, 1] is larger than x of shape [3, 4] outside axis 1");
  CHECK_THROWS_WITH(one_hot(ids({0, 3}, {2}), 3), "one_hot: index 3 out of range [0, 3) for 3 classes");
  CHECK_THROWS_WITH(one_hot(ids({0}, {1}), 0), "one_hot: num_classes must be positive, got 0");
  CHECK_THROWS_WITH(embedding(x, ids({1, 7}, {2})),
                    "embedding: index 7 out of range [0, 3) for weight of shape [3, 4]");
  CHECK_THROWS_WITH(embedding(zeros({3}), ids({1}, {1})), "embedding: weight of shape [3] must be 2-D [vocab, dim]");
  CHECK_THROWS_WITH(embedding(x, zeros({2})), "embedding: ids must be i64, got f32 [2]");
  // indices are constants: an i64 tensor can never be made to require grad
  CHECK_THROWS_WITH(ids({0}, {1}).set_requires_grad(true),
                    "set_requires_grad: an i64 tensor of shape [1] cannot require grad");
}

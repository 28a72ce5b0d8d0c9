// The f32 ops that run the SIMD kernels of engine/vec_kernels.h give the same bits with 1, 2 and 3 threads:
// rows are never split between threads, and column sums add their rows in a fixed order.
#include <vector>

#include "engine/optim.h"
#include "engine/threadpool.h"
#include "ops/activation.h"
#include "ops/binary.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/reduce.h"
#include "ops/softmax.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::uniform;

namespace {

// Every output and gradient of one f32 training-like pass over [rows, cols] inputs, as flat vectors.
std::vector<std::vector<double>> run_ops() {
  const int64_t rows = 300, cols = 203;  // odd sizes: tails in every row, column blocks of unequal width
  Tensor x = uniform({rows, cols}, 1, -3, 3).to(DType::F32), w = uniform({cols}, 2, 0.5, 1.5).to(DType::F32);
  Tensor b = uniform({cols}, 3).to(DType::F32), h = uniform({rows, cols}, 4).to(DType::F32);
  for (Tensor* t : {&x, &w, &b, &h}) t->set_requires_grad(true);
  const AddNormResult r = add_layer_norm(x, h, w, b);
  const Tensor y = gelu(add(r.normed, b));
  const Tensor logits = add(log_softmax(y, 1), softmax(y, 1));
  Tensor targets = zeros({rows}, DType::I64);
  for (int64_t i = 0; i < rows; ++i) targets.data<int64_t>()[i] = (i * 37) % cols;
  const Tensor loss = add(cross_entropy(logits, targets), mean(mul(r.sum, r.sum)));
  loss.backward();
  Adam opt({{"x", x}, {"w", w}, {"b", b}, {"h", h}}, 1e-2);
  opt.step();
  std::vector<std::vector<double>> out;
  for (const Tensor& t : {loss, y, logits, x.grad(), w.grad(), b.grad(), h.grad(), sum(y, {0}), x, w, b})
    out.push_back(t.detach().to_vector());
  return out;
}

}  // namespace

TEST_CASE("vec ops: f32 softmax, norms, gelu, bias sums, cross-entropy and Adam are bitwise equal on 1, 2, 3 threads") {
  const int saved = num_threads();
  std::vector<std::vector<std::vector<double>>> runs;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    runs.push_back(run_ops());
  }
  set_num_threads(saved);
  for (size_t i = 0; i < runs[0].size(); ++i) {
    INFO("output ", i);
    CHECK(runs[1][i] == runs[0][i]);
    CHECK(runs[2][i] == runs[0][i]);
  }
}

// The collectives of engine/comm.h on the backend this binary is linked with (the MPI one, under mpirun; tests/mpi.sh
// runs it on 2 and 3 ranks). The reference is plain arithmetic on what each rank is known to hold: rank r's buffer
// is f(r, i), so every rank can compute the expected sums in rank order itself, sharing no code with the backend.
// Prints "comm check: ok (N ranks)" on rank 0, or the first failure (exit 1) on the rank that saw it.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/comm.h"
#include "tools/tool_main.h"

using namespace eng;

namespace {

// Values whose f32 sums depend on the order of the additions: 1e8 + 1 + 1 - 1e8 is 0 in one order, 2 in another.
float value(int rank, size_t i) {
  const float big[] = {1e8f, 1.0f, -1e8f, 3.25f};
  return big[size_t(rank) % 4] * float(1 + i % 7) + float(i) * 1e-3f;
}

void expect(bool ok, const std::string& what, int rank) {
  if (!ok) throw std::runtime_error("comm check: rank " + std::to_string(rank) + ": " + what);
}

int run() {
  Communicator& c = world();
  const int n = c.size(), me = c.rank();
  const size_t len = 1001;  // not a multiple of 2 or 3: uneven slices
  std::vector<float> x(len), ordered(len);
  for (size_t i = 0; i < len; ++i) {
    x[i] = value(me, i);
    ordered[i] = value(0, i);
    for (int r = 1; r < n; ++r) ordered[i] += value(r, i);  // ((x_0 + x_1) + x_2): the exact order
  }
  std::vector<float> exact = x;
  c.all_reduce_sum(exact.data(), len, ReduceOrder::Exact);
  expect(std::memcmp(exact.data(), ordered.data(), len * sizeof(float)) == 0, "exact all-reduce != the sum in rank "
         "order", me);

  std::vector<float> fast = x;
  c.start_all_reduce(fast.data(), len)->wait();
  for (size_t i = 0; i < len; ++i) {
    double sum = 0, scale = 0;
    for (int r = 0; r < n; ++r) sum += double(value(r, i)), scale += std::fabs(double(value(r, i)));
    expect(std::fabs(double(fast[i]) - sum) <= 1e-6 * scale + 1e-6, "fast all-reduce far from the sum at " +
           std::to_string(i), me);
  }

  const std::vector<size_t> offsets = even_slices(len, n);
  std::vector<float> slice(offsets[size_t(me) + 1] - offsets[size_t(me)]);
  c.reduce_scatter_sum(x.data(), slice.data(), offsets);
  expect(slice.empty() || std::memcmp(slice.data(), ordered.data() + offsets[size_t(me)], slice.size() * 4) == 0,
         "reduce-scatter != this rank's slice of the ordered sum", me);

  std::vector<float> gathered(len, -1.0f);
  for (size_t i = offsets[size_t(me)]; i < offsets[size_t(me) + 1]; ++i) gathered[i] = float(me) + float(i);
  c.all_gather(gathered.data(), offsets);
  for (int r = 0; r < n; ++r)
    for (size_t i = offsets[size_t(r)]; i < offsets[size_t(r) + 1]; ++i)
      expect(gathered[i] == float(r) + float(i), "all-gather: element " + std::to_string(i) + " is not rank " +
             std::to_string(r) + "'s", me);

  std::vector<float> b(5, float(me));
  c.broadcast(b.data(), b.size(), n - 1);
  expect(b[4] == float(n - 1), "broadcast from the last rank", me);
  const int64_t mine = 1000 + me;
  std::vector<int64_t> all(static_cast<size_t>(n));
  c.all_gather_bytes(&mine, sizeof mine, all.data());
  for (int r = 0; r < n; ++r) expect(all[size_t(r)] == 1000 + r, "all_gather_bytes", me);
  c.barrier();
  if (me == 0) std::printf("comm check: ok (%d ranks, %s backend)\n", n, c.backend().c_str());
  return 0;
}

}  // namespace

int main() {
  const int status = tool_main(run, "comm check: out of memory");
  if (status != 0 && world().size() > 1) world().abort(status);
  return status;
}

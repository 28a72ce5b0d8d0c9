// The single-process communicator (engine/comm.h): one rank, every collective leaves the data as it is or copies
// it, checked against the buffers written here; even_slices against its formula. The MPI backend is checked by
// tests/mpi/comm_check.cpp under mpirun (make MPI=1 test-mpi).
#include <doctest/doctest.h>

#include <vector>

#include "engine/comm.h"
#include "engine/error.h"

using namespace eng;

TEST_CASE("comm: the single process is rank 0 of 1 and its collectives keep the data") {
  Communicator& c = single_process();
  CHECK(c.rank() == 0);
  CHECK(c.size() == 1);
  CHECK(c.backend() == "single");
  CHECK(&world() == &c);  // the default build links no other backend
  std::vector<float> x{1.5f, -2.0f, 1e8f};
  const std::vector<float> before = x;
  c.all_reduce_sum(x.data(), x.size(), ReduceOrder::Exact);
  CHECK(x == before);
  c.start_all_reduce(x.data(), x.size())->wait();
  CHECK(x == before);
  std::vector<float> out(3, 0.0f);
  c.reduce_scatter_sum(x.data(), out.data(), {0, 3});
  CHECK(out == before);
  c.all_gather(x.data(), {0, 3});
  c.broadcast(x.data(), x.size(), 0);
  CHECK(x == before);
  long long in = 42, got = 0;
  c.all_gather_bytes(&in, sizeof in, &got);
  CHECK(got == 42);
  CHECK_THROWS_WITH_AS(c.broadcast(x.data(), 1, 1), "comm: broadcast from rank 1 of 1", Error);
  CHECK_THROWS_AS(c.reduce_scatter_sum(x.data(), out.data(), {0, 1, 3}), Error);
}

TEST_CASE("comm: even_slices cover n in parts whose lengths differ by at most one") {
  CHECK(even_slices(10, 3) == std::vector<size_t>{0, 3, 6, 10});
  CHECK(even_slices(2, 3) == std::vector<size_t>{0, 0, 1, 2});
  CHECK(even_slices(0, 2) == std::vector<size_t>{0, 0, 0});
  CHECK_THROWS_AS(even_slices(5, 0), Error);
}

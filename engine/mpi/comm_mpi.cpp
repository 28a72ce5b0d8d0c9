// The Open MPI backend of engine/comm.h, the only file that includes <mpi.h>; `make MPI=1` compiles it with
// `mpicxx --showme:compile` and links it into build/mpi/ beside the unchanged library (docs/distributed.md).
// Exact sums are an ordered reduce-scatter (MPI_Alltoallv brings every rank's copy of a slice to its owner, who
// adds them in rank order) followed by MPI_Allgatherv: the bandwidth of a ring all-reduce, and bits that do not
// depend on timing. Errors are fatal (MPI_ERRORS_ARE_FATAL): a rank that dies makes mpirun end the others.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "engine/comm.h"
#include "engine/error.h"

namespace eng {
namespace {

class MpiReduce : public PendingReduce {
 public:
  explicit MpiReduce(MPI_Request r) : request_(r) {}
  ~MpiReduce() override { wait(); }
  void wait() override {
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  bool test() override {
    int done = 1;
    if (request_ != MPI_REQUEST_NULL) MPI_Test(&request_, &done, MPI_STATUS_IGNORE);
    return done != 0;
  }

 private:
  MPI_Request request_;
};

int as_count(size_t n, const char* what) {
  ENG_CHECK(n <= size_t(1 << 30) * 2 - 1, "comm (mpi): ", what, " of ", n, " elements is beyond MPI's int counts");
  return int(n);
}

class Mpi : public Communicator {
 public:
  Mpi() {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);  // MPI calls come from the main thread only
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~Mpi() override { MPI_Finalize(); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  void all_reduce_sum(float* data, size_t n, ReduceOrder order) override {
    if (size_ == 1 || n == 0) return;
    if (order == ReduceOrder::Fast) {
      MPI_Allreduce(MPI_IN_PLACE, data, as_count(n, "all_reduce_sum"), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      return;
    }
    const std::vector<size_t> offsets = even_slices(n, size_);
    const size_t mine = offsets[size_t(rank_) + 1] - offsets[size_t(rank_)];
    std::vector<float> slice(mine);
    reduce_scatter_sum(data, slice.data(), offsets);
    if (mine > 0) std::memcpy(data + offsets[size_t(rank_)], slice.data(), mine * sizeof(float));
    all_gather(data, offsets);
  }

  std::unique_ptr<PendingReduce> start_all_reduce(float* data, size_t n) override {
    MPI_Request r = MPI_REQUEST_NULL;
    if (size_ > 1 && n > 0)
      MPI_Iallreduce(MPI_IN_PLACE, data, as_count(n, "start_all_reduce"), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
    return std::make_unique<MpiReduce>(r);
  }

  // Rank r receives every rank's copy of its slice, [size, slice] in rank order, and adds them in that order.
  void reduce_scatter_sum(const float* in, float* out, const std::vector<size_t>& offsets) override {
    check_offsets(offsets, "reduce_scatter_sum");
    const size_t mine = offsets[size_t(rank_) + 1] - offsets[size_t(rank_)];
    std::vector<int> send_counts(static_cast<size_t>(size_)), send_displs(send_counts), recv_counts(send_counts),
        recv_displs(send_counts);
    for (int r = 0; r < size_; ++r) {
      send_counts[size_t(r)] = as_count(offsets[size_t(r) + 1] - offsets[size_t(r)], "a slice");
      send_displs[size_t(r)] = as_count(offsets[size_t(r)], "an offset");
      recv_counts[size_t(r)] = int(mine);
      recv_displs[size_t(r)] = as_count(mine * size_t(r), "the gathered slices");
    }
    std::vector<float> copies(mine * size_t(size_));
    MPI_Alltoallv(in, send_counts.data(), send_displs.data(), MPI_FLOAT, copies.data(), recv_counts.data(),
                  recv_displs.data(), MPI_FLOAT, MPI_COMM_WORLD);
    if (mine == 0) return;
    std::memcpy(out, copies.data(), mine * sizeof(float));
    for (int r = 1; r < size_; ++r) {
      const float* c = copies.data() + mine * size_t(r);
      for (size_t i = 0; i < mine; ++i) out[i] += c[i];
    }
  }

  void all_gather(float* data, const std::vector<size_t>& offsets) override {
    check_offsets(offsets, "all_gather");
    std::vector<int> counts(static_cast<size_t>(size_)), displs(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      counts[size_t(r)] = as_count(offsets[size_t(r) + 1] - offsets[size_t(r)], "a slice");
      displs[size_t(r)] = as_count(offsets[size_t(r)], "an offset");
    }
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts.data(), displs.data(), MPI_FLOAT, MPI_COMM_WORLD);
  }

  void all_gather_bytes(const void* in, size_t n, void* out) override {
    MPI_Allgather(in, as_count(n, "all_gather_bytes"), MPI_BYTE, out, int(n), MPI_BYTE, MPI_COMM_WORLD);
  }
  void broadcast(float* data, size_t n, int root) override {
    MPI_Bcast(data, as_count(n, "broadcast"), MPI_FLOAT, root, MPI_COMM_WORLD);
  }
  void broadcast_bytes(void* data, size_t n, int root) override {
    MPI_Bcast(data, as_count(n, "broadcast_bytes"), MPI_BYTE, root, MPI_COMM_WORLD);
  }
  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }
  [[noreturn]] void abort(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 private:
  void check_offsets(const std::vector<size_t>& offsets, const char* op) const {
    ENG_CHECK(offsets.size() == size_t(size_) + 1 && offsets[0] == 0, "comm (mpi): ", op, " needs ", size_ + 1,
              " offsets from 0, got ", offsets.size());
    for (size_t r = 1; r < offsets.size(); ++r)
      ENG_CHECK(offsets[r] >= offsets[r - 1], "comm (mpi): ", op, ": offsets must not decrease");
  }

  int rank_ = 0, size_ = 1;
};

Communicator& mpi_world() {
  static Mpi mpi;
  return mpi;
}

const bool registered = register_world_backend(mpi_world);

}  // namespace
}  // namespace eng

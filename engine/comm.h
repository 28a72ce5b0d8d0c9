// The processes of a data-parallel job and the collectives between them (docs/distributed.md), over flat host
// buffers. Two backends: the single process (this library; rank 0 of 1, every collective a copy) and Open MPI
// (engine/mpi/comm_mpi.cpp, linked only by `make MPI=1`; the one file that includes <mpi.h>). world() is the
// backend the binary was linked with.
//
// Contract, on every backend:
// - Every rank calls the same collectives in the same order with the same counts; a rank that dies ends the job
//   (the MPI backend aborts every rank, never waits on a dead one).
// - all_reduce_sum(..., Exact) sums in rank order, out = ((x_0 + x_1) + x_2) + ..., element by element in f32, and
//   every rank receives the same bits: the result does not depend on timing, and equals what one process computes
//   by adding the same buffers in the same order. Fast leaves the order to the backend (MPI_Allreduce): faster,
//   equal to Exact within rounding.
// - reduce_scatter_sum is the Exact sum of rank r's slice [offsets[r], offsets[r+1]) delivered to rank r only.
// - Buffers are host memory. A device (CUDA) buffer stages through the host for now; a device path would add
//   overloads taking device pointers, not change these.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace eng {

enum class ReduceOrder { Exact, Fast };

// A non-blocking Fast all-reduce in flight (Communicator::start_all_reduce); wait() returns once the buffer holds
// the sum. Destroying one that was not waited on waits.
class PendingReduce {
 public:
  virtual ~PendingReduce() = default;
  virtual void wait() = 0;
  // Whether it is done, without blocking; calling it lets the backend move the reduction on (Open MPI progresses
  // non-blocking collectives only inside MPI calls).
  virtual bool test() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "single" or "mpi"

  // In place: data[0, n) becomes the sum over ranks (contract above).
  virtual void all_reduce_sum(float* data, size_t n, ReduceOrder order) = 0;
  // Starts a Fast all-reduce of data[0, n) in place; the buffer must not be touched until wait().
  virtual std::unique_ptr<PendingReduce> start_all_reduce(float* data, size_t n) = 0;
  // in[0, offsets[size]) on every rank; out[0, offsets[rank+1] - offsets[rank]) receives the Exact sum of this
  // rank's slice. offsets has size() + 1 nondecreasing entries, from 0.
  virtual void reduce_scatter_sum(const float* in, float* out, const std::vector<size_t>& offsets) = 0;
  // Each rank's slice data[offsets[r], offsets[r+1]) is sent to every rank, in place.
  virtual void all_gather(float* data, const std::vector<size_t>& offsets) = 0;
  // n bytes from every rank, concatenated in rank order into out[0, n * size()).
  virtual void all_gather_bytes(const void* in, size_t n, void* out) = 0;
  // root's data[0, n) to every rank.
  virtual void broadcast(float* data, size_t n, int root) = 0;
  virtual void broadcast_bytes(void* data, size_t n, int root) = 0;
  virtual void barrier() = 0;
  // Ends every rank of the job with exit code `code`, once this rank has printed why (a fault on one rank that the
  // others cannot learn of through a collective). The single backend exits.
  [[noreturn]] virtual void abort(int code) = 0;
};

// The job's communicator: the MPI backend when linked in (it starts MPI on the first call), else one process.
Communicator& world();

// The single process's communicator, whatever the build (the tests compare it with the MPI backend's results).
Communicator& single_process();

// Backends other than the single process register a factory here at static initialisation (engine/mpi/).
bool register_world_backend(std::function<Communicator&()> make);

// The slices of n elements over `parts` ranks: offsets[r] = r * n / parts (rounded down), so the first slices
// are at most one element shorter than the last; offsets.size() == parts + 1.
std::vector<size_t> even_slices(size_t n, int parts);

}  // namespace eng

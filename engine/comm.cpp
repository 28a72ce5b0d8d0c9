// The single-process backend of engine/comm.h and the choice of world(): one rank, every collective the identity
// or a copy.
#include "engine/comm.h"

#include <cstdlib>
#include <cstring>

#include "engine/error.h"

namespace eng {
namespace {

class Done : public PendingReduce {
 public:
  void wait() override {}
  bool test() override { return true; }
};

class SingleProcess : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "single"; }
  void all_reduce_sum(float*, size_t, ReduceOrder) override {}
  std::unique_ptr<PendingReduce> start_all_reduce(float*, size_t) override { return std::make_unique<Done>(); }
  void reduce_scatter_sum(const float* in, float* out, const std::vector<size_t>& offsets) override {
    ENG_CHECK(offsets.size() == 2 && offsets[0] == 0, "comm: reduce_scatter_sum needs 2 offsets from 0 for one rank");
    if (offsets[1] > 0 && in != out) std::memmove(out, in, offsets[1] * sizeof(float));
  }
  void all_gather(float*, const std::vector<size_t>& offsets) override {
    ENG_CHECK(offsets.size() == 2 && offsets[0] == 0, "comm: all_gather needs 2 offsets from 0 for one rank");
  }
  void all_gather_bytes(const void* in, size_t n, void* out) override {
    if (n > 0 && in != out) std::memmove(out, in, n);
  }
  void broadcast(float*, size_t, int root) override { ENG_CHECK(root == 0, "comm: broadcast from rank ", root, " of 1"); }
  void broadcast_bytes(void*, size_t, int root) override {
    ENG_CHECK(root == 0, "comm: broadcast from rank ", root, " of 1");
  }
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }
};

std::function<Communicator&()>& world_factory() {
  static std::function<Communicator&()> make;
  return make;
}

}  // namespace

Communicator& single_process() {
  static SingleProcess single;
  return single;
}

Communicator& world() {
  const auto& make = world_factory();
  return make ? make() : single_process();
}

bool register_world_backend(std::function<Communicator&()> make) {
  world_factory() = std::move(make);
  return true;
}

std::vector<size_t> even_slices(size_t n, int parts) {
  ENG_CHECK(parts > 0, "comm: even_slices over ", parts, " parts");
  std::vector<size_t> offsets(size_t(parts) + 1);
  for (int r = 0; r <= parts; ++r) offsets[size_t(r)] = size_t(uint64_t(r) * n / uint64_t(parts));
  return offsets;
}

}  // namespace eng

// bench train: tokens/s of a training step of the reference model:
//   4-layer decoder-only, d_model 256, 8 heads, FFN 1024, vocab 256, batch 16 x 256, Adam.
// With --vs-torch it also runs the same step in PyTorch (tools/reference/train_step_torch.py, which needs
// python3-torch; nothing else in the build does) right after ours, and prints the ratio.
// Under mpirun (build/mpi/bench, make MPI=1) it times build/train's data-parallel step (tools/train/data_parallel.h)
// with --batch split over the ranks: tokens/s of the whole job, the time per step spent waiting in collectives, the
// bytes each rank sends, and each rank's peak tensor memory and optimizer state (--shard-optimizer: ZeRO-1).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "engine/allocator.h"
#include "engine/cli.h"
#include "engine/comm.h"
#include "engine/error.h"
#include "engine/optim.h"
#include "engine/threadpool.h"
#include "models/transformer.h"
#include "ops/loss.h"
#include "ops/mixed_precision.h"
#include "ops/view.h"
#include "tools/bench.h"
#include "tools/train/data_parallel.h"
#include "tools/train/optimizer_shard.h"

using namespace eng;

namespace {

double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Runs tools/reference/train_step_torch.py with PyTorch at its best on 2 cores (jemalloc when installed, passive
// OpenMP waits, OpenBLAS left to pick its own kernels) and returns the tokens/s it reports.
double torch_tokens_per_s(const std::string& python, const std::vector<int64_t>& args) {
  std::string cmd = "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=passive";
  const char* jemalloc = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
  if (FILE* f = std::fopen(jemalloc, "r")) {
    std::fclose(f);
    cmd += std::string(" LD_PRELOAD=") + jemalloc + " MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1,thp:always,metadata_thp:auto";
  }
  // Single-quoted for the shell, so that a --python path with spaces or quotes is one word, not commands.
  std::string quoted = "'";
  for (char c : python) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  cmd += " " + quoted + "' tools/reference/train_step_torch.py";
  for (int64_t a : args) cmd += " " + std::to_string(a);
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  ENG_CHECK(pipe, "bench train --vs-torch: cannot run '", cmd, "'");
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe)) out += buf;
  const int status = pclose(pipe);
  const size_t at = out.rfind("\"tokens_per_s\": ");
  ENG_CHECK(status == 0 && at != std::string::npos, "bench train --vs-torch: '", cmd,
            "' failed (run it from the repository root, with python3-torch installed); it printed:\n", out);
  const double tokens_per_s = std::strtod(out.c_str() + at + 16, nullptr);
  ENG_CHECK(std::isfinite(tokens_per_s) && tokens_per_s > 0, "bench train --vs-torch: '", cmd,
            "' reported no positive tokens_per_s; it printed:\n", out);
  return tokens_per_s;
}

// Random tokens for the model: the data-parallel step draws each micro-batch through a Job (tools/train/job.h).
class RandomTokensJob : public jobs::Job {
 public:
  RandomTokensJob(LanguageModel& model, int64_t seq) : model_(model), seq_(seq) {}
  Module& model() override { return model_; }
  Rng& model_rng() override { return model_.rng(); }
  jobs::StepResult run_rows(const Rng& data, int64_t first_row, int64_t batch) override {
    const int64_t vocab = model_.config().vocab;
    Tensor ids = empty({batch, seq_ + 1}, DType::I64);
    for (int64_t i = 0; i < batch; ++i) {
      Rng row = data.fork(uint64_t(first_row + i));
      int64_t* r = ids.data<int64_t>() + i * (seq_ + 1);
      for (int64_t t = 0; t <= seq_; ++t) r[t] = int64_t(row.below(uint64_t(vocab)));
    }
    const Tensor inputs = narrow(ids, 1, 0, seq_).contiguous(), targets = narrow(ids, 1, 1, seq_).contiguous();
    jobs::StepResult r;
    r.loss = cross_entropy(reshape(model_.forward(inputs), {-1, vocab}), reshape(targets, {-1}));
    r.tokens = batch * seq_;
    return r;
  }

 private:
  LanguageModel& model_;
  int64_t seq_;
};

double state_mib(const Optimizer& opt) {
  double bytes = 0;
  for (const auto& [name, t] : opt.state()) bytes += double(t.numel()) * double(dtype_size(t.dtype()));
  return bytes / (1 << 20);
}

// The data-parallel step of build/train over world()'s ranks, Adam as above; rank 0 prints.
int bench_data_parallel(LanguageModel& model, int64_t batch, int64_t seq, int64_t steps, bool fast, bool shard,
                        const std::string& header) {
  Communicator& comm = world();
  ENG_CHECK(batch % comm.size() == 0, "bench train: --batch ", batch, " does not split over ", comm.size(), " ranks");
  const NamedTensors named = model.named_parameters();
  std::vector<Tensor> params;
  for (const auto& np : named) params.push_back(np.second);
  std::unique_ptr<jobs::OptimizerShard> sharded = shard ? std::make_unique<jobs::OptimizerShard>(comm, named) : nullptr;
  Adam opt(sharded ? sharded->pieces() : named, 1e-4);
  jobs::DataParallel dp(comm, params, 1, fast ? ReduceOrder::Fast : ReduceOrder::Exact);
  if (sharded) dp.shard_gradients();
  RandomTokensJob job(model, seq);
  Rng data(1);
  double gather_s = 0;
  auto step = [&] {
    for (Tensor& p : params) p.zero_grad();
    dp.forward_backward(job, data, batch / comm.size());
    dp.finish(INFINITY);
    if (sharded) sharded->set_piece_grads(dp.sums(), dp.has_grad());
    opt.step();
    if (!sharded) return;
    const auto t0 = std::chrono::steady_clock::now();
    sharded->gather_parameters();
    gather_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int i = 0; i < 2; ++i) step();  // the first step also learns --reduce fast's buckets
  allocator::reset_peak();
  comm.barrier();
  const double comm0 = dp.comm_seconds(), gather0 = gather_s;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) step();
  comm.barrier();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / double(steps);
  const double comm_s = (dp.comm_seconds() - comm0 + gather_s - gather0) / double(steps);
  const double mine[2] = {double(allocator::stats().peak_bytes) / (1 << 20), state_mib(opt)};
  std::vector<double> all(2 * size_t(comm.size()));
  comm.all_gather_bytes(mine, sizeof mine, all.data());
  if (comm.rank() != 0) return 0;
  const size_t n = size_t(model.num_parameters()), ranks = size_t(comm.size());
  const double sent = double(dp.bytes_per_step() + (sharded ? (ranks - 1) * n * 4 / ranks : 0)) / (1 << 20);
  std::printf("%s, %d ranks, --reduce %s%s\n", header.c_str(), comm.size(), fast ? "fast" : "exact",
              sharded ? ", --shard-optimizer" : "");
  std::printf("  %lld parameters, %.3f s/step, %.0f tokens/s, communication %.3f s/step (rank 0's waits), "
              "%.2f MiB sent per rank per step\n",
              (long long)n, s, double(batch * seq) / s, comm_s, sent);
  for (size_t r = 0; r < ranks; ++r)
    std::printf("  rank %zu: peak tensor memory %.1f MiB, optimizer state %.2f MiB\n", r, all[2 * r], all[2 * r + 1]);
  return 0;
}

int bench_train(int argc, char** argv) {
  Cli cli("bench train", "Times training steps of a decoder-only transformer on random tokens.");
  auto& layers = cli.add_int("layers", 4, {1, 1024}, "layers");
  auto& d_model = cli.add_int("d-model", 256, {1, 1 << 16}, "model width");
  auto& heads = cli.add_int("heads", 8, {1, 1024}, "heads");
  auto& d_ff = cli.add_int("d-ff", 1024, {1, 1 << 18}, "feed-forward width");
  auto& vocab = cli.add_int("vocab", 256, {2, 1 << 24}, "vocabulary");
  auto& batch = cli.add_int("batch", 16, {1, 1 << 16}, "sequences per step");
  auto& seq = cli.add_int("seq-len", 256, {1, 1 << 20}, "tokens per sequence");
  auto& attention = cli.add_string("attention", "softmax", "attention variant");
  auto& steps = cli.add_int("steps", 5, {1, 1000000}, "timed steps (after 2 warm-up steps)");
  auto& threads = cli.add_int("threads", 2, {1, 1024}, "threads");
  auto& vs_torch = cli.add_bool("vs-torch", false, "also time PyTorch on the same model (needs python3-torch)");
  auto& python = cli.add_string("python", "/usr/bin/python3", "the Python with torch, for --vs-torch");
  auto& precision_flag = cli.add_string("precision", "fp32",
                                         "fp32, or bf16: mixed precision, bf16 matrix products accumulated in f32 "
                                         "(ops/mixed_precision.h); PyTorch runs fp32 either way");
  auto& reduce = cli.add_string("reduce", "exact", "under mpirun: exact or fast (as build/train --reduce)");
  auto& shard = cli.add_bool("shard-optimizer", false, "the data-parallel step with ZeRO-1 (as build/train)");
  if (!cli.parse(argc, argv, 2)) return 0;
  ENG_CHECK(reduce == "exact" || reduce == "fast", "bench train: --reduce must be exact or fast, got '", reduce, "'");
  const GemmPrecision precision = parse_precision(precision_flag, "bench train: --precision");
  ENG_CHECK(vs_torch || !cli.was_set("python"), "bench train: --python is for --vs-torch");
  set_num_threads(int(threads));
  TransformerConfig c;
  c.vocab = vocab;
  c.d_model = d_model;
  c.heads = heads;
  c.d_ff = d_ff;
  c.decoder_layers = layers;
  c.max_len = seq;
  c.attention = attention;
  c.positional = PositionalKind::Learned;
  LanguageModel model(c);
  if (world().size() > 1 || shard) {
    ENG_CHECK(!vs_torch && precision == GemmPrecision::F32, "bench train: under mpirun, no --vs-torch or --precision");
    char header[256];
    std::snprintf(header, sizeof header, "bench train: %lld layers, d_model %lld, batch %lld x %lld, Adam, attention "
                  "%s, %d threads per rank", (long long)layers, (long long)d_model, (long long)batch, (long long)seq,
                  attention.c_str(), num_threads());
    return bench_data_parallel(model, batch, seq, steps, reduce == "fast", shard, header);
  }
  Adam opt(model.named_parameters(), 1e-4);
  Rng rng(1);
  Tensor ids = empty({batch, seq + 1}, DType::I64);
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = int64_t(rng.below(uint64_t(vocab)));
  Tensor inputs = narrow(ids, 1, 0, seq).contiguous(), targets = narrow(ids, 1, 1, seq).contiguous();
  auto step = [&] {
    PrecisionScope scope(precision);
    Tensor logits = model.forward(inputs);
    Tensor loss = cross_entropy(reshape(logits, {-1, vocab}), reshape(targets, {-1}));
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss.item();
  };
  for (int i = 0; i < 2; ++i) step();
  allocator::reset_peak();
  // Beside the mean: the fastest step and the process's CPU time per step, which a loaded machine disturbs less.
  const double cpu0 = process_cpu_seconds();
  double fastest = INFINITY;
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) {
    const auto ts = std::chrono::steady_clock::now();
    step();
    fastest = std::min(fastest, std::chrono::duration<double>(std::chrono::steady_clock::now() - ts).count());
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / double(steps);
  const double cpu = (process_cpu_seconds() - cpu0) / double(steps);
  double tps = double(batch * seq) / s;
  std::printf("bench train: %lld layers, d_model %lld, %lld heads, d_ff %lld, vocab %lld, batch %lld x %lld, Adam, "
              "attention %s, %s, %d threads\n",
              (long long)layers, (long long)d_model, (long long)heads, (long long)d_ff, (long long)vocab,
              (long long)batch, (long long)seq, attention.c_str(), precision_name(precision), num_threads());
  std::printf("  %lld parameters, %.3f s/step, %.0f tokens/s, peak memory %.1f MiB\n",
              (long long)model.num_parameters(), s, tps, double(allocator::stats().peak_bytes) / (1 << 20));
  std::printf("  fastest step %.3f s (%.0f tokens/s); CPU time %.3f s/step (all threads)\n", fastest,
              double(batch * seq) / fastest, cpu);
  if (!vs_torch) return 0;
  const double torch_tps = torch_tokens_per_s(python, {layers, d_model, heads, d_ff, vocab, batch, seq,
                                                       int64_t(num_threads()), steps});
  std::printf("  PyTorch, same model, batch, steps and threads, measured just after: %.0f tokens/s\n", torch_tps);
  std::printf("  ours / PyTorch: %.2f\n", tps / torch_tps);
  return 0;
}

ENG_REGISTER_BENCH("train", "tokens/s of a training step of the reference decoder-only model", bench_train);

}  // namespace

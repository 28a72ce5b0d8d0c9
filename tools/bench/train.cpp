// bench train: tokens/s of a training step of the reference model (anchors: ../shared/anchors.md):
//   4-layer decoder-only, d_model 256, 8 heads, FFN 1024, vocab 256, batch 16 x 256, Adam.
#include <chrono>
#include <cstdio>
#include <string>

#include "engine/allocator.h"
#include "engine/cli.h"
#include "engine/error.h"
#include "engine/optim.h"
#include "engine/threadpool.h"
#include "models/transformer.h"
#include "ops/loss.h"
#include "ops/view.h"
#include "tools/bench.h"

using namespace eng;

namespace {

int bench_train(int argc, char** argv) {
  Cli cli("bench train", "Times training steps of a decoder-only transformer on random tokens.");
  auto& layers = cli.add_int("layers", 4, "layers");
  auto& d_model = cli.add_int("d-model", 256, "model width");
  auto& heads = cli.add_int("heads", 8, "heads");
  auto& d_ff = cli.add_int("d-ff", 1024, "feed-forward width");
  auto& vocab = cli.add_int("vocab", 256, "vocabulary");
  auto& batch = cli.add_int("batch", 16, "sequences per step");
  auto& seq = cli.add_int("seq-len", 256, "tokens per sequence");
  auto& attention = cli.add_string("attention", "softmax", "attention variant");
  auto& steps = cli.add_int("steps", 5, "timed steps (after 2 warm-up steps)");
  auto& threads = cli.add_int("threads", 2, "threads");
  if (!cli.parse(argc, argv, 2)) return 0;
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
  Adam opt(model.named_parameters(), 1e-4);
  Rng rng(1);
  Tensor ids = empty({batch, seq + 1}, DType::I64);
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = int64_t(rng.below(uint64_t(vocab)));
  Tensor inputs = narrow(ids, 1, 0, seq).contiguous(), targets = narrow(ids, 1, 1, seq).contiguous();
  auto step = [&] {
    Tensor logits = model.forward(inputs);
    Tensor loss = cross_entropy(reshape(logits, {-1, vocab}), reshape(targets, {-1}));
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss.item();
  };
  for (int i = 0; i < 2; ++i) step();
  allocator::reset_peak();
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) step();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / double(steps);
  double tps = double(batch * seq) / s;
  std::printf("bench train: %lld layers, d_model %lld, %lld heads, d_ff %lld, vocab %lld, batch %lld x %lld, Adam, "
              "attention %s, %d threads\n",
              (long long)layers, (long long)d_model, (long long)heads, (long long)d_ff, (long long)vocab,
              (long long)batch, (long long)seq, attention.c_str(), num_threads());
  std::printf("  %lld parameters, %.3f s/step, %.0f tokens/s, peak memory %.1f MiB\n",
              (long long)model.num_parameters(), s, tps, double(allocator::stats().peak_bytes) / (1 << 20));
  std::printf("  for comparison, not measured here: PyTorch 1.13 tuned, same model and batch, 2 threads: 5780 "
              "tokens/s (../shared/anchors.md); ratio %.2f\n", tps / 5780.0);
  return 0;
}

ENG_REGISTER_BENCH("train", "tokens/s of a training step of the reference decoder-only model", bench_train);

}  // namespace

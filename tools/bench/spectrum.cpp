// bench spectrum: the singular values of a trained model's softmax attention maps, Linformer's evidence (Wang et
// al. 2020, §3 and Figure 1) that P = softmax(QKᵀ/√d) is close to low rank. It loads a decoder-only checkpoint
// trained with `softmax` attention on the copy task or on text (`train text`; --data names the corpus), runs it
// on held-out sequences (copy sequences, or windows of the validation split) with a probe that computes the
// same attention by the definition and keeps every P [L, L], decomposes each head's P with our one-sided Jacobi
// SVD (ops/svd.h), and reports per layer the normalised cumulative singular values Σ_{i<=k} σ_i / Σ σ_i averaged
// over heads and sequences, and the k at which they reach 90%; --svg plots the curves.
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "datasets/copy_task.h"
#include "datasets/text.h"
#include "engine/autograd.h"
#include "engine/cli.h"
#include "engine/error.h"
#include "engine/parse_number.h"
#include "engine/safe_text.h"
#include "engine/safetensors.h"
#include "models/checkpoint.h"
#include "models/transformer.h"
#include "ops/attention_mask.h"
#include "ops/binary.h"
#include "ops/matmul.h"
#include "ops/softmax.h"
#include "ops/svd.h"
#include "ops/view.h"
#include "tools/bench.h"
#include "tools/bench/svg_plot.h"

using namespace eng;

namespace {

std::vector<Tensor>& captured() {
  static std::vector<Tensor> maps;
  return maps;
}

// `softmax` attention by the definition (1/√D, the default scale), keeping each call's probabilities. The model
// is rebuilt with it in place of softmax: it has no parameters, so the checkpoint loads unchanged.
class ProbeAttention : public Attention {
 public:
  ProbeAttention() { accepts_.keep = accepts_.bias = accepts_.alibi = accepts_.query_offset = accepts_.cross = true; }
  std::string name() const override { return "spectrum-probe"; }

 protected:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override {
    const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), Lk = k.size(2);
    const Tensor logits = add(mul_scalar(matmul(q, transpose(k, 2, 3)), 1 / std::sqrt(double(q.size(3)))),
                              dense_attention_mask(mask, B, H, Lq, Lk, q.dtype(), "spectrum probe"));
    const Tensor p = softmax(logits, -1);
    captured().push_back(p);
    return matmul(p, v);
  }
};
ENG_REGISTER_ATTENTION(spectrum_probe, "spectrum-probe", "softmax attention that keeps its probabilities (bench spectrum only)",
                       [](const AttentionConfig&) { return std::make_unique<ProbeAttention>(); });

int run(int argc, char** argv) {
  register_attention_spectrum_probe();
  Cli cli("bench spectrum", "Singular values of a trained model's attention maps (Linformer's Figure 1).");
  auto& path = cli.add_string("checkpoint", "", "a decoder-only copy or text checkpoint trained with softmax attention");
  auto& data = cli.add_string("data", "", "text checkpoints: the corpus the model was trained on");
  auto& sequences = cli.add_int("sequences", 8, {1, 4096}, "held-out sequences (of the longest length) to analyse");
  auto& svg = cli.add_string("svg", "", "also plot the cumulative spectra to this SVG file");
  if (!cli.parse(argc, argv, 2)) return 0;
  ENG_CHECK(!path.empty(), "bench spectrum: --checkpoint is required");

  RunConfig run = read_run_config(load_safetensors(path).metadata);
  std::map<std::string, std::string>& config = run.model;
  const std::string task_name = run.task["name"];
  ENG_CHECK((task_name == "copy" || task_name == "text") && config["attention"] == "softmax" &&
                config["attention_options"].empty(),
            "bench spectrum: ", path, " is not a copy or text checkpoint with plain softmax attention (task '",
            terminal_text(task_name), "', attention '", terminal_text(config["attention"]), "', options '",
            terminal_text(config["attention_options"]), "')");
  const int64_t symbols = task_name == "copy" ? parse_int(run.task["symbols"], IntRange::at_least(1),
                                                          "bench spectrum: " + path + ": task.symbols")
                                              : 0;
  TransformerConfig c;
  try {
    c = TransformerConfig::from_map(config);
  } catch (const Error& e) {
    fail("bench spectrum: ", path, ": ", terminal_text(e.what()));
  }
  c.attention = "spectrum-probe";
  LanguageModel model(c);
  load_checkpoint(path, model, nullptr);
  model.eval();

  Rng rng(20260531);
  LMBatch batch;
  if (task_name == "copy") {
    batch = CopyTask(c.max_len, symbols, /*fixed_length=*/true).sample(rng, 0, sequences);
  } else {
    ENG_CHECK(!data.empty(), "bench spectrum: ", path, " is a text model: --data must name its corpus");
    batch = TextCorpus(data).sample(TextSplit::Valid, rng, 0, sequences, c.max_len);
  }
  {
    NoGradGuard no_grad;
    captured().clear();
    model.forward(batch.inputs);
  }
  const int64_t layers = int64_t(captured().size()), H = c.heads, L = batch.inputs.size(1);
  std::printf("bench spectrum: %s (%s), %lld layers x %lld heads, %lld sequences of %lld tokens\n", path.c_str(),
              task_name.c_str(), (long long)layers, (long long)H, (long long)sequences, (long long)L);
  std::printf("normalised cumulative singular value at k (mean over heads and sequences); k90 = smallest k at 90%%\n");
  std::printf("%6s %8s", "layer", "k90");
  std::vector<int64_t> shown;
  for (int64_t k = 1; k <= L; k *= 2) shown.push_back(k);
  if (shown.back() != L) shown.push_back(L);
  for (int64_t k : shown) std::printf(" %7s", ("k=" + std::to_string(k)).c_str());
  std::printf("\n");
  std::vector<bench::Series> series;
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<double> mean(size_t(L), 0.0);
    double k90 = 0;
    const Tensor& p = captured()[size_t(l)];
    for (int64_t b = 0; b < sequences; ++b)
      for (int64_t h = 0; h < H; ++h) {
        const SvdResult r = svd(reshape(narrow(narrow(p, 0, b, 1), 1, h, 1), {L, L}));
        double total = 0, acc = 0;
        for (double s : r.s) total += s;
        bool reached = false;
        for (int64_t k = 0; k < L; ++k) {
          acc += r.s[size_t(k)];
          mean[size_t(k)] += acc / total / double(sequences * H);
          if (!reached && acc >= 0.9 * total) k90 += double(k + 1) / double(sequences * H), reached = true;
        }
      }
    std::printf("%6lld %8.1f", (long long)l, k90);
    for (int64_t k : shown) std::printf(" %7.3f", mean[size_t(k - 1)]);
    std::printf("\n");
    bench::Series s;
    s.name = "layer " + std::to_string(l);
    for (int64_t k = 0; k < L; ++k) s.x.push_back(double(k + 1)), s.y.push_back(mean[size_t(k)]);
    series.push_back(std::move(s));
  }
  if (!svg.empty()) {
    bench::write_svg_plot(svg, "Cumulative singular values of softmax attention maps (L = " + std::to_string(L) + ")",
                          "eigenvalue index k", "normalised cumulative singular value", series,
                          bench::Axes{false, false});
    std::printf("wrote %s\n", svg.c_str());
  }
  return 0;
}

}  // namespace

ENG_REGISTER_BENCH("spectrum", "singular values of a trained softmax model's attention maps (Linformer, Fig. 1)", run);

// Masked character language modelling (BERT's objective, Devlin et al. 2019, at the byte level), the task with
// which Linformer (Wang et al. 2020 §5) evaluates its bidirectional attention: a causal LM cannot use attention
// that mixes future positions, a masked one can. Every byte of a window is masked with probability 15 % (at
// least one per window), replaced by the token 256; the bidirectional model predicts the original bytes at the
// masked positions only, and the loss is reported in bits per masked character. Simplification: every chosen
// byte becomes the mask token (BERT also keeps 10 % and randomises 10 %).
#include <cmath>
#include <cstdio>

#include "datasets/text.h"
#include "engine/autograd.h"
#include "tools/train/job.h"
#include "tools/train/task.h"
#include "tools/train/task_flags.h"

namespace eng::jobs {

namespace {

constexpr int64_t kMask = TextCorpus::kVocab;  // 256, the extra input token
constexpr double kMaskRate = 0.15;

// The windows' input bytes with kMaskRate of them replaced by kMask; targets are the original bytes there and
// kIgnore elsewhere. Window i is row first_row + i of a batch drawn from `stream`: row g's masks are drawn from
// stream.fork(g).fork(1), a stream of its own beside the window's start (stream.fork(g), text.h).
LMBatch mask_bytes(const LMBatch& windows, const Rng& stream, int64_t first_row) {
  const int64_t B = windows.inputs.size(0), L = windows.inputs.size(1);
  LMBatch b{windows.inputs.contiguous().clone(), full({B, L}, double(kIgnore), DType::I64)};
  int64_t* in = b.inputs.data<int64_t>();
  int64_t* tg = b.targets.data<int64_t>();
  for (int64_t i = 0; i < B; ++i) {
    Rng rng = stream.fork(uint64_t(first_row + i)).fork(1);
    int64_t masked = 0;
    for (int64_t t = 0; t < L; ++t)
      if (rng.uniform() < kMaskRate) {
        tg[i * L + t] = in[i * L + t], in[i * L + t] = kMask;
        ++masked;
      }
    if (masked == 0) {  // every window predicts something, so that no batch has an empty loss
      const int64_t t = int64_t(rng.below(uint64_t(L)));
      tg[i * L + t] = in[i * L + t], in[i * L + t] = kMask;
    }
  }
  return b;
}

class MaskedTextJob : public Job {
 public:
  MaskedTextJob(const TransformerConfig& c, const std::string& path, int64_t len)
      : corpus_(path), len_(len), model_(c, false) {}
  Module& model() override { return model_; }
  Rng& model_rng() override { return model_.rng(); }
  void check_data(int64_t) const override { corpus_.check_windows(len_); }
  StepResult run_rows(const Rng& data, int64_t first_row, int64_t batch) override {
    const TextSplit split = model_.training() ? TextSplit::Train : TextSplit::Valid;
    return score(mask_bytes(corpus_.sample(split, data, first_row, batch, len_), data, first_row));
  }
  std::string loss_in_units(double loss) const override {
    char buf[48];
    std::snprintf(buf, sizeof buf, " (%.3f bits/masked char)", loss / std::log(2.0));
    return buf;
  }
  // Every window of the test split, masked by a fixed generator (the same masks for every model, seed and batch).
  std::string final_report(int64_t batch) override {
    NoGradGuard no_grad;
    model_.eval();
    Rng masks(2027);
    const int64_t windows = corpus_.num_windows(TextSplit::Test, len_);
    double nats = 0;
    int64_t chars = 0;
    for (int64_t first = 0; first < windows; first += batch) {
      const LMBatch b = mask_bytes(corpus_.windows(TextSplit::Test, first, std::min(batch, windows - first), len_),
                                   masks, first);
      const StepResult r = score(b);
      nats += r.loss.item() * double(r.counted);
      chars += r.counted;
    }
    model_.train();
    if (chars == 0) return "test split shorter than one window";
    char buf[128];
    std::snprintf(buf, sizeof buf, "test: %.4f bits per masked character over %lld masked characters",
                  nats / double(chars) / std::log(2.0), (long long)chars);
    return buf;
  }

 private:
  StepResult score(const LMBatch& b) { return score_logits(model_, model_.forward(b.inputs), b); }

  TextCorpus corpus_;
  int64_t len_;
  LanguageModel model_;
};

class MaskedTextFlags : public TaskFlags {
 public:
  explicit MaskedTextFlags(Cli& cli) : corpus_(cli), seq_len_(add_seq_len_flag(cli, "longest sequence (the window)")) {}
  std::vector<FlagPath> inputs() const override { return {{"data", corpus_.data}}; }
  TaskPlan plan(const TaskInput& in) const override {
    const std::string path = corpus_.corpus_path("mlm");
    TaskPlan p(in.model);
    p.model.vocab = TextCorpus::kVocab + 1;  // the bytes and the mask token
    p.model.decoder_layers = 0;
    p.model.encoder_layers = in.layers;
    p.model.max_len = seq_len_;
    p.positions = seq_len_;
    p.make_job = [c = p.model, path, len = seq_len_] { return std::make_unique<MaskedTextJob>(c, path, len); };
    return p;
  }

 private:
  CorpusFlag corpus_;
  int64_t& seq_len_;
};

}  // namespace

ENG_REGISTER_TASK("mlm", "masked bytes of --data FILE, 15 % replaced by a mask token: a bidirectional encoder, bits "
                  "per masked character; for attention that cannot be causal, e.g. linformer", false,
                  [](Cli& cli) { return std::make_unique<MaskedTextFlags>(cli); });

}  // namespace eng::jobs

// The decoder-only jobs: the copy task, character-level text, and autoregressive pixels.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "datasets/image_dataset.h"
#include "datasets/pixel_task.h"
#include "datasets/png.h"
#include "datasets/text.h"
#include "engine/autograd.h"
#include "engine/error.h"
#include "models/xl_memory.h"
#include "ops/dmol.h"
#include "ops/index.h"
#include "ops/reduce.h"
#include "ops/softmax.h"
#include "ops/unary.h"
#include "tools/train/job.h"
#include "tools/train/task.h"
#include "tools/train/task_flags.h"

namespace eng::jobs {

namespace {

StepResult score_lm(const LanguageModel& model, const LMBatch& b) {
  return score_logits(model, model.forward(b.inputs), b);
}

class CopyJob : public Job {
 public:
  CopyJob(const TransformerConfig& c, const CopyTask& task) : task_(task), model_(c, true) {}
  Module& model() override { return model_; }
  Rng& model_rng() override { return model_.rng(); }
  StepResult run(int64_t batch, Rng& data) override { return score_lm(model_, task_.sample(batch, data)); }
  // Free-running generation with the model's recurrent form (a KV cache for softmax, the RNN form for
  // linear attention): the prefix is fed, then each copied token is the model's own previous prediction.
  std::string eval_extra(int64_t batch, Rng& data) override {
    if (!model_.layers.front()->self_attn.mechanism().new_state()) return "";  // no recurrent form
    LMBatch b = task_.sample(batch, data);
    const int64_t L = b.inputs.size(1);
    auto state = model_.new_state();
    Tensor cur = empty({batch}, DType::I64), pred;
    int64_t correct = 0, counted = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t t = 0; t < L; ++t) {
      for (int64_t i = 0; i < batch; ++i) {
        const bool generated = t > 0 && b.targets.at({i, t - 1}) != kIgnore;
        cur.data<int64_t>()[i] = generated ? pred.data<int64_t>()[i] : int64_t(b.inputs.at({i, t}));
      }
      pred = argmax(model_.step(cur, state), 1).contiguous();
      for (int64_t i = 0; i < batch; ++i)
        if (b.targets.at({i, t}) != kIgnore) {
          counted++;
          correct += pred.data<int64_t>()[i] == int64_t(b.targets.at({i, t}));
        }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    char buf[128];
    std::snprintf(buf, sizeof buf, ", generated with the recurrent form: accuracy %.2f%%, %.0f tokens/s",
                  100.0 * double(correct) / double(std::max<int64_t>(counted, 1)), double(batch * L) / secs);
    return buf;
  }

 private:
  CopyTask task_;
  LanguageModel model_;
};

// Character-level language modelling on any text file (datasets/text.h: bytes, vocabulary 256, 90/5/5 split):
// training on random windows of the train split; evaluation on fixed random windows of the validation split in
// bits per character, with a sample continued by the recurrent form; at the end, every window of the test split.
class TextJob : public Job {
 public:
  TextJob(const TransformerConfig& c, const std::string& path, int64_t len)
      : corpus_(path), len_(len), model_(c, true) {}
  Module& model() override { return model_; }
  Rng& model_rng() override { return model_.rng(); }
  void check_data(int64_t batch) const override {
    corpus_.check_windows(len_);
    if (model_.config().mem_len == 0) return;
    for (TextSplit s : {TextSplit::Train, TextSplit::Test}) corpus_.num_stream_segments(s, batch, len_);
  }
  StepResult run(int64_t batch, Rng& data) override {
    if (model_.config().mem_len > 0 && model_.training()) {  // Transformer-XL: the next segment of every stream
      const int64_t segments = corpus_.num_stream_segments(TextSplit::Train, batch, len_);
      ENG_CHECK(segments > 0, "train text: the training split is too short for ", batch, " streams of ", len_,
                "-byte segments");
      if (segment_ % segments == 0) memory_ = model_.new_memory();  // a new pass over the streams
      const LMBatch b = corpus_.stream_segment(TextSplit::Train, batch, len_, segment_++ % segments);
      return score_logits(model_, model_.forward(b.inputs, memory_), b);
    }
    return score(corpus_.sample(model_.training() ? TextSplit::Train : TextSplit::Valid, batch, len_, data));
  }
  std::string loss_in_units(double loss) const override {
    char buf[48];
    std::snprintf(buf, sizeof buf, " (%.3f bits/char)", loss / std::log(2.0));
    return buf;
  }
  // Up to 160 bytes sampled (temperature 1) after a prompt from the validation split (a quarter of the window,
  // at most 48 bytes), as long as the window allows; non-printing bytes shown as '.'.
  std::string eval_extra(int64_t, Rng& data) override {
    if (!model_.layers.front()->self_attn.mechanism().new_state()) return "";
    const int64_t prompt_len = std::clamp<int64_t>(len_ / 4, 1, 48);
    const LMBatch prompt = corpus_.sample(TextSplit::Valid, 1, prompt_len, data);
    auto state = model_.new_state();
    std::string text;
    Tensor logits;
    for (int64_t t = 0; t < prompt_len; ++t) {
      const int64_t byte = int64_t(prompt.inputs.at({0, t}));
      text += char(byte);
      logits = model_.step(from_vector(std::vector<double>{double(byte)}, {1}, DType::I64), state);
    }
    text += " | ";
    for (int64_t t = 0; t < 160 && state.length < len_; ++t) {
      const std::vector<double> p = to_device(softmax(logits, -1), Device::CPU).to(DType::F64).to_vector();
      double u = data.uniform();
      int64_t byte = 0;
      while (byte < int64_t(p.size()) - 1 && u >= p[size_t(byte)]) u -= p[size_t(byte++)];
      text += char(byte);
      logits = model_.step(from_vector(std::vector<double>{double(byte)}, {1}, DType::I64), state);
    }
    for (char& ch : text)
      if ((unsigned char)ch < 32 || (unsigned char)ch > 126) ch = '.';
    return "\n  sample: " + text;
  }
  std::string final_report(int64_t batch) override {
    NoGradGuard no_grad;
    model_.eval();
    const int64_t windows = corpus_.num_windows(TextSplit::Test, len_);
    double nats = 0;
    int64_t chars = 0;
    for (int64_t first = 0; first < windows; first += batch) {
      const int64_t n = std::min(batch, windows - first);
      nats += score(corpus_.windows(TextSplit::Test, first, n, len_)).loss.item() * double(n * len_);
      chars += n * len_;
    }
    std::string with_memory;
    if (model_.config().mem_len > 0) with_memory = "\n" + test_with_memory(batch);
    model_.train();
    if (chars == 0) return "test split shorter than one window";
    char buf[128];
    std::snprintf(buf, sizeof buf, "test: %.4f bits/char over %lld characters (%lld windows%s)",
                  nats / double(chars) / std::log(2.0), (long long)chars, (long long)windows,
                  with_memory.empty() ? "" : ", no memory");
    return buf + with_memory;
  }

 private:
  StepResult score(const LMBatch& b) { return score_lm(model_, b); }
  // Transformer-XL's evaluation: the test split as `batch` streams read segment after segment, each segment
  // attending to the memory of the ones before.
  std::string test_with_memory(int64_t batch) {
    const int64_t segments = corpus_.num_stream_segments(TextSplit::Test, batch, len_);
    XLMemory mem = model_.new_memory();
    double nats = 0;
    for (int64_t t = 0; t < segments; ++t) {
      const LMBatch b = corpus_.stream_segment(TextSplit::Test, batch, len_, t);
      nats += score_logits(model_, model_.forward(b.inputs, mem), b).loss.item();
    }
    if (segments == 0) return "test with memory: the test split is too short for the streams";
    char buf[160];
    std::snprintf(buf, sizeof buf, "test with memory: %.4f bits/char over %lld characters (%lld streams, memory %lld)",
                  nats / double(segments) / std::log(2.0), (long long)(segments * batch * len_), (long long)batch,
                  (long long)mem.mem_len);
    return buf;
  }

  TextCorpus corpus_;
  int64_t len_;
  LanguageModel model_;
  XLMemory memory_;
  int64_t segment_ = 0;  // training segments read so far
};

// Autoregressive pixel generation on Fashion-MNIST (or MNIST with --data DIR; Katharopoulos et al. 2020 §4.2.1):
// 784 raster-order pixels, a 256-way softmax per pixel; evaluation in bits/dim on fixed validation images; at the
// end bits/dim on the first --test-images test images and, with --samples PATH, a PNG grid of unconditional
// samples and of test images whose lower half the model completed (the paper's Figure 3), both generated with the
// recurrent form.
// With --mixtures K the model's head gives the 3K parameters of a discretised mixture of logistics per pixel
// (ops/dmol.h, the paper's option) instead of 256 logits.
class PixelJob : public Job {
 public:
  PixelJob(const TransformerConfig& c, ImageSplits splits, int64_t test_images, std::string samples, int64_t mixtures)
      : splits_(std::move(splits)), train_(splits_.train), valid_(splits_.valid), test_(splits_.test),
        test_images_(test_images), samples_(std::move(samples)), mixtures_(mixtures), model_(c, true) {
    // checked before training, not after it: the samples are generated with the recurrent form
    ENG_CHECK(samples_.empty() || model_.layers.front()->self_attn.mechanism().new_state(), "train pixels: --samples "
              "needs an attention variant with a recurrent form (", c.attention, " has none)");
  }
  Module& model() override { return model_; }
  Rng& model_rng() override { return model_.rng(); }
  StepResult run(int64_t batch, Rng& data) override {
    return score((model_.training() ? train_ : valid_).sample(batch, data));
  }
  std::string loss_in_units(double loss) const override {
    char buf[48];
    std::snprintf(buf, sizeof buf, " (%.3f bits/dim)", loss / std::log(2.0));
    return buf;
  }
  std::string final_report(int64_t batch) override {
    NoGradGuard no_grad;
    model_.eval();
    const int64_t n = std::min(test_images_, test_.images().size());
    double nats = 0;
    for (int64_t first = 0; first < n; first += batch) {
      const int64_t count = std::min(batch, n - first);
      nats += score(test_.range(first, count)).loss.item() * double(count);
    }
    char buf[160];
    std::snprintf(buf, sizeof buf, "test: %.4f bits/dim over the first %lld test images", nats / double(n) / std::log(2.0),
                  (long long)n);
    std::string report = buf;
    if (!samples_.empty()) report += "\n" + write_samples();
    model_.train();
    return report;
  }

 private:
  StepResult score(const LMBatch& b) {
    if (mixtures_ == 0) return score_lm(model_, b);
    const Tensor params = model_.forward(b.inputs);
    StepResult r;
    r.loss = neg(mean(dmol_log_prob(params, b.targets, kLevels)));
    r.tokens = b.inputs.numel();
    // accuracy: the heaviest component's mean, rounded to a level
    const Tensor p = params.detach().to(DType::F64).contiguous();
    const int64_t K = mixtures_;
    for (int64_t i = 0; i < b.targets.numel(); ++i) {
      const double* row = p.data<double>() + i * 3 * K;
      int64_t best = 0;
      for (int64_t k = 1; k < K; ++k)
        if (row[k] > row[best]) best = k;
      const double level = std::round((std::fmin(1.0, std::fmax(-1.0, row[K + best])) + 1) / 2 * (kLevels - 1));
      r.correct += int64_t(level) == b.targets.data<int64_t>()[i];
      ++r.counted;
    }
    if (model_.training()) r.penalty = model_.attention_penalty();
    return r;
  }
  // The next pixel of each row from the model's output at one position: sampled from the softmax over the 256
  // values, or from the mixture.
  Tensor draw(const Tensor& out, Rng& rng) {
    if (mixtures_ > 0) return dmol_sample(out, kLevels, rng);
    const Tensor p = softmax(out, -1).to(DType::F64).contiguous();
    Tensor v = empty({p.size(0)}, DType::I64);
    for (int64_t i = 0; i < p.size(0); ++i) {
      double u = rng.uniform();
      const double* row = p.data<double>() + i * p.size(1);
      int64_t k = 0;
      while (k < kLevels - 1 && u >= row[k]) u -= row[k++];
      v.data<int64_t>()[i] = k;
    }
    return v;
  }
  // Row 1-2: 16 unconditional samples; rows 3-4: 8 test images with their lower halves generated, each beside the
  // original. Sampling at temperature 1 with the recurrent form.
  std::string write_samples() {
    const int64_t L = train_.length(), given = L / 2;
    const LMBatch originals = test_.range(0, 8);
    Tensor tokens = zeros({24, L}, DType::I64);
    auto state = model_.new_state();
    Rng rng(2020);
    Tensor cur = full({24}, double(PixelTask::kStart), DType::I64);
    for (int64_t t = 0; t < L; ++t) {
      const Tensor drawn = draw(model_.step(cur, state), rng);
      cur = empty({24}, DType::I64);
      for (int64_t i = 0; i < 24; ++i) {
        const int64_t v = i >= 16 && t < given ? int64_t(originals.targets.at({i - 16, t})) : drawn.data<int64_t>()[i];
        cur.data<int64_t>()[i] = v;
        tokens.data<int64_t>()[i * L + t] = v;
      }
    }
    const Tensor grid = concat({tokens, originals.targets}, 0);  // 16 samples, 8 completions, 8 originals
    write_png(samples_, image_grid(train_.to_images(grid), 8));
    return "wrote " + samples_ + ": 16 samples, 8 test images completed from their upper half, the 8 originals";
  }

  ImageSplits splits_;
  PixelTask train_, valid_, test_;
  static constexpr int64_t kLevels = 256;
  int64_t test_images_;
  std::string samples_;
  int64_t mixtures_;
  LanguageModel model_;
};

// ---- the tasks -------------------------------------------------------------------------------

class CopyFlags : public TaskFlags {
 public:
  explicit CopyFlags(Cli& cli) : seq_(cli, "longest sequence (both halves and the separator)") {}
  TaskPlan plan(const TaskInput& in) const override {
    const CopyTask task(seq_.seq_len, seq_.symbols, seq_.fixed);
    TaskPlan p(in.model);
    p.model.vocab = task.vocab();
    p.model.decoder_layers = in.layers;
    p.model.encoder_layers = 0;
    p.model.max_len = seq_.seq_len;
    p.positions = seq_.seq_len;
    p.keys = seq_.keys();
    p.make_job = [c = p.model, task] { return std::make_unique<CopyJob>(c, task); };
    return p;
  }

 private:
  SymbolFlags seq_;
};

class TextFlags : public TaskFlags {
 public:
  explicit TextFlags(Cli& cli)
      : corpus_(cli), seq_len_(add_seq_len_flag(cli, "longest sequence (the window)")),
        mem_len_(cli.add_int("mem-len", 0, {0, 1 << 24}, "Transformer-XL memory of the last N positions; training "
                             "reads --batch consecutive streams (docs/transformer_xl.md)")) {}
  std::vector<FlagPath> inputs() const override { return {{"data", corpus_.data}}; }
  TaskPlan plan(const TaskInput& in) const override {
    const std::string path = corpus_.corpus_path("text");
    ENG_CHECK(mem_len_ == 0 || !in.resuming, "train: --resume with --mem-len is not supported (the memory and the "
              "position in the streams are not in the checkpoint)");
    TaskPlan p(in.model);
    p.model.vocab = TextCorpus::kVocab;
    p.model.decoder_layers = in.layers;
    p.model.encoder_layers = 0;
    p.model.max_len = seq_len_;
    p.model.mem_len = mem_len_;
    p.positions = seq_len_;
    p.make_job = [c = p.model, path, len = seq_len_] { return std::make_unique<TextJob>(c, path, len); };
    return p;
  }

 private:
  CorpusFlag corpus_;
  int64_t& seq_len_;
  int64_t& mem_len_;
};

class PixelFlags : public TaskFlags {
 public:
  explicit PixelFlags(Cli& cli)
      : images_(cli, "test images scored at the end (bits/dim)"),
        samples_(cli.add_string("samples", "", "PNG grid of samples and completions written at the end")),
        mixtures_(cli.add_int("mixtures", 0, {0, 1 << 20}, "0 = a 256-way softmax per pixel; K = a discretised "
                              "mixture of K logistics (PixelCNN++, ops/dmol.h)")) {}
  std::vector<FlagPath> inputs() const override { return {{"data", images_.data}}; }
  std::vector<FlagPath> outputs() const override { return {{"samples", samples_}}; }
  TaskPlan plan(const TaskInput& in) const override {
    auto splits = std::make_shared<ImageSplits>(images_.load());
    TaskPlan p(in.model);
    p.model.vocab = PixelTask::kVocab;
    p.model.decoder_layers = in.layers;
    p.model.encoder_layers = 0;
    p.model.max_len = splits->train.image_bytes();
    p.model.outputs = 3 * mixtures_;
    p.positions = p.model.max_len;
    p.make_job = [c = p.model, splits, test = images_.test_images, samples = samples_, mixtures = mixtures_] {
      return std::make_unique<PixelJob>(c, std::move(*splits), test, samples, mixtures);
    };
    return p;
  }

 private:
  ImageFlags images_;
  std::string& samples_;
  int64_t& mixtures_;
};

}  // namespace

ENG_REGISTER_TASK("copy", "decoder-only, the seed paper's 4.1.1 task", false,
                  [](Cli& cli) { return std::make_unique<CopyFlags>(cli); });
ENG_REGISTER_TASK("text", "character-level LM on --data FILE", true,
                  [](Cli& cli) { return std::make_unique<TextFlags>(cli); });
ENG_REGISTER_TASK("pixels", "autoregressive Fashion-MNIST, or MNIST in --data DIR", false,
                  [](Cli& cli) { return std::make_unique<PixelFlags>(cli); });

}  // namespace eng::jobs

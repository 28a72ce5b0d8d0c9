// The decoder-only jobs: the copy task, text (bytes or tokens), and autoregressive pixels.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "datasets/image_dataset.h"
#include "datasets/pixel_task.h"
#include "datasets/png.h"
#include "datasets/text.h"
#include "datasets/tokenizer_io.h"
#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/safe_text.h"
#include "models/xl_memory.h"
#include "ops/dmol.h"
#include "ops/index.h"
#include "ops/reduce.h"
#include "ops/softmax.h"
#include "ops/unary.h"
#include "ops/view.h"
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
  StepResult run_rows(const Rng& data, int64_t first_row, int64_t batch) override {
    return score_lm(model_, task_.sample(data, first_row, batch));
  }
  // Free-running generation with the model's recurrent form (a KV cache for softmax, the RNN form for
  // linear attention): the prefix is fed, then each copied token is the model's own previous prediction.
  std::string eval_extra(int64_t batch, Rng& data) override {
    if (!model_.layers.front()->self_attn.mechanism().new_state()) return "";  // no recurrent form
    LMBatch b = task_.sample(data, 0, batch);
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

// Language modelling on any text file (datasets/text.h: 90/5/5 split on bytes), on its bytes (vocabulary 256) or,
// with a tokenizer, on its tokens: training on random windows of the train split; evaluation on fixed random
// windows of the validation split, with a sample continued by the recurrent form; at the end, every window of the
// test split in bits per character (bytes) or bits per byte and per token (tokens: total nats / ln 2 / the bytes
// the predicted tokens stand for, so that tokenizers compare).
class TextJob : public Job {
 public:
  TextJob(const TransformerConfig& c, const std::string& path, int64_t len, std::shared_ptr<Tokenizer> tokenizer)
      : tokenizer_(std::move(tokenizer)), corpus_(path, tokenizer_.get()), len_(len), model_(c, true) {
    ENG_CHECK(c.vocab == corpus_.vocab(), "train text: the model's vocabulary ", c.vocab, " is not the corpus's ",
              corpus_.vocab());
    bytes_per_token_ = double(corpus_.split_bytes(TextSplit::Valid)) / double(corpus_.size(TextSplit::Valid));
  }
  Module& model() override { return model_; }
  Rng& model_rng() override { return model_.rng(); }
  void check_data(int64_t batch) const override {
    corpus_.check_windows(len_);
    if (model_.config().mem_len == 0) return;
    for (TextSplit s : {TextSplit::Train, TextSplit::Test}) corpus_.num_stream_segments(s, batch, len_);
  }
  StepResult run_rows(const Rng& data, int64_t first_row, int64_t batch) override {
    if (model_.config().mem_len > 0 && model_.training()) {  // Transformer-XL: the next segment of every stream
      ENG_CHECK(first_row == 0, "train text: --mem-len reads the whole batch's streams in one micro-batch");
      const int64_t segments = corpus_.num_stream_segments(TextSplit::Train, batch, len_);
      ENG_CHECK(segments > 0, "train text: the training split is too short for ", batch, " streams of ", len_,
                "-unit segments");
      if (segment_ % segments == 0) memory_ = model_.new_memory();  // a new pass over the streams
      const LMBatch b = corpus_.stream_segment(TextSplit::Train, batch, len_, segment_++ % segments);
      return score_logits(model_, model_.forward(b.inputs, memory_), b);
    }
    return score(corpus_.sample(model_.training() ? TextSplit::Train : TextSplit::Valid, data, first_row, batch, len_));
  }
  // Tokens: bits per byte from the validation split's bytes per token (the windows are drawn from it).
  std::string loss_in_units(double loss) const override {
    char buf[80];
    const double bits = loss / std::log(2.0);
    if (corpus_.tokenized())
      std::snprintf(buf, sizeof buf, " (%.3f bits/token, %.3f bits/byte)", bits, bits / bytes_per_token_);
    else
      std::snprintf(buf, sizeof buf, " (%.3f bits/char)", bits);
    return buf;
  }
  // Up to 160 bytes (48 tokens) sampled (temperature 1) after a prompt from the validation split (a quarter of the
  // window, at most 48 units), as long as the window allows; control characters shown as '.'.
  std::string eval_extra(int64_t, Rng& data) override {
    if (!model_.layers.front()->self_attn.mechanism().new_state()) return "";
    const int64_t prompt_len = std::clamp<int64_t>(len_ / 4, 1, 48);
    const LMBatch prompt = corpus_.sample(TextSplit::Valid, data, 0, 1, prompt_len);
    data.set_position(data.position() + 1);
    auto state = model_.new_state();
    std::vector<int32_t> units;
    Tensor logits;
    for (int64_t t = 0; t < prompt_len; ++t) {
      units.push_back(int32_t(prompt.inputs.at({0, t})));
      logits = model_.step(from_vector(std::vector<double>{double(units.back())}, {1}, DType::I64), state);
    }
    const size_t given = units.size();
    for (int64_t t = 0; t < (corpus_.tokenized() ? 48 : 160) && state.length < len_; ++t) {
      const std::vector<double> p = to_device(softmax(logits, -1), Device::CPU).to(DType::F64).to_vector();
      double u = data.uniform();
      int64_t unit = 0;
      while (unit < int64_t(p.size()) - 1 && u >= p[size_t(unit)]) u -= p[size_t(unit++)];
      units.push_back(int32_t(unit));
      logits = model_.step(from_vector(std::vector<double>{double(unit)}, {1}, DType::I64), state);
    }
    const auto text = [&](size_t begin, size_t end) {
      const std::vector<int32_t> part(units.begin() + int64_t(begin), units.begin() + int64_t(end));
      std::string s = tokenizer_ ? tokenizer_->decode(part) : std::string(part.begin(), part.end());
      for (char& ch : s)
        if ((unsigned char)ch < 32 || ch == 127 || (!tokenizer_ && (unsigned char)ch > 126)) ch = '.';
      return terminal_text(s);
    };
    return "\n  sample: " + text(0, given) + " | " + text(given, units.size());
  }
  std::string final_report(int64_t batch) override {
    NoGradGuard no_grad;
    model_.eval();
    const int64_t windows = corpus_.num_windows(TextSplit::Test, len_);
    double nats = 0;
    int64_t units = 0, bytes = 0;
    for (int64_t first = 0; first < windows; first += batch) {
      const int64_t n = std::min(batch, windows - first);
      const LMBatch b = corpus_.windows(TextSplit::Test, first, n, len_);
      nats += score(b).loss.item() * double(n * len_);
      units += n * len_;
      bytes += corpus_.target_bytes(b);
    }
    std::string with_memory;
    if (model_.config().mem_len > 0) with_memory = "\n" + test_with_memory(batch);
    model_.train();
    if (units == 0) return "test split shorter than one window";
    char buf[160];
    const double bits = nats / std::log(2.0);
    if (corpus_.tokenized())
      std::snprintf(buf, sizeof buf, "test: %.4f bits/byte, %.4f bits/token over %lld tokens = %lld bytes (%lld windows%s)",
                    bits / double(bytes), bits / double(units), (long long)units, (long long)bytes,
                    (long long)windows, with_memory.empty() ? "" : ", no memory");
    else
      std::snprintf(buf, sizeof buf, "test: %.4f bits/char over %lld characters (%lld windows%s)", bits / double(units),
                    (long long)units, (long long)windows, with_memory.empty() ? "" : ", no memory");
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
    int64_t bytes = 0;
    for (int64_t t = 0; t < segments; ++t) {
      const LMBatch b = corpus_.stream_segment(TextSplit::Test, batch, len_, t);
      nats += score_logits(model_, model_.forward(b.inputs, mem), b).loss.item() * double(b.targets.numel());
      bytes += corpus_.target_bytes(b);
    }
    if (segments == 0) return "test with memory: the test split is too short for the streams";
    char buf[160];
    std::snprintf(buf, sizeof buf, "test with memory: %.4f bits/%s over %lld %s (%lld streams, memory %lld)",
                  nats / double(bytes) / std::log(2.0), corpus_.tokenized() ? "byte" : "char",
                  (long long)(segments * batch * len_), corpus_.tokenized() ? "tokens" : "characters",
                  (long long)batch, (long long)mem.mem_len);
    return buf;
  }

  std::shared_ptr<Tokenizer> tokenizer_;
  TextCorpus corpus_;
  int64_t len_;
  double bytes_per_token_ = 1;
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
// (ops/dmol.h, the paper's option) instead of 256 logits. With --compare-naive N the samples are followed by N more
// images generated twice with the same draws, with step() and by recomputing the prefix per pixel: the time per
// image of both, and the pixels where they differ (none unless a draw falls on a rounding difference).
class PixelJob : public Job {
 public:
  PixelJob(const TransformerConfig& c, ImageSplits splits, int64_t test_images, std::string samples, int64_t mixtures,
           int64_t compare_naive)
      : splits_(std::move(splits)), train_(splits_.train), valid_(splits_.valid), test_(splits_.test),
        test_images_(test_images), samples_(std::move(samples)), mixtures_(mixtures), compare_naive_(compare_naive),
        model_(c, true) {
    ENG_CHECK(compare_naive_ == 0 || !samples_.empty(), "train pixels: --compare-naive needs --samples");
    // checked before training, not after it: the samples are generated with the recurrent form
    const Attention& attention = model_.layers.front()->self_attn.mechanism();
    ENG_CHECK(samples_.empty() || attention.new_state(), "train pixels: --samples needs an attention variant with a "
              "recurrent form (", c.attention, " has none", attention.accepts().no_step.empty() ? "" : ": ",
              attention.accepts().no_step, ")");
  }
  Module& model() override { return model_; }
  Rng& model_rng() override { return model_.rng(); }
  StepResult run_rows(const Rng& data, int64_t first_row, int64_t batch) override {
    return score((model_.training() ? train_ : valid_).sample(data, first_row, batch));
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
    if (compare_naive_ > 0) report += "\n" + compare_naive();
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

  // compare_naive_ unconditional images at that batch, drawn from Rng(2021): with step(), or by a forward over
  // the whole prefix per pixel (the generation of a variant without a recurrent form).
  Tensor sample_images(bool naive) {
    const int64_t L = train_.length(), n = compare_naive_;
    Tensor inputs = full({n, L + 1}, double(PixelTask::kStart), DType::I64);  // the start token, then the pixels
    auto state = model_.new_state();
    Rng rng(2021);
    for (int64_t t = 0; t < L; ++t) {
      const Tensor out = naive ? reshape(narrow(model_.forward(narrow(inputs, 1, 0, t + 1)), 1, t, 1), {n, -1})
                               : model_.step(reshape(narrow(inputs, 1, t, 1), {n}), state);
      narrow(inputs, 1, t + 1, 1).copy_from(reshape(draw(out, rng), {n, 1}));
    }
    return narrow(inputs, 1, 1, L).contiguous();
  }
  std::string compare_naive() {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    const Tensor stepped = sample_images(false);
    const auto t1 = Clock::now();
    const Tensor naive = sample_images(true);
    const double step_s = std::chrono::duration<double>(t1 - t0).count();
    const double naive_s = std::chrono::duration<double>(Clock::now() - t1).count();
    int64_t differ = 0;
    for (int64_t i = 0; i < stepped.numel(); ++i) differ += stepped.data<int64_t>()[i] != naive.data<int64_t>()[i];
    char buf[256];
    std::snprintf(buf, sizeof buf, "generation, %lld images at batch %lld: step() %.3f s per image, naive "
                  "recomputation %.3f s per image (%.1fx); %lld of %lld pixels differ",
                  (long long)compare_naive_, (long long)compare_naive_, step_s / double(compare_naive_),
                  naive_s / double(compare_naive_), naive_s / step_s, (long long)differ, (long long)stepped.numel());
    return buf;
  }

  ImageSplits splits_;
  PixelTask train_, valid_, test_;
  static constexpr int64_t kLevels = 256;
  int64_t test_images_;
  std::string samples_;
  int64_t mixtures_, compare_naive_;
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
                             "reads --batch consecutive streams (docs/transformer_xl.md)")),
        tokenizer_(cli.add_string("tokenizer", "", "train on the tokens of this BPE tokenizer (tokenizer.json, "
                                  "vocab.json or llama2.c's tokenizer.bin; docs/tokenizers.md) instead of bytes")) {}
  std::vector<FlagPath> inputs() const override { return {{"data", corpus_.data}, {"tokenizer", tokenizer_}}; }
  TaskPlan plan(const TaskInput& in) const override {
    const std::string path = corpus_.corpus_path("text");
    ENG_CHECK(mem_len_ == 0 || !in.resuming, "train: --resume with --mem-len is not supported (the memory and the "
              "position in the streams are not in the checkpoint)");
    TaskPlan p(in.model);
    std::shared_ptr<Tokenizer> tokenizer;
    if (!tokenizer_.empty()) {
      tokenizer = std::make_shared<Tokenizer>(load_tokenizer(tokenizer_));
      p.keys["tokenizer"] = tokenizer_json(*tokenizer);  // the checkpoint decodes its ids with it
    }
    p.model.vocab = tokenizer ? tokenizer->vocab_size() : TextCorpus::kVocab;
    p.model.decoder_layers = in.layers;
    p.model.encoder_layers = 0;
    p.model.max_len = seq_len_;
    p.model.mem_len = mem_len_;
    p.positions = seq_len_;
    p.make_job = [c = p.model, path, len = seq_len_, tokenizer] {
      return std::make_unique<TextJob>(c, path, len, tokenizer);
    };
    return p;
  }

 private:
  CorpusFlag corpus_;
  int64_t& seq_len_;
  int64_t& mem_len_;
  std::string& tokenizer_;
};

class PixelFlags : public TaskFlags {
 public:
  explicit PixelFlags(Cli& cli)
      : images_(cli, "test images scored at the end (bits/dim)"),
        samples_(cli.add_string("samples", "", "PNG grid of samples and completions written at the end")),
        mixtures_(cli.add_int("mixtures", 0, {0, 1 << 20}, "0 = a 256-way softmax per pixel; K = a discretised "
                              "mixture of K logistics (PixelCNN++, ops/dmol.h)")),
        compare_naive_(cli.add_int("compare-naive", 0, {0, 1024}, "with --samples: N more images generated twice, "
                                   "with step() and by recomputing the prefix per pixel, both timed")) {}
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
    p.make_job = [c = p.model, splits, test = images_.test_images, samples = samples_, mixtures = mixtures_,
                  naive = compare_naive_] {
      return std::make_unique<PixelJob>(c, std::move(*splits), test, samples, mixtures, naive);
    };
    return p;
  }

 private:
  ImageFlags images_;
  std::string& samples_;
  int64_t& mixtures_;
  int64_t& compare_naive_;
};

}  // namespace

ENG_REGISTER_TASK("copy", "decoder-only, the seed paper's 4.1.1 task", false,
                  [](Cli& cli) { return std::make_unique<CopyFlags>(cli); });
ENG_REGISTER_TASK("text", "language model on the bytes of --data FILE, or on its tokens with --tokenizer", true,
                  [](Cli& cli) { return std::make_unique<TextFlags>(cli); });
ENG_REGISTER_TASK("pixels", "autoregressive Fashion-MNIST, or MNIST in --data DIR", false,
                  [](Cli& cli) { return std::make_unique<PixelFlags>(cli); });

}  // namespace eng::jobs

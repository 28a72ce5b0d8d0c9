// train: trains a transformer on a task from the command line, with a progress line, a CSV log,
// periodic evaluation, checkpoints and bit-identical resume. `build/train --help` lists every flag.
//   build/train copy --layers 4 --heads 8 --d-model 64 --seq-len 128 --optimizer radam --steps 6000
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "datasets/copy_task.h"
#include "datasets/mnist.h"
#include "datasets/pixel_task.h"
#include "datasets/png.h"
#include "datasets/seq2seq_tasks.h"
#include "datasets/text.h"
#include "engine/anomaly.h"
#include "engine/autograd.h"
#include "engine/cli.h"
#include "engine/error.h"
#include "engine/optim.h"
#include "engine/progress.h"
#include "engine/schedule.h"
#include "engine/threadpool.h"
#include "models/checkpoint.h"
#include "models/transformer.h"
#include "ops/binary.h"
#include "ops/index.h"
#include "ops/loss.h"
#include "ops/reduce.h"
#include "ops/softmax.h"
#include "ops/view.h"

using namespace eng;

namespace {

struct StepResult {
  Tensor loss;
  int64_t correct = 0, counted = 0, tokens = 0;
};

// Token accuracy of argmax(logits) on positions whose target is not ignored.
void count_correct(const Tensor& logits, const Tensor& targets, StepResult& r) {
  Tensor pred = argmax(logits.detach(), -1);
  const int64_t* p = pred.data<int64_t>();
  const int64_t* t = targets.data<int64_t>();
  for (int64_t i = 0, n = targets.numel(); i < n; ++i) {
    if (t[i] == kIgnore) continue;
    r.counted++;
    r.correct += p[i] == t[i];
  }
}

Tensor token_loss(const Tensor& logits, const Tensor& targets) {
  return cross_entropy(reshape(logits, {-1, logits.size(-1)}), reshape(targets, {-1}), kIgnore);
}

// Loss and accuracy of a decoder-only model on one batch of next-token targets.
StepResult score_lm(const LanguageModel& model, const LMBatch& b) {
  Tensor logits = model.forward(b.inputs);
  StepResult r;
  r.loss = token_loss(logits, b.targets);
  r.tokens = b.inputs.numel();
  count_correct(logits, b.targets, r);
  return r;
}

// A task and its model behind one interface, so that the loop is the same for both kinds.
class Job {
 public:
  virtual ~Job() = default;
  virtual Module& model() = 0;
  virtual Rng& model_rng() = 0;
  virtual StepResult run(int64_t batch, Rng& data) = 0;
  // Extra evaluation text (e.g. exact-match of greedy decoding), computed without gradients.
  virtual std::string eval_extra(int64_t, Rng&) { return ""; }
  // The loss in the task's own unit, e.g. " (1.93 bits/char)"; "" when nats say it all.
  virtual std::string loss_in_units(double) const { return ""; }
  // A last evaluation after training (e.g. on the test split), computed without gradients.
  virtual std::string final_report(int64_t) { return ""; }
};

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

class Seq2SeqJob : public Job {
 public:
  Seq2SeqJob(const TransformerConfig& c, const Seq2SeqTask& task) : task_(task), model_(c) {}
  Module& model() override { return model_; }
  Rng& model_rng() override { return model_.rng(); }
  StepResult run(int64_t batch, Rng& data) override {
    Seq2SeqBatch b = task_.sample(batch, data);
    Tensor logits = model_.forward(b.src, b.tgt_in, b.src_lengths);
    StepResult r;
    r.loss = token_loss(logits, b.tgt_out);
    r.tokens = b.src.numel() + b.tgt_in.numel();
    count_correct(logits, b.tgt_out, r);
    return r;
  }
  std::string eval_extra(int64_t batch, Rng& data) override {
    Seq2SeqBatch b = task_.sample(batch, data);
    Tensor out = model_.greedy_decode(b.src, Seq2SeqTask::kBegin, b.tgt_out.size(1), b.src_lengths);
    int64_t exact = 0;
    for (int64_t i = 0; i < batch; ++i) {
      bool ok = true;
      for (int64_t t = 0; t <= b.src_lengths[size_t(i)]; ++t) ok = ok && out.at({i, t}) == b.tgt_out.at({i, t});
      exact += ok;
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, ", greedy exact match %.1f%%", 100.0 * double(exact) / double(batch));
    return buf;
  }

 private:
  Seq2SeqTask task_;
  EncoderDecoder model_;
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
  StepResult run(int64_t batch, Rng& data) override {
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
      const std::vector<double> p = softmax(logits, -1).to(DType::F64).to_vector();
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
    model_.train();
    if (chars == 0) return "test split shorter than one window";
    char buf[128];
    std::snprintf(buf, sizeof buf, "test: %.4f bits/char over %lld characters (%lld windows)",
                  nats / double(chars) / std::log(2.0), (long long)chars, (long long)windows);
    return buf;
  }

 private:
  StepResult score(const LMBatch& b) { return score_lm(model_, b); }
  TextCorpus corpus_;
  int64_t len_;
  LanguageModel model_;
};

// Autoregressive pixel generation on Fashion-MNIST (or MNIST with --data DIR; Katharopoulos et al. 2020 §4.2.1):
// 784 raster-order pixels, a 256-way softmax per pixel; evaluation in bits/dim on fixed validation images; at the
// end bits/dim on the first --test-images test images and, with --samples PATH, a PNG grid of unconditional
// samples and of test images whose lower half the model completed (the paper's Figure 3), both generated with the
// recurrent form.
class PixelJob : public Job {
 public:
  PixelJob(const TransformerConfig& c, ImageSplits splits, int64_t test_images, std::string samples)
      : splits_(std::move(splits)), train_(splits_.train), valid_(splits_.valid), test_(splits_.test),
        test_images_(test_images), samples_(std::move(samples)), model_(c, true) {}
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
  StepResult score(const LMBatch& b) { return score_lm(model_, b); }
  // Row 1-2: 16 unconditional samples; rows 3-4: 8 test images with their lower halves generated, each beside the
  // original. Sampling at temperature 1 with the recurrent form.
  std::string write_samples() {
    ENG_CHECK(model_.layers.front()->self_attn.mechanism().new_state(), "train pixels: --samples needs an attention "
              "variant with a recurrent form");
    const int64_t L = train_.length(), given = L / 2;
    const LMBatch originals = test_.range(0, 8);
    Tensor tokens = zeros({24, L}, DType::I64);
    auto state = model_.new_state();
    Rng rng(2020);
    Tensor cur = full({24}, double(PixelTask::kStart), DType::I64);
    for (int64_t t = 0; t < L; ++t) {
      const Tensor p = softmax(model_.step(cur, state), -1).to(DType::F64).contiguous();
      cur = empty({24}, DType::I64);
      for (int64_t i = 0; i < 24; ++i) {
        int64_t v = 0;
        if (i >= 16 && t < given) {
          v = int64_t(originals.targets.at({i - 16, t}));
        } else {
          double u = rng.uniform();
          const double* row = p.data<double>() + i * p.size(1);
          while (v < 255 && u >= row[v]) u -= row[v++];
        }
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
  int64_t test_images_;
  std::string samples_;
  LanguageModel model_;
};

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, NamedTensors params, double lr, double wd) {
  if (name == "sgd") return std::make_unique<SGD>(std::move(params), lr, 0.9, wd);
  if (name == "adam") return std::make_unique<Adam>(std::move(params), lr, 0.9, 0.999, 1e-8, wd);
  if (name == "adamw") return std::make_unique<AdamW>(std::move(params), lr, 0.9, 0.999, 1e-8, wd);
  if (name == "radam") return std::make_unique<RAdam>(std::move(params), lr, 0.9, 0.999, 1e-8, wd);
  fail("train: --optimizer must be sgd, adam, adamw or radam, got '", name, "'");
}

struct Eval {
  double loss = 0, accuracy = 0;
  std::string extra;
};

// Evaluation on a fixed set of batches (the same every time: a generator with its own seed).
Eval evaluate(Job& job, int64_t batches, int64_t batch, uint64_t seed) {
  NoGradGuard no_grad;
  job.model().eval();
  Rng data(seed);
  Eval e;
  int64_t correct = 0, counted = 0;
  for (int64_t i = 0; i < batches; ++i) {
    StepResult r = job.run(batch, data);
    e.loss += r.loss.item() / double(batches);
    correct += r.correct;
    counted += r.counted;
  }
  e.accuracy = counted ? double(correct) / double(counted) : 0;
  e.extra = job.eval_extra(batch, data);
  job.model().train();
  return e;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// The first non-finite quantity of a step, "" when there is none: its loss, then each parameter's gradient.
std::string first_nonfinite_of_step(double loss, const Module& model) {
  if (!std::isfinite(loss)) return std::string("the loss is ") + (std::isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf");
  for (const auto& [name, p] : model.named_parameters()) {
    const std::string where = describe_nonfinite(p.grad());
    if (!where.empty()) return "the gradient of parameter '" + name + "' holds " + where;
  }
  return "";
}

std::string first_nonfinite_parameter(const Module& model) {
  for (const auto& [name, p] : model.named_parameters()) {
    const std::string where = describe_nonfinite(p);
    if (!where.empty()) return "parameter '" + name + "' hold " + where;
  }
  return "";
}

int run(int argc, char** argv) {
  Cli cli("train", "Trains a transformer on a task: copy (decoder-only, the seed paper's 4.1.1 task),\n"
                   "reverse or sort (encoder-decoder), text (character-level LM on --data FILE),\n"
                   "pixels (autoregressive Fashion-MNIST, or MNIST in --data DIR).\n"
                   "Usage: train TASK [flags]");
  auto& task_name = cli.add_string("task", "copy", "copy, reverse, sort, text or pixels (or the first argument)");
  auto& data_path = cli.add_string("data", "", "text: the corpus file (any bytes; split 90/5/5 in order); pixels: "
                                   "an MNIST directory (default: the installed Fashion-MNIST)");
  auto& test_images = cli.add_int("test-images", 10000, "pixels: test images scored for bits/dim at the end");
  auto& samples = cli.add_string("samples", "", "pixels: PNG grid of samples and completions written at the end");
  auto& layers = cli.add_int("layers", 4, "decoder layers (and encoder layers for reverse/sort)");
  auto& enc_layers = cli.add_int("encoder-layers", 0, "encoder layers for reverse/sort (0: same as --layers)");
  auto& heads = cli.add_int("heads", 8, "attention heads");
  auto& kv_heads = cli.add_int("kv-heads", 0, "key/value heads (0: --heads; 1: multi-query; a divisor: grouped-query)");
  auto& d_model = cli.add_int("d-model", 64, "model width");
  auto& d_ff = cli.add_int("d-ff", 0, "feed-forward width (0: 4 x d-model)");
  auto& dropout = cli.add_double("dropout", 0.0, "dropout probability");
  auto& attention = cli.add_string("attention", "softmax", "attention variant (see the list below)");
  auto& attn_opts = cli.add_list("attn-opt", "a variant option name=value");
  auto& norm = cli.add_string("norm", "pre", "pre or post layer norm placement");
  auto& norm_type = cli.add_string("norm-type", "layer", "layer or rms");
  auto& positional = cli.add_string("positional", "sinusoidal", "none, sinusoidal, learned, rotary or alibi");
  auto& activation = cli.add_string("activation", "gelu", "relu, gelu or gelu-tanh");
  auto& reversible = cli.add_bool("reversible", false, "reversible layers (Reformer §3): activation memory "
                                 "independent of depth; pre-norm, copy and text tasks only (docs/reversible.md)");
  auto& seq_len = cli.add_int("seq-len", 128, "longest sequence (copy: both halves and the separator)");
  auto& symbols = cli.add_int("symbols", 10, "distinct symbols");
  auto& fixed = cli.add_bool("fixed-length", false, "always use the longest sequence");
  auto& opt_name = cli.add_string("optimizer", "radam", "sgd (momentum 0.9), adam, adamw or radam");
  auto& lr = cli.add_double("lr", 1e-3, "learning rate");
  auto& schedule = cli.add_string("schedule", "step:3000=1e-4",
                                  "constant | step:S=LR,... | cosine:warmup=W,total=T,min=M");
  auto& wd = cli.add_double("weight-decay", 0.0, "weight decay");
  auto& clip = cli.add_double("clip", 1.0, "clip the global gradient norm (0: off)");
  auto& accum = cli.add_int("accum", 1, "micro-batches accumulated per optimizer step");
  auto& steps = cli.add_int("steps", 6000, "optimizer steps");
  auto& batch = cli.add_int("batch", 32, "sequences per micro-batch");
  auto& seed = cli.add_int("seed", 1, "seed of the model and the data");
  auto& threads = cli.add_int("threads", 0, "threads (0: ENG_THREADS or all cores)");
  auto& log_path = cli.add_string("log", "", "CSV log of every logged step");
  auto& log_every = cli.add_int("log-every", 10, "steps between progress updates and log rows");
  auto& eval_every = cli.add_int("eval-every", 250, "steps between evaluations (0: only at the end)");
  auto& eval_batches = cli.add_int("eval-batches", 4, "batches per evaluation");
  auto& ckpt = cli.add_string("checkpoint", "", "checkpoint file written every --checkpoint-every steps and at the end");
  auto& ckpt_every = cli.add_int("checkpoint-every", 500, "steps between checkpoints");
  auto& resume = cli.add_string("resume", "", "checkpoint to resume from (same flags, same threads: identical run)");
  auto& target = cli.add_double("target-accuracy", 0.0, "stop once evaluation accuracy reaches this (0: off)");
  auto& on_nan = cli.add_string("on-nan", "stop", "a NaN/Inf loss or gradient: stop (exit 1, checkpoint kept) or "
                                "skip (drop that step's update)");
  auto& anomaly = cli.add_bool("detect-anomaly", false, "check every op's output and gradient, name the first that "
                               "turns non-finite (slower)");
  std::string variants;
  for (const auto& [n, d] : attention_variants()) variants += "\n  " + n + ": " + d;
  if (!cli.parse(argc, argv)) {
    std::printf("\nattention variants:%s\n", variants.c_str());
    return 0;
  }
  if (!cli.positional().empty()) {
    ENG_CHECK(cli.positional().size() == 1 && !cli.was_set("task"), "train: one task expected, got extra argument '",
              cli.positional().back(), "'");
    task_name = cli.positional()[0];
  }
  if (threads > 0) set_num_threads(int(threads));
  ENG_CHECK(on_nan == "stop" || on_nan == "skip", "train: --on-nan must be stop or skip, got '", on_nan, "'");
  set_detect_anomaly(anomaly);
  ENG_CHECK(steps >= 1 && batch >= 1 && accum >= 1 && log_every >= 1, "train: --steps, --batch, --accum and "
            "--log-every must be >= 1");

  TransformerConfig c;
  c.d_model = d_model;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.d_ff = d_ff > 0 ? d_ff : 4 * d_model;
  c.dropout = dropout;
  c.attention = attention;
  for (const std::string& kv : attn_opts) c.attention_options.set_pair(kv, "train");
  ENG_CHECK(norm == "pre" || norm == "post", "train: --norm must be pre or post, got '", norm, "'");
  ENG_CHECK(norm_type == "layer" || norm_type == "rms", "train: --norm-type must be layer or rms, got '", norm_type, "'");
  c.pre_norm = norm == "pre";
  c.rms_norm = norm_type == "rms";
  c.positional = parse_positional(positional);
  c.activation = parse_activation(activation);
  c.reversible = reversible;
  c.seed = uint64_t(seed);

  // Task-specific flags given to another task would be silently ignored: refuse them.
  ENG_CHECK(!cli.was_set("data") || task_name == "text" || task_name == "pixels",
            "train: --data is for the text and pixels tasks, not '", task_name, "'");
  for (const char* flag : {"test-images", "samples"})
    ENG_CHECK(!cli.was_set(flag) || task_name == "pixels", "train: --", flag, " is for the pixels task, not '",
              task_name, "'");
  std::unique_ptr<Job> job;
  if (task_name == "copy") {
    CopyTask task(seq_len, symbols, fixed);
    c.vocab = task.vocab();
    c.decoder_layers = layers;
    c.encoder_layers = 0;
    c.max_len = seq_len;
    job = std::make_unique<CopyJob>(c, task);
  } else if (task_name == "reverse" || task_name == "sort") {
    Seq2SeqTask task(task_name == "reverse" ? Seq2SeqTask::Kind::Reverse : Seq2SeqTask::Kind::Sort, seq_len, symbols,
                     fixed);
    c.vocab = task.vocab();
    c.decoder_layers = layers;
    c.encoder_layers = enc_layers > 0 ? enc_layers : layers;
    c.max_len = seq_len + 1;
    job = std::make_unique<Seq2SeqJob>(c, task);
  } else if (task_name == "text") {
    ENG_CHECK(!data_path.empty(), "train: task text needs --data FILE (any text file, e.g. enwik8)");
    c.vocab = TextCorpus::kVocab;
    c.decoder_layers = layers;
    c.encoder_layers = 0;
    c.max_len = seq_len;
    job = std::make_unique<TextJob>(c, data_path, seq_len);
  } else if (task_name == "pixels") {
    ImageSplits splits = load_mnist(locate_mnist(data_path));
    c.vocab = PixelTask::kVocab;
    c.decoder_layers = layers;
    c.encoder_layers = 0;
    c.max_len = splits.train.image_bytes();
    ENG_CHECK(test_images >= 1, "train: --test-images must be >= 1, got ", test_images);
    job = std::make_unique<PixelJob>(c, std::move(splits), test_images, samples);
  } else {
    fail("train: unknown task '", task_name, "' (copy, reverse, sort, text or pixels)");
  }

  auto optimizer = make_optimizer(opt_name, job->model().named_parameters(), lr, wd);
  auto sched = parse_schedule(schedule, lr);
  std::map<std::string, std::string> config = c.to_map();
  config["task"] = task_name;
  config["symbols"] = std::to_string(symbols);
  config["fixed_length"] = fixed ? "true" : "false";

  Rng data(uint64_t(seed) * 7919 + 17);
  int64_t start = 0;
  if (!resume.empty()) {
    auto meta = load_checkpoint(resume, job->model(), optimizer.get());
    check_checkpoint_config(resume, meta, config);
    try {
      start = std::stoll(meta.at("step"));
      data.set_position(std::stoull(meta.at("data_rng_position")));
      job->model_rng().set_position(std::stoull(meta.at("model_rng_position")));
    } catch (const std::exception&) {
      fail("train: checkpoint ", resume, ": metadata step / data_rng_position / model_rng_position missing or bad");
    }
    std::printf("resumed from %s at step %lld\n", resume.c_str(), (long long)start);
  }
  auto save = [&](int64_t step) {
    if (ckpt.empty()) return;
    std::map<std::string, std::string> meta;
    for (const auto& [k, v] : config) meta["config." + k] = v;
    meta["step"] = std::to_string(step);
    meta["data_rng_position"] = std::to_string(data.position());
    meta["model_rng_position"] = std::to_string(job->model_rng().position());
    save_checkpoint(ckpt, job->model(), optimizer.get(), meta);
  };

  std::printf("task %s, %lld parameters, attention %s, %s, %d threads\n", task_name.c_str(),
              (long long)job->model().num_parameters(), attention.c_str(), opt_name.c_str(), num_threads());
  std::ofstream log;
  if (!log_path.empty()) {
    log.open(log_path, start > 0 ? std::ios::app : std::ios::trunc);
    ENG_CHECK(log.good(), "train: cannot write log file ", log_path);
    if (start == 0) log << "step,kind,loss,accuracy,lr,tokens_per_s,elapsed_s,grad_norm\n";
  }

  Progress progress(start, steps);
  const uint64_t eval_seed = uint64_t(seed) * 104729 + 3;
  double window_loss = 0, grad_norm = 0;
  int64_t window_correct = 0, window_counted = 0, window_tokens = 0, window_steps = 0, skipped = 0;
  double window_start = 0;
  Eval last_eval;
  int64_t step = start;
  job->model().train();
  while (step < steps) {
    optimizer->set_lr(sched->lr(step));
    optimizer->zero_grad();
    double step_loss = 0;
    try {
      for (int64_t m = 0; m < accum; ++m) {
        StepResult r = job->run(batch, data);
        Tensor loss = accum > 1 ? mul_scalar(r.loss, 1.0 / double(accum)) : r.loss;
        loss.backward();
        step_loss += r.loss.item() / double(accum);
        window_correct += r.correct;
        window_counted += r.counted;
        window_tokens += r.tokens;
      }
    } catch (const Error& e) {
      fail("train: step ", step + 1, ": ", e.what());
    }
    grad_norm = clip_grad_norm(optimizer->params(), clip > 0 ? clip : INFINITY);
    ++step;
    const std::string bad = first_nonfinite_of_step(step_loss, job->model());
    if (!bad.empty()) {
      ENG_CHECK(on_nan == "skip", "train: step ", step, ": ", bad, "; stopped (the last checkpoint is kept; "
                "--detect-anomaly names the op, --on-nan skip drops such steps)");
      progress.finish();
      std::printf("step %lld: %s; update skipped\n", (long long)step, bad.c_str());
      ++skipped;
    } else {
      optimizer->step();
      const std::string broken = first_nonfinite_parameter(job->model());
      ENG_CHECK(broken.empty(), "train: step ", step, ": the update made ", broken, " (learning rate ",
                optimizer->lr(), " too large?); stopped, the last checkpoint is kept");
      window_loss += step_loss;
      ++window_steps;
    }
    if (step % log_every == 0 || step == steps) {
      double now = progress.elapsed_seconds();
      double tps = double(window_tokens) / std::max(now - window_start, 1e-9);
      double l = window_steps ? window_loss / double(window_steps) : NAN;
      double acc = window_counted ? double(window_correct) / double(window_counted) : 0;
      progress.update(step, "loss " + fmt("%.4f", l) + " | acc " + fmt("%.1f%%", 100 * acc) + " | gnorm " +
                                fmt("%.3g", grad_norm) + " | " + fmt("%.0f", tps) + " tok/s");
      if (log.is_open())
        log << step << ",train," << l << "," << acc << "," << optimizer->lr() << "," << tps << "," << now << ","
            << grad_norm << "\n";
      window_loss = 0;
      window_correct = window_counted = window_tokens = window_steps = 0;
      window_start = now;
    }
    bool last = step == steps;
    if ((eval_every > 0 && step % eval_every == 0) || last) {
      last_eval = evaluate(*job, eval_batches, batch, eval_seed);
      progress.finish();
      std::printf("eval @ %lld: loss %.4f%s, accuracy %.2f%%%s\n", (long long)step, last_eval.loss,
                  job->loss_in_units(last_eval.loss).c_str(), 100 * last_eval.accuracy, last_eval.extra.c_str());
      if (log.is_open())
        log << step << ",eval," << last_eval.loss << "," << last_eval.accuracy << "," << optimizer->lr() << ",,"
            << progress.elapsed_seconds() << ",\n";
      if (target > 0 && last_eval.accuracy >= target) {
        std::printf("reached target accuracy %.2f%% at step %lld\n", 100 * target, (long long)step);
        save(step);
        break;
      }
    }
    if (!ckpt.empty() && (step % ckpt_every == 0 || last)) save(step);
  }
  progress.finish();
  std::printf("final: step %lld, eval loss %.4f, accuracy %.2f%%%s, wall %.1f s", (long long)step, last_eval.loss,
              100 * last_eval.accuracy, last_eval.extra.c_str(), progress.elapsed_seconds());
  if (skipped > 0) std::printf(", %lld steps skipped (non-finite)", (long long)skipped);
  std::printf("\n");
  const std::string report = job->final_report(batch);
  if (!report.empty()) std::printf("%s\n", report.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

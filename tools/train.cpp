// train: trains a transformer on a task from the command line, with a progress line, a CSV log,
// periodic evaluation, checkpoints and bit-identical resume. `build/train --help` lists every flag.
// This file holds the flags and the loop; the tasks and their models are jobs in tools/train/.
//   build/train copy --layers 4 --heads 8 --d-model 64 --seq-len 128 --optimizer radam --steps 6000
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <sstream>
#include <vector>

#include "datasets/mnist.h"
#include "datasets/pixel_task.h"
#include "datasets/text.h"
#include "engine/allocator.h"
#include "engine/anomaly.h"
#include "engine/autograd.h"
#include "engine/cli.h"
#include "engine/cuda.h"
#include "engine/error.h"
#include "engine/optim.h"
#include "engine/progress.h"
#include "engine/schedule.h"
#include "engine/threadpool.h"
#include "models/checkpoint.h"
#include "models/transformer.h"
#include "ops/binary.h"
#include "ops/mixed_precision.h"
#include "tools/train/csv_log.h"
#include "tools/train/job.h"
#include "tools/train/memory_estimate.h"
#include "tools/train/run_files.h"

using namespace eng;
using namespace eng::jobs;

namespace {

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, NamedTensors params, double lr, double wd) {
  if (name == "sgd") return std::make_unique<SGD>(std::move(params), lr, 0.9, wd);
  if (name == "adam") return std::make_unique<Adam>(std::move(params), lr, 0.9, 0.999, 1e-8, wd);
  if (name == "adamw") return std::make_unique<AdamW>(std::move(params), lr, 0.9, 0.999, 1e-8, wd);
  if (name == "radam") return std::make_unique<RAdam>(std::move(params), lr, 0.9, 0.999, 1e-8, wd);
  fail("train: --optimizer must be sgd, adam, adamw or radam, got '", name, "'");
}

struct Eval {
  double loss = 0, accuracy = 0;
  int64_t edits = 0, labels = 0;  // label errors and reference labels (jobs that decode labels)
  std::string extra;
};

// ", label error rate 12.34%" when a job counted reference labels, else "".
std::string label_error_text(int64_t edits, int64_t labels) {
  if (labels == 0) return "";
  char buf[48];
  std::snprintf(buf, sizeof buf, ", label error rate %.2f%%", 100.0 * double(edits) / double(labels));
  return buf;
}

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
    e.edits += r.edits;
    e.labels += r.labels;
  }
  e.accuracy = counted ? double(correct) / double(counted) : 0;
  e.extra = job.eval_extra(batch, data);
  job.model().train();
  return e;
}

// Every digit of v, so that a checkpoint's value compares equal only to the same double.
std::string exact(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// "the pixels task" or "the text, pixels and classify tasks".
std::string task_list(const std::vector<std::string>& tasks) {
  std::string s = "the ";
  for (size_t i = 0; i < tasks.size(); ++i) s += (i == 0 ? "" : i + 1 == tasks.size() ? " and " : ", ") + tasks[i];
  return s + (tasks.size() == 1 ? " task" : " tasks");
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

// --device cuda is refused, saying why, unless the run stays on what dispatches to CUDA (docs/cuda.md): a CUDA
// build with a device, the character LM with softmax attention, positions added to the embeddings or none, and
// Adam or AdamW; no checkpoints yet (they are written from host memory).
void check_cuda_run(const std::string& task, const TransformerConfig& c, const std::string& optimizer,
                    bool checkpoints) {
  ENG_CHECK(cuda::device_count() > 0, "train: --device cuda: ", cuda::unavailable_reason());
  ENG_CHECK(task == "text", "train: --device cuda trains the text task only, not '", task, "'");
  ENG_CHECK(c.attention == "softmax" && c.attention_options.get_string("impl", "auto") != "naive",
            "train: --device cuda needs --attention softmax (its flash kernel), got '", c.attention, "'");
  ENG_CHECK(c.positional == PositionalKind::Sinusoidal || c.positional == PositionalKind::Learned ||
                c.positional == PositionalKind::None,
            "train: --device cuda needs --positional sinusoidal, learned or none, got ", positional_name(c.positional));
  ENG_CHECK(!c.reversible && c.mem_len == 0 && (c.kv_heads == 0 || c.kv_heads == c.heads),
            "train: --device cuda does not support --reversible, --mem-len or --kv-heads yet");
  ENG_CHECK(optimizer == "adam" || optimizer == "adamw", "train: --device cuda needs --optimizer adam or adamw, got '",
            optimizer, "'");
  ENG_CHECK(!checkpoints, "train: --device cuda does not write or resume checkpoints yet");
}

int run(int argc, char** argv) {
  Cli cli("train", "Trains a transformer on a task: copy (decoder-only, the seed paper's 4.1.1 task),\n"
                   "reverse or sort (encoder-decoder), text (character-level LM on --data FILE),\n"
                   "mlm (masked bytes of --data FILE, 15 % replaced by a mask token: a bidirectional encoder, bits per\n"
                   "masked character; for attention that cannot be causal, e.g. linformer),\n"
                   "pixels (autoregressive Fashion-MNIST, or MNIST in --data DIR),\n"
                   "ctc (speech-like frames to phoneme labels: a bidirectional encoder, CTC loss in nats per utterance,\n"
                   "label error rate; its accuracy counts the utterances decoded exactly),\n"
                   "classify (Fashion-MNIST, or MNIST in --data DIR, as --patch x --patch patches: an encoder,\n"
                   "mean-pooled, 10 classes).");
  cli.add_positionals("TASK", "copy, reverse, sort, text, mlm, pixels, ctc or classify (or --task)", 1);
  auto& task_name = cli.add_string("task", "copy", "copy, reverse, sort, text, mlm, pixels, ctc or classify (or the "
                                   "first argument)");
  auto& data_path = cli.add_string("data", "", "text, mlm: the corpus file (any bytes; split 90/5/5 in order); pixels, "
                                   "classify: an MNIST directory (default: the installed Fashion-MNIST)");
  auto& test_images = cli.add_int("test-images", 10000, {1, 10000000}, "pixels, classify: test images scored at the end (bits/dim, "
                                  "accuracy)");
  auto& samples = cli.add_string("samples", "", "pixels: PNG grid of samples and completions written at the end");
  auto& mixtures = cli.add_int("mixtures", 0, {0, 1 << 20}, "pixels: 0 = a 256-way softmax per pixel; K = a discretised mixture of K "
                               "logistics (PixelCNN++, ops/dmol.h)");
  auto& patch = cli.add_int("patch", 4, {1, 1 << 10}, "classify: patch side P; an image becomes (28/P)^2 tokens of P*P values");
  auto& phonemes = cli.add_int("phonemes", 20, {1, 1 << 20}, "ctc: distinct phonemes (P + 1 output classes with the blank)");
  auto& features = cli.add_int("features", 16, {1, 1 << 20}, "ctc: features per frame");
  auto& noise = cli.add_double("noise", 0.5, RealRange::at_least(0), "ctc: standard deviation of the noise on every frame feature");
  auto& min_labels = cli.add_int("min-labels", 4, {1, 1 << 20}, "ctc: fewest phonemes per utterance");
  auto& max_labels = cli.add_int("max-labels", 12, {1, 1 << 20}, "ctc: most phonemes per utterance");
  auto& min_duration = cli.add_int("min-duration", 2, {1, 1 << 20}, "ctc: fewest frames per phoneme");
  auto& max_duration = cli.add_int("max-duration", 6, {1, 1 << 20}, "ctc: most frames per phoneme");
  auto& test_utterances = cli.add_int("test-utterances", 1000, {1, 10000000}, "ctc: fixed test utterances (the same for every "
                                      "--seed) scored for the label error rate at the end");
  auto& layers = cli.add_int("layers", 4, {1, 1024}, "decoder layers (encoder layers for reverse/sort, ctc and classify)");
  auto& enc_layers = cli.add_int("encoder-layers", 0, {0, 1024}, "encoder layers for reverse/sort (0: same as --layers)");
  auto& heads = cli.add_int("heads", 8, {1, 1 << 16}, "attention heads");
  auto& kv_heads = cli.add_int("kv-heads", 0, {0, 1 << 16}, "key/value heads (0: --heads; 1: multi-query; a divisor: grouped-query)");
  auto& d_model = cli.add_int("d-model", 64, {1, 1 << 24}, "model width");
  auto& d_ff = cli.add_int("d-ff", 0, {0, 1 << 26}, "feed-forward width (0: 4 x d-model)");
  auto& dropout = cli.add_double("dropout", 0.0, RealRange::below(0, 1), "dropout probability");
  auto& attention = cli.add_string("attention", "softmax", "attention variant (see the list below)");
  auto& attn_opts = cli.add_list("attn-opt", "a variant option name=value");
  auto& norm = cli.add_string("norm", "pre", "pre or post layer norm placement");
  auto& norm_type = cli.add_string("norm-type", "layer", "layer or rms");
  auto& positional = cli.add_string("positional", "sinusoidal", "none, sinusoidal, learned, rotary, alibi or relative "
                                    "(Transformer-XL's, softmax-family attention)");
  auto& mem_len = cli.add_int("mem-len", 0, {0, 1 << 24}, "text: Transformer-XL memory of the last N positions; training reads "
                              "--batch consecutive streams (docs/transformer_xl.md)");
  auto& activation = cli.add_string("activation", "gelu", "relu, gelu or gelu-tanh");
  auto& reversible = cli.add_bool("reversible", false, "reversible layers (Reformer §3): activation memory "
                                 "independent of depth; pre-norm, not reverse/sort (docs/reversible.md)");
  auto& seq_len = cli.add_int("seq-len", 128, {1, 1 << 24}, "longest sequence (copy: both halves and the separator); copy, "
                              "reverse, sort and text");
  auto& symbols = cli.add_int("symbols", 10, {1, 1 << 20}, "distinct symbols (copy, reverse, sort)");
  auto& fixed = cli.add_bool("fixed-length", false, "always use the longest sequence (copy, reverse, sort)");
  auto& opt_name = cli.add_string("optimizer", "radam", "sgd (momentum 0.9), adam, adamw or radam");
  auto& lr = cli.add_double("lr", 1e-3, RealRange::at_least(0), "learning rate");
  auto& schedule = cli.add_string("schedule", "step:3000=1e-4",
                                  "constant | step:S=LR,... | cosine:warmup=W,total=T,min=M");
  auto& wd = cli.add_double("weight-decay", 0.0, RealRange::at_least(0), "weight decay");
  auto& clip = cli.add_double("clip", 1.0, RealRange::at_least(0), "clip the global gradient norm (0: off)");
  auto& accum = cli.add_int("accum", 1, {1, 1 << 20}, "micro-batches accumulated per optimizer step");
  auto& steps = cli.add_int("steps", 6000, {1, int64_t(1) << 48}, "optimizer steps");
  auto& max_minutes = cli.add_double("max-minutes", 0.0, RealRange::at_least(0),
                                     "stop after the first step that ends past this wall time, then evaluate (0: no limit)");
  auto& batch = cli.add_int("batch", 32, {1, 1 << 24}, "sequences (utterances, images) per micro-batch");
  auto& seed = cli.add_int("seed", 1, IntRange::at_least(0), "seed of the model and the data");
  auto& threads = cli.add_int("threads", 0, {0, 1024}, "threads (0: ENG_THREADS or all cores)");
  auto& device = cli.add_string("device", "cpu", "cpu or cuda (a CUDA build; task text with softmax attention and "
                                "adam or adamw, docs/cuda.md)");
  auto& log_path = cli.add_string("log", "", "CSV log of every logged step");
  auto& log_every = cli.add_int("log-every", 10, {1, int64_t(1) << 48}, "steps between progress updates and log rows");
  auto& eval_every = cli.add_int("eval-every", 250, {0, int64_t(1) << 48}, "steps between evaluations (0: only at the end)");
  auto& eval_batches = cli.add_int("eval-batches", 4, {1, 1 << 20}, "batches per evaluation");
  auto& ckpt = cli.add_string("checkpoint", "", "checkpoint file written every --checkpoint-every steps and at the end");
  auto& ckpt_every = cli.add_int("checkpoint-every", 500, {0, int64_t(1) << 48}, "steps between checkpoints (0: only "
                                 "at the end)");
  auto& resume = cli.add_string("resume", "", "checkpoint to resume from (same flags, same threads: identical run)");
  auto& target = cli.add_double("target-accuracy", 0.0, RealRange::closed(0, 1), "stop once evaluation accuracy reaches this (0: off; ctc: "
                                 "the utterances decoded exactly)");
  auto& on_nan = cli.add_string("on-nan", "stop", "a NaN/Inf loss or gradient: stop (exit 1, checkpoint kept) or "
                                "skip (drop that step's update)");
  auto& max_memory = cli.add_double("max-memory", 0, RealRange::at_least(0), "GiB the run may hold (0: the memory "
                                    "available when it starts): a run estimated to need more is refused before it "
                                    "starts, an allocation beyond it fails with a message");
  auto& precision_flag = cli.add_string("precision", "fp32", "fp32, or bf16: mixed precision, bf16 matrix products "
                                         "accumulated in f32, f32 master weights and checkpoints (ops/mixed_precision.h)");
  auto& anomaly = cli.add_bool("detect-anomaly", false, "check every op's output and gradient, name the first that "
                               "turns non-finite (slower)");
  std::string variants;
  for (const auto& [n, d] : attention_variants()) variants += "\n  " + n + ": " + d;
  if (!cli.parse(argc, argv)) {
    std::printf("\nattention variants:%s\n", variants.c_str());
    return 0;
  }
  if (!cli.positional().empty()) {
    ENG_CHECK(!cli.was_set("task"), "train: the task is given twice, as '", cli.positional()[0], "' and --task ",
              task_name);
    task_name = cli.positional()[0];
  }
  if (threads > 0) set_num_threads(int(threads));
  ENG_CHECK(device == "cpu" || device == "cuda", "train: --device must be cpu or cuda, got '", device, "'");
  ENG_CHECK(on_nan == "stop" || on_nan == "skip", "train: --on-nan must be stop or skip, got '", on_nan, "'");
  const GemmPrecision precision = parse_precision(precision_flag, "train: --precision");
  ENG_CHECK(precision == GemmPrecision::F32 || device == "cpu", "train: --precision bf16 runs on the CPU only");
  set_detect_anomaly(anomaly);

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

  const std::vector<std::string> tasks{"copy", "reverse", "sort", "text", "mlm", "pixels", "ctc", "classify"};
  ENG_CHECK(std::find(tasks.begin(), tasks.end(), task_name) != tasks.end(), "train: unknown task '", task_name,
            "' (copy, reverse, sort, text, mlm, pixels, ctc or classify)");
  // Task-specific flags given to another task would be silently ignored: refuse them.
  const std::vector<std::string> seq{"copy", "reverse", "sort"}, ctc{"ctc"};
  const std::vector<std::pair<std::string, std::vector<std::string>>> readers{
      {"data", {"text", "mlm", "pixels", "classify"}}, {"test-images", {"pixels", "classify"}},
      {"samples", {"pixels"}}, {"mixtures", {"pixels"}}, {"patch", {"classify"}}, {"seq-len", {"copy", "reverse", "sort", "text", "mlm"}},
      {"symbols", seq},
      {"fixed-length", seq}, {"encoder-layers", {"reverse", "sort"}}, {"phonemes", ctc}, {"features", ctc},
      {"noise", ctc}, {"min-labels", ctc}, {"max-labels", ctc}, {"min-duration", ctc}, {"max-duration", ctc},
      {"test-utterances", ctc}, {"mem-len", {"text"}}};
  for (const auto& [flag, readers_of] : readers)
    ENG_CHECK(!cli.was_set(flag) || std::find(readers_of.begin(), readers_of.end(), task_name) != readers_of.end(),
              "train: --", flag, " is for ", task_list(readers_of), ", not '", task_name, "'");
  // The files first, before any data is loaded: a run that cannot write its results stops now, not after training.
  const RunFiles files({{"checkpoint", ckpt}, {"log", log_path}, {"samples", samples}},
                       {{"data", data_path}, {"resume", resume}});

  // Keys of the task (beyond the model's) that a checkpoint must match on resume.
  std::map<std::string, std::string> task_config;
  std::function<std::unique_ptr<Job>()> make_job;
  int64_t positions = seq_len, input_features = 0;  // per sequence of a micro-batch, for the memory estimate
  if (task_name != "ctc" && task_name != "classify") {
    task_config["symbols"] = std::to_string(symbols);
    task_config["fixed_length"] = fixed ? "true" : "false";
  }
  if (task_name == "copy") {
    const CopyTask task(seq_len, symbols, fixed);
    c.vocab = task.vocab();
    c.decoder_layers = layers;
    c.encoder_layers = 0;
    c.max_len = seq_len;
    make_job = [&c, task] { return make_copy_job(c, task); };
  } else if (task_name == "reverse" || task_name == "sort") {
    const Seq2SeqTask task(task_name == "reverse" ? Seq2SeqTask::Kind::Reverse : Seq2SeqTask::Kind::Sort, seq_len,
                           symbols, fixed);
    c.vocab = task.vocab();
    c.decoder_layers = layers;
    c.encoder_layers = enc_layers > 0 ? enc_layers : layers;
    c.max_len = seq_len + 1;
    positions = seq_len + 1;
    make_job = [&c, task] { return make_seq2seq_job(c, task); };
  } else if (task_name == "text") {
    ENG_CHECK(!data_path.empty(), "train: task text needs --data FILE (any text file; docs/datasets.md says where to "
              "get enwik8)");
    c.vocab = TextCorpus::kVocab;
    c.decoder_layers = layers;
    c.encoder_layers = 0;
    c.max_len = seq_len;
    c.mem_len = mem_len;
    ENG_CHECK(mem_len == 0 || resume.empty(), "train: --resume with --mem-len is not supported (the memory and the "
              "position in the streams are not in the checkpoint)");
    make_job = [&] { return make_text_job(c, data_path, seq_len); };
  } else if (task_name == "mlm") {
    ENG_CHECK(!data_path.empty(), "train: task mlm needs --data FILE (any text file; docs/datasets.md says where to "
              "get enwik8)");
    c.vocab = TextCorpus::kVocab + 1;  // the bytes and the mask token
    c.decoder_layers = 0;
    c.encoder_layers = layers;
    c.max_len = seq_len;
    make_job = [&] { return make_masked_text_job(c, data_path, seq_len); };
  } else if (task_name == "pixels") {
    auto splits = std::make_shared<ImageSplits>(load_mnist(locate_mnist(data_path)));
    c.vocab = PixelTask::kVocab;
    c.decoder_layers = layers;
    c.encoder_layers = 0;
    c.max_len = splits->train.image_bytes();
    c.outputs = 3 * mixtures;
    positions = c.max_len;
    make_job = [&c, splits, &test_images, &samples, &mixtures] {
      return make_pixel_job(c, std::move(*splits), test_images, samples, mixtures);
    };
  } else if (task_name == "ctc") {
    CTCTaskOptions opt;
    opt.phonemes = phonemes;
    opt.features = features;
    opt.noise = noise;
    opt.min_labels = min_labels;
    opt.max_labels = max_labels;
    opt.min_duration = min_duration;
    opt.max_duration = max_duration;
    const CTCTask task(opt);
    c.vocab = task.classes();
    c.encoder_layers = layers;
    c.decoder_layers = 0;
    c.max_len = task.max_frames();
    positions = task.max_frames();
    input_features = task.features();
    task_config = {{"phonemes", std::to_string(phonemes)},         {"features", std::to_string(features)},
                   {"noise", exact(noise)},                        {"min_labels", std::to_string(min_labels)},
                   {"max_labels", std::to_string(max_labels)},     {"min_duration", std::to_string(min_duration)},
                   {"max_duration", std::to_string(max_duration)}};
    make_job = [&c, task, &test_utterances] { return make_ctc_job(c, task, test_utterances); };
  } else {  // classify
    auto splits = std::make_shared<ImageSplits>(load_mnist(locate_mnist(data_path)));
    const ImageDataset& images = splits->train;
    ENG_CHECK(images.height % patch == 0 && images.width % patch == 0, "train: --patch ", patch,
              " must divide the ", images.height, "x", images.width, " images");
    c.vocab = images.classes;
    c.encoder_layers = layers;
    c.decoder_layers = 0;
    c.max_len = (images.height / patch) * (images.width / patch);
    positions = c.max_len;
    input_features = patch * patch;
    task_config = {{"patch", std::to_string(patch)}};
    make_job = [&c, splits, &patch, &test_images] {
      return make_classify_job(c, std::move(*splits), patch, test_images);
    };
  }

  // Memory: refuse a run that cannot fit before allocating anything for it, and bound the allocator by the same
  // limit, so that what the estimate misses fails with a message rather than the kernel's out-of-memory kill.
  const double limit = max_memory > 0 ? max_memory * 1024 * 1024 * 1024 : double(allocator::available_system_memory());
  const std::string limit_text = max_memory > 0 ? "of --max-memory" : "of memory available on this machine";
  if (limit > 0) {
    check_memory(estimate_training_memory(c, batch, positions, input_features, opt_name == "sgd" ? 1 : 2), limit,
                 limit_text);
    allocator::set_limit(size_t(limit), max_memory > 0 ? "--max-memory " + exact(max_memory) + " GiB"
                                                       : "the memory available when train started; --max-memory "
                                                         "sets another");
  }
  std::unique_ptr<Job> job = make_job();
  job->check_data(batch);

  if (device == "cuda") {
    check_cuda_run(task_name, c, opt_name, !ckpt.empty() || !resume.empty());
    job->model().to(Device::CUDA);  // before the optimizer, whose state is made where the parameters are
  }
  auto optimizer = make_optimizer(opt_name, job->model().named_parameters(), lr, wd);
  auto sched = parse_schedule(schedule, lr);
  std::map<std::string, std::string> config = c.to_map();
  config["task"] = task_name;
  config.insert(task_config.begin(), task_config.end());

  Rng data(uint64_t(seed) * 7919 + 17);
  int64_t start = 0;
  if (!resume.empty()) {
    auto meta = load_checkpoint(resume, job->model(), optimizer.get());
    check_checkpoint_config(resume, meta, config);
    auto number = [&](const char* key) -> uint64_t {
      auto it = meta.find(key);
      ENG_CHECK(it != meta.end(), "train: checkpoint ", resume, ": metadata '", key, "' is missing");
      return uint64_t(parse_int(it->second, IntRange::at_least(0), "train: checkpoint " + resume + ": " + key));
    };
    start = int64_t(number("step"));
    data.set_position(number("data_rng_position"));
    job->model_rng().set_position(number("model_rng_position"));
    ENG_CHECK(start < steps, "train: checkpoint ", resume, " is at step ", start, ", not before --steps ", steps,
              ": nothing is left to train (raise --steps to train further)");
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

  std::printf("task %s, %lld parameters, attention %s, %s, %s, %d threads\n", task_name.c_str(),
              (long long)job->model().num_parameters(), attention.c_str(), opt_name.c_str(), precision_name(precision),
              num_threads());
  const bool ler = job->decodes_labels();  // the log gets a label_error_rate column
  std::unique_ptr<CsvLog> log;
  if (!log_path.empty())
    log = std::make_unique<CsvLog>(log_path, std::string("step,kind,loss,accuracy,lr,tokens_per_s,elapsed_s,grad_norm") +
                                                 (ler ? ",label_error_rate" : ""),
                                   start);
  const double elapsed_before = log ? log->elapsed_before() : 0;  // a resumed run's time continues in its log
  auto ler_field = [&](int64_t edits, int64_t labels) {
    return !ler ? std::string() : labels ? "," + exact(double(edits) / double(labels)) : std::string(",");
  };

  Progress progress(start, steps);
  const uint64_t eval_seed = uint64_t(seed) * 104729 + 3;
  double window_loss = 0, grad_norm = 0;
  int64_t window_correct = 0, window_counted = 0, window_tokens = 0, window_steps = 0, skipped = 0;
  int64_t window_edits = 0, window_labels = 0;
  double window_start = 0;
  Eval last_eval;
  int64_t step = start;
  job->model().train();
  const PrecisionScope scope(precision);  // training steps and evaluations alike
  while (step < steps) {
    optimizer->set_lr(sched->lr(step));
    optimizer->zero_grad();
    double step_loss = 0;
    try {
      for (int64_t m = 0; m < accum; ++m) {
        StepResult r = job->run(batch, data);
        Tensor loss = r.penalty.defined() ? add(r.loss, r.penalty) : r.loss;  // the penalty trains, not reported
        if (accum > 1) loss = mul_scalar(loss, 1.0 / double(accum));
        loss.backward();
        step_loss += r.loss.item() / double(accum);
        window_correct += r.correct;
        window_counted += r.counted;
        window_tokens += r.tokens;
        window_edits += r.edits;
        window_labels += r.labels;
      }
    } catch (const Error& e) {
      fail("train: step ", step + 1, ": ", e.what());
    }
    grad_norm = clip_grad_norm(optimizer->params(), clip > 0 ? clip : INFINITY);
    ++step;
    const bool last = step == steps || (max_minutes > 0 && progress.elapsed_seconds() >= 60 * max_minutes);
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
    if (step % log_every == 0 || last) {
      double now = progress.elapsed_seconds();
      double tps = double(window_tokens) / std::max(now - window_start, 1e-9);
      double l = window_steps ? window_loss / double(window_steps) : NAN;
      double acc = window_counted ? double(window_correct) / double(window_counted) : 0;
      const std::string label_errors =
          window_labels ? " | LER " + fmt("%.1f%%", 100.0 * double(window_edits) / double(window_labels)) : "";
      progress.update(step, "loss " + fmt("%.4f", l) + " | acc " + fmt("%.1f%%", 100 * acc) + label_errors +
                                " | gnorm " + fmt("%.3g", grad_norm) + " | " + fmt("%.0f", tps) + " tok/s");
      if (log)
        log->row(std::to_string(step) + ",train," + exact(l) + "," + exact(acc) + "," + exact(optimizer->lr()) + "," +
                 exact(tps) + "," + exact(elapsed_before + now) + "," + exact(grad_norm) +
                 ler_field(window_edits, window_labels));
      window_loss = 0;
      window_correct = window_counted = window_tokens = window_steps = window_edits = window_labels = 0;
      window_start = now;
    }
    if ((eval_every > 0 && step % eval_every == 0) || last) {
      last_eval = evaluate(*job, eval_batches, batch, eval_seed);
      progress.finish();
      std::printf("eval @ %lld: loss %.4f%s, accuracy %.2f%%%s%s\n", (long long)step, last_eval.loss,
                  job->loss_in_units(last_eval.loss).c_str(), 100 * last_eval.accuracy,
                  label_error_text(last_eval.edits, last_eval.labels).c_str(), last_eval.extra.c_str());
      if (log)
        log->row(std::to_string(step) + ",eval," + exact(last_eval.loss) + "," + exact(last_eval.accuracy) + "," +
                 exact(optimizer->lr()) + ",," + exact(elapsed_before + progress.elapsed_seconds()) + "," +
                 ler_field(last_eval.edits, last_eval.labels));
      if (target > 0 && last_eval.accuracy >= target) {
        std::printf("reached target accuracy %.2f%% at step %lld\n", 100 * target, (long long)step);
        save(step);
        break;
      }
    }
    if (!ckpt.empty() && ((ckpt_every > 0 && step % ckpt_every == 0) || last)) save(step);
    if (last) break;
  }
  progress.finish();
  // The figures on one line, then what the job adds (a sample starts on a line of its own).
  std::printf("final: step %lld, wall %.1f s%s, eval loss %.4f%s, accuracy %.2f%%%s%s\n", (long long)step,
              progress.elapsed_seconds(),
              skipped > 0 ? (", " + std::to_string(skipped) + " steps skipped (non-finite)").c_str() : "",
              last_eval.loss, job->loss_in_units(last_eval.loss).c_str(), 100 * last_eval.accuracy,
              label_error_text(last_eval.edits, last_eval.labels).c_str(), last_eval.extra.c_str());
  const std::string report = job->final_report(batch);
  if (!report.empty()) std::printf("%s\n", report.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {  // a bare `train` is a newcomer's first try: show how to start, not a 6000-step run
    std::fprintf(stderr, "usage: train TASK [flags]   (TASK: copy, reverse, sort, text, mlm, pixels, ctc or classify)\n"
                         "  e.g. train copy --steps 500        train text --data README.md --steps 200\n"
                         "train --help lists every flag and attention variant.\n");
    return 2;
  }
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: train: out of memory (lower --batch, the sequence length or the model's size)\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}

// Speech-like recognition with CTC (datasets/ctc_task.h stands in for the seed paper's WSJ, §4.3, which cannot
// be had here): a bidirectional FrameEncoder maps each frame to P + 1 class logits (blank 0), trained with
// ctc_loss on their log-softmax (the loss is nats per utterance). Scores: the label error rate, the summed edit
// distance of the greedy (best-path) decoding to the references over the summed reference labels (Graves et al.
// 2006), which the loop reports from StepResult::edits / labels; accuracy = the utterances decoded exactly.
// Evaluation uses the loop's fixed validation utterances; the final report, kTestUtteranceSeed's.
#include <algorithm>
#include <cstdio>

#include "datasets/ctc_task.h"
#include "engine/autograd.h"
#include "models/frame_encoder.h"
#include "ops/ctc_decode.h"
#include "ops/ctc_loss.h"
#include "ops/softmax.h"
#include "tools/train/job.h"
#include "tools/train/task.h"

namespace eng::jobs {

namespace {

// The test utterances' generator: the same for every --seed, so that runs are compared on one test set, and
// never a training or validation stream (keys 7919·seed + 17 and 104729·seed + 3 reach 2026 for no seed below
// 2^60). Drawn in chunks of a fixed size, so that the set does not depend on --batch.
constexpr uint64_t kTestUtteranceSeed = 2026;
constexpr int64_t kTestChunk = 50;

class CTCJob : public Job {
 public:
  CTCJob(const TransformerConfig& c, const CTCTask& task, int64_t test_utterances)
      : task_(task), test_utterances_(test_utterances), model_(c, task.features()) {}
  Module& model() override { return model_; }
  Rng& model_rng() override { return model_.rng(); }
  StepResult run_rows(const Rng& data, int64_t first_row, int64_t batch) override {
    return score(task_.sample(data, first_row, batch));
  }
  bool decodes_labels() const override { return true; }
  std::string final_report(int64_t) override {
    NoGradGuard no_grad;
    model_.eval();
    Rng rng(kTestUtteranceSeed);
    StepResult total;
    for (int64_t first = 0; first < test_utterances_; first += kTestChunk) {
      const StepResult r = score(task_.sample(rng, first, std::min(kTestChunk, test_utterances_ - first)));
      total.edits += r.edits;
      total.labels += r.labels;
      total.correct += r.correct;
      total.counted += r.counted;
    }
    model_.train();
    char buf[192];
    std::snprintf(buf, sizeof buf, "test: label error rate %.2f%% over %lld utterances (%lld edits / %lld labels), "
                  "%.2f%% decoded exactly", 100.0 * double(total.edits) / double(total.labels),
                  (long long)total.counted, (long long)total.edits, (long long)total.labels,
                  100.0 * double(total.correct) / double(total.counted));
    return buf;
  }

 private:
  StepResult score(const CTCBatch& b) {
    const Tensor logits = model_.forward(b.frames, b.frame_lengths);
    StepResult r;
    r.loss = ctc_loss(log_softmax(logits, -1), b.labels, b.frame_lengths, b.label_lengths);
    if (model_.training()) r.penalty = attention_penalty(model_.layers);
    const LabelSeqs hyp = ctc_greedy_decode(logits, b.frame_lengths), ref = unpad_labels(b.labels, b.label_lengths);
    for (size_t i = 0; i < ref.size(); ++i) {
      const int64_t e = edit_distance(hyp[i], ref[i]);
      r.edits += e;
      r.labels += int64_t(ref[i].size());
      r.correct += e == 0;
      r.counted++;
      r.tokens += b.frame_lengths[i];
    }
    return r;
  }

  CTCTask task_;
  int64_t test_utterances_;
  FrameEncoder model_;
};

class CTCFlags : public TaskFlags {
 public:
  explicit CTCFlags(Cli& cli)
      : phonemes_(cli.add_int("phonemes", 20, {1, 1 << 20}, "distinct phonemes (P + 1 output classes with the blank)")),
        features_(cli.add_int("features", 16, {1, 1 << 20}, "features per frame")),
        noise_(cli.add_double("noise", 0.5, RealRange::at_least(0), "standard deviation of the noise on every frame "
                              "feature")),
        min_labels_(cli.add_int("min-labels", 4, {1, 1 << 20}, "fewest phonemes per utterance")),
        max_labels_(cli.add_int("max-labels", 12, {1, 1 << 20}, "most phonemes per utterance")),
        min_duration_(cli.add_int("min-duration", 2, {1, 1 << 20}, "fewest frames per phoneme")),
        max_duration_(cli.add_int("max-duration", 6, {1, 1 << 20}, "most frames per phoneme")),
        test_utterances_(cli.add_int("test-utterances", 1000, {1, 10000000}, "fixed test utterances (the same for "
                                     "every --seed) scored for the label error rate at the end")) {}
  TaskPlan plan(const TaskInput& in) const override {
    CTCTaskOptions opt;
    opt.phonemes = phonemes_;
    opt.features = features_;
    opt.noise = noise_;
    opt.min_labels = min_labels_;
    opt.max_labels = max_labels_;
    opt.min_duration = min_duration_;
    opt.max_duration = max_duration_;
    const CTCTask task(opt);
    TaskPlan p(in.model);
    p.model.vocab = task.classes();
    p.model.encoder_layers = in.layers;
    p.model.decoder_layers = 0;
    p.model.max_len = task.max_frames();
    p.positions = task.max_frames();
    p.input_features = task.features();
    p.keys = {{"phonemes", std::to_string(phonemes_)},       {"features", std::to_string(features_)},
              {"noise", exact_decimal(noise_)},              {"min_labels", std::to_string(min_labels_)},
              {"max_labels", std::to_string(max_labels_)},   {"min_duration", std::to_string(min_duration_)},
              {"max_duration", std::to_string(max_duration_)}};
    p.make_job = [c = p.model, task, test = test_utterances_] { return std::make_unique<CTCJob>(c, task, test); };
    return p;
  }

 private:
  int64_t &phonemes_, &features_;
  double& noise_;
  int64_t &min_labels_, &max_labels_, &min_duration_, &max_duration_, &test_utterances_;
};

}  // namespace

ENG_REGISTER_TASK("ctc", "speech-like frames to phoneme labels: a bidirectional encoder, CTC loss in nats per "
                  "utterance, label error rate; its accuracy counts the utterances decoded exactly", false,
                  [](Cli& cli) { return std::make_unique<CTCFlags>(cli); });

}  // namespace eng::jobs

// Image classification (Fashion-MNIST, or MNIST with --data DIR): each image is cut into P x P patches
// (datasets/image_patches.h; P = 4 gives 49 tokens of 16 values in [0, 1]), a FrameEncoder with the pooled head
// maps them to class logits, trained with cross-entropy. Training images are drawn uniformly (with replacement)
// by the data generator, validation images by the loop's fixed evaluation generator; the final report is the
// accuracy on the first --test-images images of the test split, in order.
#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "datasets/image_dataset.h"
#include "datasets/image_patches.h"
#include "engine/autograd.h"
#include "engine/error.h"
#include "models/frame_encoder.h"
#include "tools/train/job.h"
#include "tools/train/task.h"
#include "tools/train/task_flags.h"

namespace eng::jobs {

namespace {

class ClassifyJob : public Job {
 public:
  ClassifyJob(const TransformerConfig& c, ImageSplits splits, int64_t patch, int64_t test_images)
      : splits_(std::move(splits)), patch_(patch), test_images_(test_images),
        model_(c, splits_.train.channels * patch * patch) {}
  Module& model() override { return model_; }
  Rng& model_rng() override { return model_.rng(); }
  StepResult run_rows(const Rng& data, int64_t first_row, int64_t batch) override {
    const ImageDataset& images = model_.training() ? splits_.train : splits_.valid;
    return score(gather(images, sample_indices(images, data, first_row, batch)));
  }
  std::string final_report(int64_t batch) override {
    NoGradGuard no_grad;
    model_.eval();
    const int64_t n = std::min(test_images_, splits_.test.size());
    StepResult total;
    for (int64_t first = 0; first < n; first += batch) {
      std::vector<int64_t> idx(static_cast<size_t>(std::min(batch, n - first)));
      for (size_t i = 0; i < idx.size(); ++i) idx[i] = first + int64_t(i);
      const StepResult r = score(gather(splits_.test, idx));
      total.correct += r.correct;
      total.counted += r.counted;
    }
    model_.train();
    char buf[128];
    std::snprintf(buf, sizeof buf, "test: accuracy %.2f%% over the first %lld test images",
                  100.0 * double(total.correct) / double(total.counted), (long long)total.counted);
    return buf;
  }

 private:
  StepResult score(const ImageBatch& b) {
    const Tensor tokens = image_patches(b.pixels, patch_);
    const Tensor logits = model_.forward_pooled(tokens);
    StepResult r;
    r.loss = token_loss(logits, b.labels);
    if (model_.training()) r.penalty = attention_penalty(model_.layers);
    r.tokens = tokens.size(0) * tokens.size(1);
    count_correct(logits, b.labels, r);
    return r;
  }

  ImageSplits splits_;
  int64_t patch_, test_images_;
  FrameEncoder model_;
};

class ClassifyFlags : public TaskFlags {
 public:
  explicit ClassifyFlags(Cli& cli)
      : images_(cli, "test images scored at the end (accuracy)"),
        patch_(cli.add_int("patch", 4, {1, 1 << 10}, "patch side P; an image becomes (28/P)^2 tokens of P*P values")) {}
  std::vector<FlagPath> inputs() const override { return {{"data", images_.data}}; }
  TaskPlan plan(const TaskInput& in) const override {
    auto splits = std::make_shared<ImageSplits>(images_.load());
    const ImageDataset& images = splits->train;
    ENG_CHECK(images.height % patch_ == 0 && images.width % patch_ == 0, "train: --patch ", patch_,
              " must divide the ", images.height, "x", images.width, " images");
    TaskPlan p(in.model);
    p.model.vocab = images.classes;
    p.model.encoder_layers = in.layers;
    p.model.decoder_layers = 0;
    p.model.max_len = (images.height / patch_) * (images.width / patch_);
    p.positions = p.model.max_len;
    p.input_features = patch_ * patch_;
    p.keys = {{"patch", std::to_string(patch_)}};
    p.make_job = [c = p.model, splits, patch = patch_, test = images_.test_images] {
      return std::make_unique<ClassifyJob>(c, std::move(*splits), patch, test);
    };
    return p;
  }

 private:
  ImageFlags images_;
  int64_t& patch_;
};

}  // namespace

ENG_REGISTER_TASK("classify", "Fashion-MNIST, or MNIST in --data DIR, as --patch x --patch patches: an encoder, "
                  "mean-pooled, 10 classes", false, [](Cli& cli) { return std::make_unique<ClassifyFlags>(cli); });

}  // namespace eng::jobs

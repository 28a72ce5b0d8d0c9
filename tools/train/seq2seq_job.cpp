// The encoder-decoder jobs: reverse and sort (datasets/seq2seq_tasks.h), scored by teacher-forced token accuracy
// and by the exact match of greedy decoding.
#include <cstdio>

#include "datasets/seq2seq_tasks.h"
#include "tools/train/job.h"
#include "tools/train/task.h"
#include "tools/train/task_flags.h"

namespace eng::jobs {

namespace {

class Seq2SeqJob : public Job {
 public:
  Seq2SeqJob(const TransformerConfig& c, const Seq2SeqTask& task) : task_(task), model_(c) {}
  Module& model() override { return model_; }
  Rng& model_rng() override { return model_.rng(); }
  StepResult run_rows(const Rng& data, int64_t first_row, int64_t batch) override {
    Seq2SeqBatch b = task_.sample(data, first_row, batch);
    Tensor logits = model_.forward(b.src, b.tgt_in, b.src_lengths);
    StepResult r;
    r.loss = token_loss(logits, b.tgt_out);
    r.tokens = b.src.numel() + b.tgt_in.numel();
    count_correct(logits, b.tgt_out, r);
    return r;
  }
  std::string eval_extra(int64_t batch, Rng& data) override {
    Seq2SeqBatch b = task_.sample(data, 0, batch);
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

class Seq2SeqFlags : public TaskFlags {
 public:
  Seq2SeqFlags(Cli& cli, Seq2SeqTask::Kind kind)
      : kind_(kind), seq_(cli, "longest sequence"),
        encoder_layers_(cli.add_int("encoder-layers", 0, {0, 1024}, "encoder layers (0: same as --layers)")) {}
  TaskPlan plan(const TaskInput& in) const override {
    const Seq2SeqTask task(kind_, seq_.seq_len, seq_.symbols, seq_.fixed);
    TaskPlan p(in.model);
    p.model.vocab = task.vocab();
    p.model.decoder_layers = in.layers;
    p.model.encoder_layers = encoder_layers_ > 0 ? encoder_layers_ : in.layers;
    p.model.max_len = seq_.seq_len + 1;
    p.positions = seq_.seq_len + 1;
    p.keys = seq_.keys();
    p.make_job = [c = p.model, task] { return std::make_unique<Seq2SeqJob>(c, task); };
    return p;
  }

 private:
  Seq2SeqTask::Kind kind_;
  SymbolFlags seq_;
  int64_t& encoder_layers_;
};

}  // namespace

ENG_REGISTER_TASK("reverse", "encoder-decoder: the symbols in reverse order", false,
                  [](Cli& cli) { return std::make_unique<Seq2SeqFlags>(cli, Seq2SeqTask::Kind::Reverse); });
ENG_REGISTER_TASK("sort", "encoder-decoder: the symbols sorted", false,
                  [](Cli& cli) { return std::make_unique<Seq2SeqFlags>(cli, Seq2SeqTask::Kind::Sort); });

}  // namespace eng::jobs

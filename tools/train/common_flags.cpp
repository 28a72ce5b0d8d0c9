#include "tools/train/common_flags.h"

#include "engine/error.h"
#include "tools/train/task.h"

namespace eng::jobs {

ModelFlags::ModelFlags(Cli& cli)
    : layers(cli.add_int("layers", 4, {1, 1024}, "layers of the model: the decoder's, the encoder's for an "
                         "encoder-only task, both for an encoder-decoder task (see its --encoder-layers)")),
      heads(cli.add_int("heads", 8, {1, 1 << 16}, "attention heads")),
      kv_heads(cli.add_int("kv-heads", 0, {0, 1 << 16}, "key/value heads (0: --heads; 1: multi-query; a divisor: "
                           "grouped-query)")),
      d_model(cli.add_int("d-model", 64, {1, 1 << 24}, "model width")),
      d_ff(cli.add_int("d-ff", 0, {0, 1 << 26}, "feed-forward width (0: 4 x d-model)")),
      dropout(cli.add_double("dropout", 0.0, RealRange::below(0, 1), "dropout probability")),
      attention(cli.add_string("attention", "softmax", "attention variant (see the list below)")),
      attn_opts(cli.add_list("attn-opt", "a variant option name=value")),
      norm(cli.add_string("norm", "pre", "pre or post layer norm placement")),
      norm_type(cli.add_string("norm-type", "layer", "layer or rms")),
      positional(cli.add_string("positional", "sinusoidal", "none, sinusoidal, learned, rotary, alibi or relative "
                                "(Transformer-XL's, softmax-family attention)")),
      activation(cli.add_string("activation", "gelu", "relu, gelu (erf), gelu-tanh, swiglu or geglu (gated: a third "
                                "feed-forward projection)")),
      reversible(cli.add_bool("reversible", false, "reversible layers (Reformer §3): activation memory independent "
                              "of depth; pre-norm, not encoder-decoder (docs/reversible.md)")),
      bias(cli.add_bool("bias", true, "biases in the Linear layers (attention projections, feed-forward, head)")),
      tie_embeddings(cli.add_bool("tie-embeddings", false, "the output head is the token embedding matrix "
                                  "(decoder-only and encoder-only models)")),
      embed_scale(cli.add_double("embed-scale", 0, RealRange::at_least(0), "multiplier of the token embeddings "
                                 "(0: sqrt(d-model))")),
      rope_theta(cli.add_double("rope-theta", 10000, RealRange::above(0), "rotary: base of the angles")),
      rope_pairing(cli.add_string("rope-pairing", "rotate-half", "rotary: rotate-half (dims i, i + D/2) or "
                                  "interleaved (dims 2i, 2i + 1)")),
      norm_eps(cli.add_double("norm-eps", 0, RealRange::below(0, 1), "epsilon of the norms (0: 1e-5 for layer, "
                              "1e-6 for rms)")) {}

TransformerConfig ModelFlags::config(uint64_t seed) const {
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
  c.bias = bias;
  c.tie_embeddings = tie_embeddings;
  c.embed_scale = embed_scale;
  c.rope_theta = rope_theta;
  c.rope_pairing = parse_rope_pairing(rope_pairing);
  c.norm_eps = norm_eps;
  c.seed = seed;
  return c;
}

TrainingFlags::TrainingFlags(Cli& cli)
    : optimizer(cli.add_string("optimizer", "radam", "sgd (momentum 0.9), adam, adamw or radam")),
      lr(cli.add_double("lr", 1e-3, RealRange::at_least(0), "learning rate")),
      schedule(cli.add_string("schedule", "step:3000=1e-4", "constant | step:S=LR,... | cosine:warmup=W,total=T,min=M")),
      weight_decay(cli.add_double("weight-decay", 0.0, RealRange::at_least(0), "weight decay")),
      clip(cli.add_double("clip", 1.0, RealRange::at_least(0), "clip the global gradient norm (0: off)")),
      accum(cli.add_int("accum", 1, {1, 1 << 20}, "micro-batches accumulated per optimizer step")),
      steps(cli.add_int("steps", 6000, {1, int64_t(1) << 48}, "optimizer steps")),
      max_minutes(cli.add_double("max-minutes", 0.0, RealRange::at_least(0), "stop after the first step that ends "
                                 "past this wall time, then evaluate (0: no limit)")),
      batch(cli.add_int("batch", 32, {1, 1 << 24}, "sequences (utterances, images) per micro-batch")),
      seed(cli.add_int("seed", 1, IntRange::at_least(0), "seed of the model and the data")),
      precision(cli.add_string("precision", "fp32", "fp32, or bf16: mixed precision, bf16 matrix products "
                               "accumulated in f32, f32 master weights, optimizer state and checkpoints "
                               "(ops/mixed_precision.h; cpu only)")),
      reduce(cli.add_string("reduce", "exact", "under mpirun: exact (summed in rank order, the bits of one process "
                            "with --accum N) or fast (MPI all-reduce per layer during backward)")),
      shard_optimizer(cli.add_bool("shard-optimizer", false, "under mpirun: each rank keeps the optimizer state of "
                                   "its 1/N of the parameters (ZeRO-1; the same bits)")) {}

RunFlags::RunFlags(Cli& cli)
    : threads(cli.add_int("threads", 0, {0, 1024}, "threads (0: ENG_THREADS or all cores)")),
      device(cli.add_string("device", "cpu", "cpu or cuda (a CUDA build; task " +
                            join_names(task_names([](const TaskInfo& t) { return t.cuda; }), " or ") +
                            " with softmax attention and adam or adamw, docs/cuda.md)")),
      log(cli.add_string("log", "", "CSV log of every logged step")),
      log_every(cli.add_int("log-every", 10, {1, int64_t(1) << 48}, "steps between progress updates and log rows")),
      eval_every(cli.add_int("eval-every", 250, {0, int64_t(1) << 48}, "steps between evaluations (0: only at the "
                             "end)")),
      eval_batches(cli.add_int("eval-batches", 4, {1, 1 << 20}, "batches per evaluation")),
      checkpoint(cli.add_string("checkpoint", "", "checkpoint file written every --checkpoint-every steps and at the "
                                "end")),
      checkpoint_every(cli.add_int("checkpoint-every", 500, {0, int64_t(1) << 48}, "steps between checkpoints (0: "
                                   "only at the end)")),
      resume(cli.add_string("resume", "", "checkpoint to resume from (same flags, same threads: identical run)")),
      init(cli.add_string("init", "", "checkpoint whose model weights start the run (fine-tuning: the same model "
                          "and tokenizer; the optimizer and the step start afresh)")),
      target_accuracy(cli.add_double("target-accuracy", 0.0, RealRange::closed(0, 1), "stop once evaluation accuracy "
                                     "reaches this (0: off; ctc: the utterances decoded exactly)")),
      on_nan(cli.add_string("on-nan", "stop", "a NaN/Inf loss or gradient: stop (exit 1, checkpoint kept) or skip "
                            "(drop that step's update)")),
      max_memory(cli.add_double("max-memory", 0, RealRange::at_least(0), "GiB the run may hold (0: the memory "
                                "available when it starts): a run estimated to need more is refused before it "
                                "starts, an allocation beyond it fails with a message")),
      detect_anomaly(cli.add_bool("detect-anomaly", false, "check every op's output and gradient, name the first "
                                  "that turns non-finite (slower)")) {}

}  // namespace eng::jobs

// The one interface every attention mechanism implements, and the registry that builds one by name.
//
// Shapes: q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv] -> [B, H, Lq, Dv]. Projections, heads
// and dropout on the output live in the multi-head layer (models/multihead.h); a mechanism only maps
// (q, k, v, mask) to outputs, plus, where it has one, a recurrent form for generation.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/parse_number.h"
#include "engine/tensor.h"
#include "engine/type_tag.h"
#include "engine/autograd.h"
#include "ops/attention_mask.h"
#include "models/module.h"

namespace eng {

// Per-variant options given as strings (from the command line: --attn-opt name=value). Every option must
// be read by the variant's constructor: a name it did not read is an error, never silently ignored.
class AttentionOptions {
 public:
  AttentionOptions() = default;
  explicit AttentionOptions(std::map<std::string, std::string> kv) : kv_(std::move(kv)) {}
  void set(const std::string& key, const std::string& value) { kv_[key] = value; }
  // Sets from "name=value" (a --attn-opt flag); `who` names the tool in the error for a malformed pair.
  void set_pair(const std::string& pair, const std::string& who);
  // A number in `range`, else an error naming the variant, the option, the range and the text
  // (engine/parse_number.h). The range is required: every numeric option states its valid values.
  int64_t get_int(const std::string& key, int64_t fallback, IntRange range) const;
  double get_double(const std::string& key, double fallback, RealRange range) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  // A seed: any integer >= 0 when given; the fallback (say, the layer's AttentionConfig::seed) may use all 64 bits.
  uint64_t get_seed(const std::string& key, uint64_t fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  // Throws naming the variant and the first option no getter asked for.
  void check_all_used(const std::string& variant) const;
  // The variant the options are read for, named in the getters' errors (make_attention sets it).
  void set_variant(const std::string& variant) const { variant_ = variant; }
  const std::map<std::string, std::string>& items() const { return kv_; }

 private:
  std::map<std::string, std::string> kv_;
  mutable std::set<std::string> used_;
  mutable std::string variant_;
  std::string option_name(const std::string& key) const;
};

struct AttentionConfig {
  int64_t heads = 1;
  int64_t head_dim = 64;
  int64_t max_len = 0;  // longest sequence the model is built for (0 = unbounded); some variants need it
  bool causal = false;  // the model is autoregressive (variants that cannot be causal refuse)
  uint64_t seed = 0;    // for variants with random projections or hashes
  AttentionOptions options;
};

// Recurrent state of one attention layer during generation (a KV cache, or linear attention's s and z).
struct AttentionState {
  virtual ~AttentionState() = default;
  virtual bool is_a(const void*) const { return false; }  // tag_cast's question (engine/type_tag.h)
  int64_t length = 0;  // tokens consumed so far
};

// What a variant's forward() accepts beyond q, k and v (ops/attention_mask.h), declared once in its constructor.
// Attention::forward and step check a call against it before the variant's code runs, and refuse what it does
// not accept in one format: "attention 'NAME': does not take FEATURE (WHY); it takes: ...". The multi-head layer,
// the tools and the registry sweep (tests/test_attention_registry.cpp) ask it instead of listing variant names.
struct AttentionAccepts {
  bool causal = true;         // mask.causal
  bool non_causal = true;     // a call without mask.causal (bidirectional, or cross-attention)
  bool key_lengths = true;    // key padding
  bool keep = false;          // a dense keep mask
  bool bias = false;          // an additive logits bias (relative positions arrive as one)
  bool alibi = false;         // ALiBi slopes
  bool query_offset = false;  // causal queries that continue a sequence: query_offset > 0 or fewer queries than keys
  bool cross = false;         // without mask.causal, a different number of keys than queries
  bool grouped_step = false;  // step() takes k and v with G heads dividing q's H (grouped-query attention): head h
                              // reads group h / (H / G), and the state is kept per group
  bool cuda = false;          // forward() runs on a CUDA tensor (docs/cuda.md)
  std::string why_not;        // the reason for the refusals, shown in the message
  std::string no_step;        // when new_state() is null, why (if the variant says): shown when step is refused
};

class Attention : public Module {
 public:
  virtual std::string name() const = 0;
  virtual bool is_a(const void*) const { return false; }  // tag_cast's question (engine/type_tag.h)
  const AttentionAccepts& accepts() const { return accepts_; }
  // Throws the shared refusal unless `mask` (for Lq queries against Lk keys) is one accepts() allows; `where`
  // follows the name in the message ("", " step").
  void check_accepted(const AttentionMask& mask, int64_t Lq, int64_t Lk, const char* where) const;

  // q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv] -> [B, H, Lq, Dv]: checks the shapes and the mask against
  // accepts(), then runs the variant's attend().
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask);
  // The positions the variant attends over for `tokens` tokens: tokens, except where the variant appends its own
  // (bp-transformer's span nodes).
  virtual int64_t positions(int64_t tokens) const { return tokens; }

  // Recurrent form: q, k, v of ONE new position [B, H, 1, D] at position state.length; the state absorbs
  // k and v (the caller, not step, then advances state.length), and the result
  // is the output of that position [B, H, 1, Dv], equal to the causal parallel form's row. The mask is
  // checked as forward's (no key padding: one step has one key), then the variant's attend_step() runs.
  // Variants without one return null from new_state.
  virtual std::unique_ptr<AttentionState> new_state() const { return nullptr; }
  Tensor step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state, const AttentionMask& mask);
  bool has_step() const { return new_state() != nullptr; }

  // Cross-attention over a fixed memory during generation: memory_state digests the memory's k [B, H, L, D]
  // and v once (mask: key padding), attend_state answers queries [B, H, Lq, D] from the digest. Variants
  // without a digest return null, and the layer keeps k and v and calls forward instead.
  virtual std::unique_ptr<AttentionState> memory_state(const Tensor& k, const Tensor& v,
                                                       const AttentionMask& mask) const;
  virtual Tensor attend_state(const Tensor& q, const AttentionState& state) const;

  // A term the mechanism adds to the training loss (adaptive-span's span penalty); undefined when it has none.
  virtual Tensor penalty() const { return Tensor(); }

 protected:
  // The variant's parallel form and recurrent form, called by forward() and step() after their checks.
  virtual Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) = 0;
  virtual Tensor attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                             const AttentionMask& mask);
  AttentionAccepts accepts_;
};

using AttentionFactory = std::function<std::unique_ptr<Attention>(const AttentionConfig&)>;

// Registers a factory under `name` with a one-line description (shown by --help). `sweep` holds the options the
// registry sweep (tests/test_attention_registry.cpp) builds the variant with on its small model (2 heads of 8, 16
// positions), for a variant whose defaults do not fit it; none when the defaults do.
bool register_attention(const std::string& name, const std::string& description, AttentionFactory factory,
                        std::map<std::string, std::string> sweep = {});
// Builds the named variant; an unknown name lists the known ones; unread options are an error.
std::unique_ptr<Attention> make_attention(const std::string& name, const AttentionConfig& config);
std::vector<std::pair<std::string, std::string>> attention_variants();  // (name, description), sorted
std::map<std::string, std::string> attention_sweep_options(const std::string& name);

}  // namespace eng

// Defines register_attention_ID(), which registers the variant: registration is explicit, so that a program links
// only the variants it names (an embedding program: docs/embedding.md) and the tools and the tests name them all
// (models/attention/variants.h). ID is the name with '_' for '-'; the macro stands in namespace eng.
#define ENG_REGISTER_ATTENTION(id, name, description, ...) \
  void register_attention_##id() { ::eng::register_attention(name, description, __VA_ARGS__); }

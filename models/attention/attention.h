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

#include "engine/tensor.h"
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
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_double(const std::string& key, double fallback) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  // Throws naming the variant and the first option no getter asked for.
  void check_all_used(const std::string& variant) const;
  const std::map<std::string, std::string>& items() const { return kv_; }

 private:
  std::map<std::string, std::string> kv_;
  mutable std::set<std::string> used_;
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
  int64_t length = 0;  // tokens consumed so far
};

class Attention : public Module {
 public:
  virtual std::string name() const = 0;
  virtual Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) = 0;

  // Recurrent form: q, k, v of ONE new position [B, H, 1, D] at position state.length; the state absorbs
  // k and v (the caller, not step, then advances state.length), and the result
  // is the output of that position [B, H, 1, Dv], equal to the causal parallel form's row.
  // Variants without one return null from new_state.
  virtual std::unique_ptr<AttentionState> new_state() const { return nullptr; }
  virtual Tensor step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                      const AttentionMask& mask);
  // True when step() also takes k and v with G heads, G dividing q's H (grouped-query attention: head h reads
  // group h / (H / G)), and keeps its state per group, so that a KV cache holds G heads instead of H.
  virtual bool grouped_step() const { return false; }

  // Cross-attention over a fixed memory during generation: memory_state digests the memory's k [B, H, L, D]
  // and v once (mask: key padding), attend_state answers queries [B, H, Lq, D] from the digest. Variants
  // without a digest return null, and the layer keeps k and v and calls forward instead.
  virtual std::unique_ptr<AttentionState> memory_state(const Tensor& k, const Tensor& v,
                                                       const AttentionMask& mask) const;
  virtual Tensor attend_state(const Tensor& q, const AttentionState& state) const;

  // A term the mechanism adds to the training loss (adaptive-span's span penalty); undefined when it has none.
  virtual Tensor penalty() const { return Tensor(); }
};

using AttentionFactory = std::function<std::unique_ptr<Attention>(const AttentionConfig&)>;

// Registers a factory under `name` with a one-line description (shown by --help).
bool register_attention(const std::string& name, const std::string& description, AttentionFactory factory);
// Builds the named variant; an unknown name lists the known ones; unread options are an error.
std::unique_ptr<Attention> make_attention(const std::string& name, const AttentionConfig& config);
std::vector<std::pair<std::string, std::string>> attention_variants();  // (name, description), sorted

}  // namespace eng

#define ENG_REGISTER_ATTENTION(name, description, factory) \
  static const bool ENG_CONCAT(eng_attention_registered_, __LINE__) = ::eng::register_attention(name, description, factory)

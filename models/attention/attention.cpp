// The checks every attention variant shares: forward() and step() test a call against what the variant declared
// in accepts_ (attention.h) and refuse the rest in one format before the variant's own code runs.
#include <string>

#include "engine/error.h"
#include "models/attention/attention.h"

namespace eng {
namespace {

std::string accepted_list(const AttentionAccepts& a) {
  std::string s;
  auto add = [&](bool on, const char* what) {
    if (on) s += (s.empty() ? "" : ", ") + std::string(what);
  };
  add(a.causal, "causal");
  add(a.non_causal, "non-causal");
  add(a.key_lengths, "key padding");
  add(a.keep, "keep mask");
  add(a.bias, "bias");
  add(a.alibi, "ALiBi");
  add(a.query_offset, "query offset");
  add(a.cross, "cross-attention");
  return s.empty() ? "nothing" : s;
}

}  // namespace

void Attention::check_accepted(const AttentionMask& mask, int64_t Lq, int64_t Lk, const char* where) const {
  const AttentionAccepts& a = accepts_;
  auto refuse_unless = [&](bool ok, const std::string& what) {
    ENG_CHECK(ok, "attention '", name(), "'", where, ": does not take ", what,
              a.why_not.empty() ? std::string() : " (" + a.why_not + ")", "; it takes: ", accepted_list(a));
  };
  refuse_unless(a.causal || !mask.causal, "a causal mask");
  refuse_unless(a.non_causal || mask.causal, "a non-causal call");
  refuse_unless(a.key_lengths || mask.key_lengths.empty(), "key padding");
  refuse_unless(a.keep || !mask.keep.defined(), "a keep mask");
  refuse_unless(a.bias || !mask.bias.defined(), "a bias");
  refuse_unless(a.alibi || !mask.alibi_slopes.defined(), "ALiBi slopes");
  if (mask.causal)
    refuse_unless(a.query_offset || (mask.query_offset == 0 && Lq == Lk),
                  "causal queries that continue a sequence (query_offset " + std::to_string(mask.query_offset) +
                      ", " + std::to_string(Lq) + " queries, " + std::to_string(Lk) + " keys; step() continues one)");
  else
    refuse_unless(a.cross || Lq == Lk,
                  "cross-attention (" + std::to_string(Lq) + " queries, " + std::to_string(Lk) + " keys)");
}

Tensor Attention::forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  const std::string who = "attention '" + name() + "'";
  check_qkv(q, k, v, who.c_str());
  check_attention_mask(mask, q.size(0), q.size(1), q.size(2), k.size(2), q.dtype(), who.c_str());
  check_accepted(mask, q.size(2), k.size(2), "");
  return attend(q, k, v, mask);
}

Tensor Attention::step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                       const AttentionMask& mask) {
  ENG_CHECK(has_step(), "attention '", name(), "': no recurrent form (step) for this variant",
            accepts_.no_step.empty() ? "" : ": " + accepts_.no_step);
  ENG_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.size(2) == 1 && k.size(2) == 1 && v.size(2) == 1,
            "attention '", name(), "' step: q, k and v must be one position [B, H, 1, D], got q ", q.shape(), ", k ",
            k.shape(), ", v ", v.shape());
  const bool heads_ok = accepts_.grouped_step ? k.size(1) >= 1 && q.size(1) % k.size(1) == 0 : k.size(1) == q.size(1);
  ENG_CHECK(q.size(0) == k.size(0) && k.shape() == Shape({v.size(0), v.size(1), 1, k.size(3)}) &&
                q.size(3) == k.size(3) && heads_ok && q.dtype() == k.dtype() && k.dtype() == v.dtype(),
            "attention '", name(), "' step: q ", q.shape(), ", k ", k.shape(), ", v ", v.shape(),
            " do not fit (same batch, head dim and dtype; k and v with ",
            accepts_.grouped_step ? "a number of heads dividing q's" : "q's heads", ")");
  ENG_CHECK(mask.key_lengths.empty(), "attention '", name(), "' step: key padding has no meaning for one step");
  ENG_CHECK(state.length >= 0, "attention '", name(), "' step: state.length is ", state.length);
  AttentionMask m = mask;  // the step's own position offset is what a recurrent form is for
  m.query_offset = 0;
  check_accepted(m, 1, 1, " step");
  return attend_step(q, k, v, state, mask);
}

Tensor Attention::attend_step(const Tensor&, const Tensor&, const Tensor&, AttentionState&, const AttentionMask&) {
  fail("attention '", name(), "': no recurrent form (step) for this variant");
}

std::unique_ptr<AttentionState> Attention::memory_state(const Tensor&, const Tensor&, const AttentionMask&) const {
  return nullptr;
}

Tensor Attention::attend_state(const Tensor&, const AttentionState&) const {
  fail("attention '", name(), "': no memory digest (attend_state) for this variant");
}

}  // namespace eng

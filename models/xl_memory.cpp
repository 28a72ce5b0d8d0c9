#include "models/xl_memory.h"

#include <algorithm>

#include "engine/autograd.h"
#include "engine/error.h"
#include "models/transformer.h"
#include "ops/index.h"
#include "ops/view.h"

namespace eng {

Tensor xl_next_memory(const Tensor& memory, const Tensor& h, int64_t mem_len) {
  ENG_CHECK(mem_len >= 0, "xl_next_memory: mem_len must be >= 0, got ", mem_len);
  ENG_CHECK(h.dim() == 3, "xl_next_memory: hidden states must be [B, L, d], got ", h.shape());
  ENG_CHECK(!memory.defined() || (memory.dim() == 3 && memory.size(0) == h.size(0) && memory.size(2) == h.size(2)),
            "xl_next_memory: memory ", memory.defined() ? memory.shape() : Shape{}, " does not match hidden states ",
            h.shape());
  NoGradGuard no_grad;
  const Tensor all = memory.defined() ? concat({memory, h}, 1) : h;
  const int64_t keep = std::min(mem_len, all.size(1));
  // clone: a copy of its own, so that the memory holds neither the graph nor the whole activation.
  return narrow(all, 1, all.size(1) - keep, keep).detach().clone();
}

XLMemory LanguageModel::new_memory() const { return XLMemory{cfg_.mem_len, {}}; }

Tensor LanguageModel::forward(const Tensor& ids, XLMemory& mem) const {
  ENG_CHECK(causal_, "LanguageModel: a Transformer-XL memory needs a causal model");
  ENG_CHECK(!cfg_.reversible, "LanguageModel: a Transformer-XL memory does not work with reversible layers");
  ENG_CHECK(mem.mem_len >= 0, "LanguageModel: memory mem_len must be >= 0, got ", mem.mem_len);
  ENG_CHECK(mem.mem_len == 0 || !positional_is_absolute(cfg_.positional), "LanguageModel: a Transformer-XL memory "
            "needs positions that are not added to the embeddings (relative, rotary, alibi or none), got '",
            positional_name(cfg_.positional), "'");
  ENG_CHECK(ids.dim() == 2, "LanguageModel: ids must be [B, L], got ", ids.shape());
  const int64_t M = mem.length();
  ENG_CHECK(M == 0 || (mem.layers.size() == layers.size() && mem.layers.front().size(0) == ids.size(0)),
            "LanguageModel: the memory holds ", mem.layers.size(), " layers of batch ",
            mem.layers.empty() ? 0 : mem.layers.front().size(0), ", the model has ", layers.size(),
            " layers and the ids batch ", ids.size(0));
  AttentionMask mask;
  mask.causal = true;
  mask.query_offset = M;  // query i is position M + i among the keys [memory ∘ segment]
  Tensor x = embed.forward(ids);
  std::vector<Tensor> next;
  for (size_t i = 0; i < layers.size(); ++i) {
    const Tensor m = M > 0 ? mem.layers[i] : Tensor();
    if (mem.mem_len > 0) next.push_back(xl_next_memory(m, x, mem.mem_len));
    x = layers[i]->forward(x, mask, m);
  }
  mem.layers = std::move(next);
  if (final_norm) x = final_norm->forward(x);
  return logits(x);
}

}  // namespace eng

// The attention registry: variants register by name with ENG_REGISTER_ATTENTION (explicitly: models/attention/
// variants.h); make_attention builds one, reads its options and refuses a causal build of a variant without a
// causal form.
#include "engine/error.h"
#include "models/attention/attention.h"

namespace eng {
namespace {

struct Entry {
  std::string description;
  AttentionFactory factory;
  std::map<std::string, std::string> sweep;
};

std::map<std::string, Entry>& registry() {
  static auto* r = new std::map<std::string, Entry>;
  return *r;
}

}  // namespace

bool register_attention(const std::string& name, const std::string& description, AttentionFactory factory,
                        std::map<std::string, std::string> sweep) {
  registry()[name] = Entry{description, std::move(factory), std::move(sweep)};
  return true;
}

std::unique_ptr<Attention> make_attention(const std::string& name, const AttentionConfig& config) {
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string known;
    for (const auto& [n, e] : registry()) known += (known.empty() ? "" : ", ") + n;
    fail("attention: unknown variant '", name, "' (known: ", known, ")");
  }
  ENG_CHECK(config.heads >= 1 && config.head_dim >= 1, "attention '", name, "': heads and head_dim must be >= 1");
  config.options.set_variant(name);
  auto a = it->second.factory(config);
  config.options.check_all_used(name);
  if (config.causal) {  // a causal model: refused now, not at its first forward
    AttentionMask causal;
    causal.causal = true;
    a->check_accepted(causal, 1, 1, "");
  }
  return a;
}

std::map<std::string, std::string> attention_sweep_options(const std::string& name) {
  auto it = registry().find(name);
  ENG_CHECK(it != registry().end(), "attention: unknown variant '", name, "'");
  return it->second.sweep;
}

std::vector<std::pair<std::string, std::string>> attention_variants() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [n, e] : registry()) out.emplace_back(n, e.description);
  return out;
}

}  // namespace eng

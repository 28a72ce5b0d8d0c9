// The attention registry (variants register themselves by name with ENG_REGISTER_ATTENTION, make_attention builds
// one) and the typed getters of per-variant options, each checked against its range.
#include "engine/error.h"
#include "engine/parse_number.h"
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

void AttentionOptions::set_pair(const std::string& pair, const std::string& who) {
  const size_t eq = pair.find('=');
  ENG_CHECK(eq != std::string::npos && eq > 0, who, ": --attn-opt expects name=value, got '", pair, "'");
  set(pair.substr(0, eq), pair.substr(eq + 1));
}

std::string AttentionOptions::option_name(const std::string& key) const {
  return (variant_.empty() ? "attention" : "attention '" + variant_ + "':") + " option " + key;
}

int64_t AttentionOptions::get_int(const std::string& key, int64_t fallback, IntRange range) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return fallback;
  used_.insert(key);
  return parse_int(it->second, range, option_name(key));
}

double AttentionOptions::get_double(const std::string& key, double fallback, RealRange range) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return fallback;
  used_.insert(key);
  return parse_real(it->second, range, option_name(key));
}

uint64_t AttentionOptions::get_seed(const std::string& key, uint64_t fallback) const {
  return kv_.count(key) ? uint64_t(get_int(key, 0, IntRange::at_least(0))) : fallback;
}

std::string AttentionOptions::get_string(const std::string& key, const std::string& fallback) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return fallback;
  used_.insert(key);
  return it->second;
}

bool AttentionOptions::get_bool(const std::string& key, bool fallback) const {
  std::string s = get_string(key, fallback ? "true" : "false");
  ENG_CHECK(s == "true" || s == "false" || s == "1" || s == "0", "attention option ", key,
            ": expected true or false, got '", s, "'");
  return s == "true" || s == "1";
}

void AttentionOptions::check_all_used(const std::string& variant) const {
  for (const auto& [k, v] : kv_)
    ENG_CHECK(used_.count(k), "attention '", variant, "': unknown option '", k, "'");
}

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


#include "engine/error.h"
#include "models/attention/attention.h"

namespace eng {
namespace {

struct Entry {
  std::string description;
  AttentionFactory factory;
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

int64_t AttentionOptions::get_int(const std::string& key, int64_t fallback) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return fallback;
  used_.insert(key);
  size_t pos = 0;
  int64_t v = 0;
  try {
    v = std::stoll(it->second, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  ENG_CHECK(pos == it->second.size() && pos > 0, "attention option ", key, ": expected an integer, got '",
            it->second, "'");
  return v;
}

double AttentionOptions::get_double(const std::string& key, double fallback) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return fallback;
  used_.insert(key);
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(it->second, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  ENG_CHECK(pos == it->second.size() && pos > 0, "attention option ", key, ": expected a number, got '", it->second,
            "'");
  return v;
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

Tensor Attention::step(const Tensor&, const Tensor&, const Tensor&, AttentionState&, const AttentionMask&) {
  fail("attention '", name(), "': no recurrent form (step) for this variant");
}

std::unique_ptr<AttentionState> Attention::memory_state(const Tensor&, const Tensor&, const AttentionMask&) const {
  return nullptr;
}

Tensor Attention::attend_state(const Tensor&, const AttentionState&) const {
  fail("attention '", name(), "': no memory digest (attend_state) for this variant");
}

bool register_attention(const std::string& name, const std::string& description, AttentionFactory factory) {
  registry()[name] = Entry{description, std::move(factory)};
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
  auto a = it->second.factory(config);
  config.options.check_all_used(name);
  return a;
}

std::vector<std::pair<std::string, std::string>> attention_variants() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [n, e] : registry()) out.emplace_back(n, e.description);
  return out;
}

}  // namespace eng

// The options of an attention variant (AttentionOptions, attention.h): typed getters, each number checked against
// its range by engine/parse_number.h, and the rule that an option no getter read is an error. Kept apart from the
// registry so that the fuzz targets link the parsing without the variants.
#include "engine/error.h"
#include "engine/parse_number.h"
#include "models/attention/attention.h"

namespace eng {

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
  ENG_CHECK(s == "true" || s == "false" || s == "1" || s == "0", option_name(key), " expects true or false, got '", s,
            "'");
  return s == "true" || s == "1";
}

void AttentionOptions::check_all_used(const std::string& variant) const {
  for (const auto& [k, v] : kv_)
    ENG_CHECK(used_.count(k), "attention '", variant, "': unknown option '", k, "'");
}

}  // namespace eng

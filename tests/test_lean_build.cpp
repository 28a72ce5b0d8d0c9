// What the lean and portable builds rest on (docs/embedding.md): the explicit list of attention variants matches
// the sources, so no variant can be left out of the tools; tag_cast answers as dynamic_cast would, for the builds
// without RTTI; and the error handler of the builds without exceptions gets each failed check's message.
#include <doctest/doctest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "engine/error.h"
#include "models/attention/attention.h"
#include "models/attention/linear.h"
#include "models/attention/softmax.h"
#include "models/attention/variants.h"

using namespace eng;

namespace {

// (id, name) of every ENG_REGISTER_ATTENTION in models/attention/*.cpp (the suite runs from the repository root).
std::set<std::pair<std::string, std::string>> registrations_in_sources() {
  std::set<std::pair<std::string, std::string>> out;
  for (const auto& entry : std::filesystem::directory_iterator("models/attention")) {
    if (entry.path().extension() != ".cpp") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    // ENG_REGISTER_ATTENTION(id, "name", ...), read by hand: std::regex trips GCC 12's -Wmaybe-uninitialized
    // under the sanitizers.
    const std::string macro = "ENG_REGISTER_ATTENTION(";
    for (size_t at = s.find(macro); at != std::string::npos; at = s.find(macro, at + 1)) {
      size_t i = at + macro.size(), id_end = i;
      while (id_end < s.size() && (std::isalnum(static_cast<unsigned char>(s[id_end])) || s[id_end] == '_')) ++id_end;
      if (id_end == i || s.compare(id_end, 3, ", \"") != 0) continue;
      const size_t name_end = s.find('"', id_end + 3);
      if (name_end == std::string::npos || name_end == id_end + 3) continue;
      out.emplace(s.substr(i, id_end - i), s.substr(id_end + 3, name_end - id_end - 3));
    }
  }
  return out;
}

struct HandlerCalled {
  std::string message;
};

}  // namespace

TEST_CASE("lean build: the variant list names every ENG_REGISTER_ATTENTION in the sources, and registers each") {
  std::set<std::string> listed;
#define ENG_LIST_(id) listed.insert(#id);
  ENG_ATTENTION_VARIANTS(ENG_LIST_)
#undef ENG_LIST_
  const auto found = registrations_in_sources();
  REQUIRE(found.size() >= 39);
  std::set<std::string> registered;
  for (const auto& [name, description] : attention_variants()) registered.insert(name);
  for (const auto& entry : found) {
    const std::string& id = entry.first;
    const std::string& name = entry.second;
    INFO(id);
    CHECK(listed.count(id) == 1);  // else: add X(id) to models/attention/variants.h
    std::string expected = name;
    for (char& c : expected) c = c == '-' ? '_' : c;
    CHECK(id == expected);  // the id is the name with '_' for '-', as `make embed VARIANTS=...` writes it
    CHECK(registered.count(name) == 1);
  }
  CHECK(listed.size() == found.size());
  CHECK(registered.size() == found.size());
}

TEST_CASE("lean build: tag_cast gives dynamic_cast's answers for the classes the Generator runs") {
  AttentionConfig c;
  c.heads = 2;
  c.head_dim = 4;
  const std::unique_ptr<Attention> softmax = make_attention("softmax", c);
  const std::unique_ptr<Attention> stateful = make_attention("stateful-softmax", c);
  const std::unique_ptr<Attention> linear = make_attention("causal-linear", c);
  const std::unique_ptr<Attention> other = make_attention("efficient", c);
  for (const Attention* a : {softmax.get(), stateful.get(), linear.get(), other.get()}) {
    INFO(a->name());
    CHECK(tag_cast<const SoftmaxAttention>(a) == dynamic_cast<const SoftmaxAttention*>(a));
    CHECK(tag_cast<const LinearAttention>(a) == dynamic_cast<const LinearAttention*>(a));
  }
  CHECK(tag_cast<const SoftmaxAttention>(stateful.get()) != nullptr);  // derives from SoftmaxAttention
  CHECK(tag_cast<const LinearAttention>(linear.get()) != nullptr);
  const std::unique_ptr<AttentionState> kv = softmax->new_state(), lin = linear->new_state();
  CHECK(tag_cast<KVCacheState>(kv.get()) == kv.get());
  CHECK(tag_cast<LinearState>(kv.get()) == nullptr);
  CHECK(tag_cast<LinearState>(lin.get()) == lin.get());
  CHECK(tag_cast<KVCacheState>(lin.get()) == nullptr);
  CHECK(tag_cast<KVCacheState>(static_cast<AttentionState*>(nullptr)) == nullptr);
}

TEST_CASE("lean build: without exceptions, a failed check reaches the handler set with set_error_handler") {
  // The handler here leaves by throwing (this build has exceptions); an embedder's would exit or log and return,
  // after which the process aborts.
  int user = 7;
  set_error_handler(
      [](const char* message, void* u) {
        CHECK(*static_cast<int*>(u) == 7);
        throw HandlerCalled{message};
      },
      &user);
  std::string got;
  try {
    fail_without_exceptions("matmul: a must be 2-D, got [3]");
  } catch (const HandlerCalled& h) {
    got = h.message;
  }
  set_error_handler(nullptr, nullptr);
  CHECK(got == "matmul: a must be 2-D, got [3]");
}

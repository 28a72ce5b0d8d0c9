#include <set>

#include "engine/autograd.h"
#include "engine/error.h"
#include "models/checkpoint.h"
#include "models/import/import.h"

namespace eng {

void save_imported(const std::string& out, const ImportedModel& m, const std::string& where) {
  NoGradGuard no_grad;
  LanguageModel model(m.config);
  std::map<std::string, Tensor> wanted;
  for (const auto& [name, p] : model.named_parameters()) wanted.emplace(name, p);
  std::set<std::string> seen;
  for (const auto& [name, t] : m.params) {
    auto it = wanted.find(name);
    ENG_CHECK(it != wanted.end(), "convert: ", where, ": the import produced '", name, "', which the model lacks");
    ENG_CHECK(t.shape() == it->second.shape(), "convert: ", where, ": '", name, "' has shape ", t.shape(),
              ", the model has ", it->second.shape());
    ENG_CHECK(seen.insert(name).second, "convert: ", where, ": '", name, "' is imported twice");
    it->second.copy_from(t);
  }
  for (const auto& [name, p] : wanted)
    ENG_CHECK(seen.count(name), "convert: ", where, ": no tensor was imported for the model's '", name, "'");
  std::map<std::string, std::string> meta = run_config_metadata(RunConfig{m.config.to_map(), {}, false});
  meta["import.source"] = m.source;
  save_checkpoint(out, model, nullptr, meta);
}

}  // namespace eng

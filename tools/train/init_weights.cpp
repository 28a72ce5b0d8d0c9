#include "tools/train/init_weights.h"

#include "engine/error.h"
#include "engine/safe_text.h"
#include "models/checkpoint.h"

namespace eng::jobs {

void init_weights(const std::string& path, Module& model, const std::map<std::string, std::string>& config) {
  // The metadata is compared before load_checkpoint changes anything (it changes nothing when its own checks fail).
  const SafetensorsFile file = load_safetensors(path);
  bool recorded = false;
  for (const auto& [key, value] : file.metadata) recorded = recorded || key.rfind("config.", 0) == 0;
  ENG_CHECK(!file.metadata.count("config.tokenizer") || config.count("tokenizer"), "train: --init ", path,
            ": the checkpoint was trained on the tokens of a tokenizer; give that tokenizer with --tokenizer");
  if (recorded) {
    for (const auto& [key, value] : config) {
      if (key == "seed" || key == "dropout") continue;  // they shape training, not the weights
      const auto it = file.metadata.find("config." + key);
      ENG_CHECK(it != file.metadata.end(), "train: --init ", path, ": the checkpoint does not record '", key,
                "', which this run sets to '", terminal_text(value.substr(0, 80)), "'");
      ENG_CHECK(it->second == value, "train: --init ", path, ": the checkpoint's ", key, " is '",
                terminal_text(it->second.substr(0, 80)), "', this run's '", terminal_text(value.substr(0, 80)),
                "' (--init needs the same model", key == "tokenizer" ? " and tokenizer)" : ")");
    }
  }
  (void)load_checkpoint(path, model, nullptr);
}

}  // namespace eng::jobs

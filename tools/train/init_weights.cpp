#include "tools/train/init_weights.h"

#include "engine/error.h"
#include "engine/safe_text.h"
#include "models/quantized.h"

namespace eng::jobs {

namespace {

void check_same(const std::string& path, const std::string& key, const std::map<std::string, std::string>& theirs,
                const std::string& ours) {
  const auto it = theirs.find(key);
  ENG_CHECK(it != theirs.end(), "train: --init ", path, ": the checkpoint does not record '", key,
            "', which this run sets to '", terminal_text(ours.substr(0, 80)), "'");
  ENG_CHECK(it->second == ours, "train: --init ", path, ": the checkpoint's ", key, " is '",
            terminal_text(it->second.substr(0, 80)), "', this run's '", terminal_text(ours.substr(0, 80)),
            "' (--init needs the same model", key == "tokenizer" ? " and tokenizer)" : ")");
}

}  // namespace

void init_weights(const std::string& path, Module& model, const RunConfig& config) {
  // The metadata is compared before load_checkpoint changes anything (it changes nothing when its own checks fail).
  const std::map<std::string, std::string> metadata = load_safetensors(path).metadata;
  ENG_CHECK(!has_quantized_weights(metadata), "train: --init ", path, ": holds quantized weights (an inference-only ",
            "file written by quantize): train from an f32 checkpoint");
  const RunConfig theirs = read_run_config(metadata);
  const auto tokenizer = config.task.find("tokenizer");
  ENG_CHECK(!theirs.task.count("tokenizer") || tokenizer != config.task.end(), "train: --init ", path,
            ": the checkpoint was trained on the tokens of a tokenizer; give that tokenizer with --tokenizer");
  if (!theirs.model.empty()) {
    for (const auto& [key, value] : config.model)
      if (key != "seed" && key != "dropout") check_same(path, key, theirs.model, value);  // training, not weights
    if (tokenizer != config.task.end()) check_same(path, "tokenizer", theirs.task, tokenizer->second);
  }
  (void)load_checkpoint(path, model, nullptr);
}

}  // namespace eng::jobs

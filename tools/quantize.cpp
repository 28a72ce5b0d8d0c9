// quantize: an inference-only copy of a checkpoint written by train, with every Linear weight and token-embedding
// table whose last dimension is a multiple of 32 in q8_0 or q4_0 blocks (ops/quant.h; the file layout is in
// docs/checkpoint.md); norms, biases and positions stay f32, and no optimizer state is kept. A q4_0 file keeps the
// token tables, the head and attention's value and output projections in q8_0 unless --pure (models/quantized.h).
// embed and load_checkpoint read the result; train refuses it.
//   build/quantize IN OUT --format q8_0|q4_0 [--pure]
#include <cstdio>
#include <map>
#include <memory>
#include <new>
#include <string>

#include "engine/cli.h"
#include "engine/error.h"
#include "engine/safe_text.h"
#include "engine/safetensors.h"
#include "models/checkpoint.h"
#include "models/quantized.h"
#include "models/transformer.h"
#include "tools/tool_main.h"

using namespace eng;

namespace {

// The model a checkpoint written by train describes (docs/checkpoint.md): a language model (decoder-only or
// encoder-only) or an encoder-decoder, built from its "config.*" metadata.
std::unique_ptr<Module> model_for(const std::string& path, const std::map<std::string, std::string>& metadata) {
  const std::map<std::string, std::string> config = read_run_config(metadata).model;
  ENG_CHECK(!config.empty(), "quantize: ", path, " has no config.* metadata: not a checkpoint written by train");
  TransformerConfig c;
  try {
    c = TransformerConfig::from_map(config);
  } catch (const Error& e) {
    fail("quantize: ", path, ": ", e.what());
  }
  if (c.encoder_layers > 0 && c.decoder_layers > 0) return std::make_unique<EncoderDecoder>(c);
  return std::make_unique<LanguageModel>(c, c.encoder_layers == 0);
}

int64_t stored_bytes(const Module& m) {
  int64_t n = 0;
  for (const auto& [name, p] : m.named_parameters()) n += p.numel() * int64_t(dtype_size(p.dtype()));
  return n;
}

int run(int argc, char** argv) {
  Cli cli("quantize", "Writes an inference-only copy of a checkpoint written by train, its Linear weights and token "
          "embeddings quantized (docs/checkpoint.md).");
  cli.add_positionals("IN OUT", "the checkpoint to read; the file to write (replaced atomically)", 2);
  auto& format = cli.add_string("format", "q8_0", "q8_0 (int8, 1.125 bytes per weight) or q4_0 (4-bit, 0.625; the "
                                "token tables, the head and attention's v and out projections in q8_0)");
  const bool& pure = cli.add_bool("pure", false, "q4_0: every weight in q4_0, the ones above too (smaller, less "
                                  "accurate)");
  if (!cli.parse(argc, argv)) return 0;
  ENG_CHECK(cli.positional().size() == 2, "quantize: expected IN and OUT (", cli.usage(), ")");
  const std::string in = cli.positional()[0], out = cli.positional()[1];
  QuantFormat f;
  ENG_CHECK(parse_quant_format(format, f), "quantize: --format expects q8_0 or q4_0, got '", terminal_text(format),
            "'");
  const std::map<std::string, std::string> metadata = load_safetensors(in).metadata;
  ENG_CHECK(!has_quantized_weights(metadata), "quantize: ", in, " is quantized already; quantize its f32 checkpoint");
  std::unique_ptr<Module> model = model_for(in, metadata);
  load_checkpoint(in, *model, nullptr);
  const int64_t before = stored_bytes(*model);
  const size_t count = quantize_model(*model, f, pure).size();
  // The run's description stays (config, task, step); the optimizer's keys go with its state.
  std::map<std::string, std::string> meta;
  for (const auto& [k, v] : metadata)
    if (k != "optimizer" && k != "optimizer_steps" && k != "checksum.crc32") meta[k] = v;
  for (const auto& [k, v] : quant_metadata(*model)) meta[k] = v;
  save_checkpoint(out, *model, nullptr, meta);
  std::map<std::string, int> per_format;
  for (const auto& [key, name] : quant_metadata(*model)) per_format[name]++;
  const int kept = f == QuantFormat::Q8_0 ? 0 : per_format["q8_0"];
  std::printf("%s: %zu tensors in %s", terminal_text(out).c_str(), count - size_t(kept), quant_format_name(f));
  if (kept > 0) std::printf(", %d in q8_0 (token tables, head, attention's v and out projections)", kept);
  std::printf("; parameters %.2f MB -> %.2f MB\n", double(before) / 1e6, double(stored_bytes(*model)) / 1e6);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return tool_main([&] { return run(argc, argv); },
                   "quantize: out of memory (the checkpoint's model does not fit in this memory)");
}

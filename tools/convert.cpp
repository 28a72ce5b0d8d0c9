// Converts a published checkpoint into an engine checkpoint that build/generate, build/embed and build/train
// (--init) read: a decoder-only language model with its config as metadata (models/import/import.h).
// Usage: convert hf DIR OUT.safetensors        (config.json + model.safetensors or sharded, F32/F16/BF16)
//        convert llama2c MODEL.bin OUT.safetensors
#include <cstdio>
#include <new>

#include "engine/cli.h"
#include "engine/error.h"
#include "engine/safe_text.h"
#include "models/import/import.h"
#include "tools/tool_main.h"

using namespace eng;

namespace {

int run(int argc, char** argv) {
  Cli cli("convert", "Converts a Hugging Face (GPT2LMHeadModel, LlamaForCausalLM) or llama2.c checkpoint into an "
          "engine checkpoint.");
  cli.add_positionals("hf|llama2c SOURCE OUT.safetensors", "the source format; the model directory (hf) or .bin "
                      "file (llama2c); the checkpoint to write", 3);
  if (!cli.parse(argc, argv)) return 0;
  const std::vector<std::string>& args = cli.positional();
  ENG_CHECK(args.size() == 3, "convert: expected FORMAT SOURCE OUT (", cli.usage(), ")");
  const std::string &format = args[0], &source = args[1], &out = args[2];
  ENG_CHECK(format == "hf" || format == "llama2c", "convert: FORMAT must be hf or llama2c, got '", format, "'");
  const ImportedModel m = format == "hf" ? import_hf(source) : import_llama2c(source);
  save_imported(out, m, source);
  const TransformerConfig& c = m.config;
  std::fprintf(stderr,
               "convert: %s -> %s: %s, %lld layers, d_model %lld, heads %lld (kv %lld), d_ff %lld, vocab %lld\n",
               source.c_str(), out.c_str(), m.source.c_str(), (long long)c.decoder_layers, (long long)c.d_model,
               (long long)c.heads, (long long)(c.kv_heads ? c.kv_heads : c.heads), (long long)c.d_ff,
               (long long)c.vocab);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return tool_main([&] { return run(argc, argv); }, "convert: out of memory");
}

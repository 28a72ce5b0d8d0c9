// inspect: lists the metadata and tensors of a safetensors checkpoint and checks its data against the CRC-32
// that save_checkpoint records; quantized tensors (docs/checkpoint.md) are shown with their format and logical shape.
// Every string from the file is printed through terminal_text, so that a name or a
// metadata value cannot reach the terminal as an escape sequence.
//   build/inspect [--stats] [--strip OUT.safetensors] FILE.safetensors
// --strip writes the inference-only checkpoint (parameters and buffers, no optimizer state) that embedded
// inference maps (docs/checkpoint.md).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <new>
#include <string>

#include "engine/cli.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/safe_text.h"
#include "engine/safetensors.h"
#include "models/checkpoint.h"
#include "ops/quant.h"
#include "tools/tool_main.h"

using namespace eng;

namespace {

// One pass over the elements; NaNs are counted apart so that one NaN does not hide the range.
std::string stats(const Tensor& t) {
  if (t.numel() == 0) return "  (empty)";
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0;
  int64_t nan = 0, n = t.numel();
  ENG_DISPATCH_ALL(t.dtype(), T, {
    const T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      double v = double(p[i]);
      if (std::isnan(v)) {
        ++nan;
        continue;
      }
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      sum += v;
    }
  });
  char buf[160];
  if (nan == n)
    std::snprintf(buf, sizeof buf, "  all %lld values are nan", (long long)n);
  else
    std::snprintf(buf, sizeof buf, "  min=%.6g max=%.6g mean=%.6g", lo, hi, sum / double(n - nan));
  std::string s = buf;
  if (nan > 0 && nan < n) s += "  nan=" + std::to_string(nan);
  return s;
}

// A tensor the metadata records as quantized (models/quantized.h: "quant.<name>"): its format and logical shape,
// and its values dequantized for --stats; nothing for other tensors, or when the blocks do not fit the format.
struct Quantized {
  std::string label;
  Tensor values;
};
Quantized quantized(const SafetensorsFile& f, const std::string& name, const Tensor& t) {
  const auto it = f.metadata.find("quant." + name);
  QuantFormat format;
  if (it == f.metadata.end() || !parse_quant_format(it->second, format) || t.dtype() != DType::U8 || t.dim() != 3 ||
      t.size(2) != quant_block_bytes(format) || t.size(1) == 0)
    return {};
  return {std::string("  ") + quant_format_name(format) + " blocks of " +
              shape_str({t.size(0), t.size(1) * kQuantBlock}),
          dequantize(t, format)};
}

int run(int argc, char** argv) {
  Cli cli("inspect", "Prints a safetensors file's metadata, its checksum state, then one line per tensor: name, "
          "dtype, shape. Exit status 1 when the data does not match its recorded CRC-32.");
  cli.add_positionals("FILE.safetensors", "the file to inspect", 1);
  auto& want_stats = cli.add_bool("stats", false, "also print min, max and mean of each tensor (NaNs are counted, "
                                  "not compared)");
  auto& strip = cli.add_string("strip", "", "write the parameters and buffers, without the optimizer state, to this "
                               "file (an inference-only checkpoint; the input's checksum must be intact)");
  if (!cli.parse(argc, argv)) return 0;
  ENG_CHECK(!cli.positional().empty(), "inspect: no file given (", cli.usage(), ")");
  const std::string path = cli.positional().front(), shown = terminal_text(path);
  const SafetensorsFile f = map_safetensors(path);
  std::printf("%s: %zu tensors\n", shown.c_str(), f.tensors.size());
  const ChecksumCheck sum = check_checksum(f);
  if (sum.recorded.empty())
    std::printf("checksum: none recorded (not written by save_checkpoint)\n");
  else if (sum.intact())
    std::printf("checksum: intact (CRC-32 %s)\n", sum.actual.c_str());
  else
    std::printf("checksum: CORRUPT: the tensor data has CRC-32 %s, the header records %s\n", sum.actual.c_str(),
                terminal_text(sum.recorded).c_str());
  if (!f.metadata.empty()) {
    std::printf("metadata:\n");
    for (const auto& [k, v] : f.metadata)
      std::printf("  %s: %s\n", terminal_text(k).c_str(), terminal_text(v).c_str());
  }
  int64_t total = 0;
  for (const auto& [name, t] : f.tensors) {
    const Quantized q = quantized(f, name, t);
    const std::string values = !want_stats            ? ""
                               : q.values.defined()   ? stats(q.values)
                               : t.dtype() == DType::U8 ? "  (bytes)"
                                                        : stats(t);
    std::printf("%s  %s  %s%s%s\n", terminal_text(name).c_str(), safetensors_dtype_name(t.dtype()),
                shape_str(t.shape()).c_str(), q.label.c_str(), values.c_str());
    total += t.numel();
  }
  std::printf("total: %lld elements\n", (long long)total);
  if (!strip.empty()) {
    ENG_CHECK(!sum.recorded.empty() && sum.intact(), "inspect: --strip: ", shown, " has no intact checksum: ",
              "an inference-only copy would record one over damaged or unchecked data");
    ENG_CHECK(!same_file(strip, path), "inspect: --strip ", terminal_text(strip), " is the input file");
    save_inference_checkpoint(strip, f);
    std::printf("wrote %s: the parameters and buffers without optimizer state\n", terminal_text(strip).c_str());
  }
  return sum.recorded.empty() || sum.intact() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return tool_main([&] { return run(argc, argv); },
                   "inspect: out of memory (the file's tensors do not fit in this machine's memory)");
}

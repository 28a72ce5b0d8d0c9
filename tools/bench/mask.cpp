// bench mask: renders a sparse attention variant's mask as a PNG, from the BlockSparseLayout its kernel runs
// (SparseAttention::layout), so the picture is what is computed: query i is row i, key j column j; dark where
// query i attends key j, light blue where the kernel computes the tile but masks the element, white where it
// skips the block. Heads with different patterns are drawn side by side.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "datasets/png.h"
#include "engine/cli.h"
#include "engine/error.h"
#include "models/attention/sparse_attention.h"
#include "tools/bench.h"

using namespace eng;

namespace {

enum Colour : uint8_t { kSkipped, kMasked, kAllowed, kGap };
const std::vector<uint8_t> kPalette = {255, 255, 255, 200, 218, 242, 24, 52, 120, 150, 150, 150};
// The widest and tallest picture drawn: 16384^2 pixels take 256 MiB here and 64 MiB of PNG (two bits each in
// stored, uncompressed blocks), and the walk below costs heads x n^2.
constexpr int64_t kMaxSide = 16384;

int bench_mask(int argc, char** argv) {
  Cli cli("bench mask", "Renders a sparse attention pattern's mask (as its kernel runs it) to a PNG.");
  auto& name = cli.add_string("attention", "bigbird", "the sparse variant");
  auto& n = cli.add_int("n", 256, {1, kMaxSide}, "sequence length");
  auto& heads = cli.add_int("heads", 2, {1, 1024}, "heads of the model (per-head patterns draw one panel per head)");
  auto& causal = cli.add_bool("causal", false, "the causal form");
  auto& opts = cli.add_list("attn-opt", "a variant option name=value");
  auto& pixel = cli.add_int("pixel", 0, {0, kMaxSide}, "pixels per position (0: as many as fit 512 pixels)");
  auto& png = cli.add_string("png", "", "the PNG file to write");
  if (!cli.parse(argc, argv, 2)) return 0;
  ENG_CHECK(!png.empty(), "bench mask: --png is required");
  AttentionConfig c;
  c.heads = heads;
  c.causal = causal;
  for (const std::string& kv : opts) c.options.set_pair(kv, "bench mask");
  const int64_t px = pixel > 0 ? pixel : std::max<int64_t>(1, 512 / n), side = n * px, gap = 8;
  ENG_CHECK(side <= kMaxSide, "bench mask: --n ", n, " x --pixel ", px, " is ", side, " pixels a side, over the ",
            kMaxSide, " this tool draws; lower --n or --pixel");
  auto attn = make_attention(name, c);
  auto* sparse = dynamic_cast<SparseAttention*>(attn.get());
  ENG_CHECK(sparse, "bench mask: attention '", name, "' is not a position-based sparse pattern");
  const auto L = sparse->layout(heads, n, n, 0, causal);
  const int64_t width = L->heads * side + (L->heads - 1) * gap;  // the distinct head patterns side by side
  ENG_CHECK(width <= kMaxSide, "bench mask: ", L->heads, " panels of ", side, " pixels make a picture ", width,
            " pixels wide, over the ", kMaxSide, " this tool draws; lower --n, --pixel or --heads");
  Picture picture;
  picture.width = width;
  picture.height = side;
  picture.palette = kPalette;
  std::vector<uint8_t>& pixels = picture.pixels;
  pixels.resize(size_t(width * side));
  int64_t allowed = 0, computed = 0;
  for (int64_t h = 0; h < L->heads; ++h)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = h * L->q_blocks() + i / L->block;
      std::vector<bool> in_block(size_t(n), false);
      for (int64_t e = L->row_start[size_t(r)]; e < L->row_start[size_t(r + 1)]; ++e)
        for (int64_t j = L->key_block[size_t(e)] * L->block; j < std::min(n, (L->key_block[size_t(e)] + 1) * L->block);
             ++j)
          in_block[size_t(j)] = true;
      for (int64_t j = 0; j < n; ++j) {
        const bool a = L->allowed(h, i, j);
        allowed += a, computed += in_block[size_t(j)];
        const Colour colour = a ? kAllowed : in_block[size_t(j)] ? kMasked : kSkipped;
        for (int64_t y = i * px; y < (i + 1) * px; ++y)
          for (int64_t x = h * (side + gap) + j * px; x < h * (side + gap) + (j + 1) * px; ++x)
            pixels[size_t(y * width + x)] = colour;
      }
    }
  for (int64_t h = 1; h < L->heads; ++h)
    for (int64_t y = 0; y < side; ++y)
      for (int64_t x = h * (side + gap) - gap; x < h * (side + gap); ++x) pixels[size_t(y * width + x)] = kGap;
  write_png(png, picture);
  const double cells = double(L->heads * n * n);
  std::printf(
      "%s: n %lld, block %lld, %lld distinct head pattern(s)%s; keys allowed %.1f%%, computed in tiles %.1f%%; "
      "wrote %s\n",
      name.c_str(), (long long)n, (long long)L->block, (long long)L->heads, causal ? ", causal" : "",
      100.0 * double(allowed) / cells, 100.0 * double(computed) / cells, png.c_str());
  return 0;
}

}  // namespace

ENG_REGISTER_BENCH("mask", "renders a sparse attention pattern's mask to a PNG (from the kernel's layout)", bench_mask);

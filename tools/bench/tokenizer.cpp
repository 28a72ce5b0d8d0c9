// bench tokenizer: encoding and decoding speed on one thread, in MB of text per second, for a tokenizer and a text.
// Rows, all from the same run and text: GPT-2's pre-tokenisation alone (the floor under byte-level encoding), the
// first encoding pass of a freshly read tokenizer (every word merged once, then cached), a second pass (words from
// the cache), and decoding. Each is the best of --reps passes over the whole text; the first-pass row reads the
// tokenizer again before each pass, outside the timing. Time is this thread's CPU time (CLOCK_THREAD_CPUTIME_ID):
// on a machine shared with other work, wall time would measure the others too.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <functional>

#include "datasets/inflate.h"
#include "datasets/pretokenize.h"
#include "datasets/tokenizer_io.h"
#include "engine/cli.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "tools/bench.h"

using namespace eng;

namespace {

double thread_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

double best_seconds(int64_t reps, const std::function<void()>& before, const std::function<void()>& timed) {
  double best = 1e30;
  for (int64_t r = 0; r < reps; ++r) {
    before();
    const double t0 = thread_seconds();
    timed();
    best = std::min(best, thread_seconds() - t0);
  }
  return best;
}

int bench_tokenizer(int argc, char** argv) {
  Cli cli("bench tokenizer", "Encoding and decoding speed of a tokenizer on one thread (MB/s of text).");
  auto& path = cli.add_string("tokenizer", "tests/data/tokenizer/gpt2_tokenizer.json", "the tokenizer file");
  auto& data = cli.add_string("data", "tests/data/tokenizer/corpus.txt.gz", "the text (gzip is unpacked)");
  auto& reps = cli.add_int("reps", 3, {1, 1000}, "passes per row; the fastest is reported");
  if (!cli.parse(argc, argv, 2)) return 0;
  std::vector<uint8_t> bytes = read_file_bytes(data, "bench tokenizer");
  if (is_gzip(bytes)) bytes = gunzip(bytes, data);
  const std::string text(bytes.begin(), bytes.end());
  ENG_CHECK(!text.empty(), "bench tokenizer: ", data, " is empty");
  const double mb = double(text.size()) / 1e6;
  Tokenizer tok = load_tokenizer(path);
  std::vector<int32_t> ids;
  size_t pieces = 0;
  const double pre = best_seconds(reps, [] {}, [&] { for_each_gpt2_pretoken(text, [&](std::string_view) { ++pieces; }); });
  const double cold = best_seconds(
      reps, [&] { tok = load_tokenizer(path), ids.clear(); }, [&] { tok.encode(text, ids); });
  const double warm = best_seconds(reps, [&] { ids.clear(); }, [&] { tok.encode(text, ids); });
  std::string back;
  const double dec = best_seconds(reps, [] {}, [&] { back = tok.decode(ids); });
  ENG_CHECK(back == text, "bench tokenizer: decoding did not give the text back");
  std::printf("%s BPE, %lld tokens; %.2f MB of text -> %zu tokens (%.2f bytes a token)\n",
              tokenizer_kind_name(tok.kind()), (long long)tok.vocab_size(), mb, ids.size(),
              double(text.size()) / double(ids.size()));
  std::printf("%-34s %10s %8s   (one thread's CPU time)\n", "", "MB/s", "ratio");
  const auto row = [&](const char* name, double s) { std::printf("%-34s %10.2f %8.2f\n", name, mb / s, pre / s); };
  row("GPT-2 pre-tokenisation alone", pre);
  row("encode, first pass (cache empty)", cold);
  row("encode, second pass (cache full)", warm);
  row("decode", dec);
  return 0;
}

}  // namespace

ENG_REGISTER_BENCH("tokenizer", "encoding and decoding speed of a BPE tokenizer on one thread (MB/s of text)",
                   bench_tokenizer);

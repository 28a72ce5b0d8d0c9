// inspect: lists the metadata and tensors of a safetensors checkpoint.
//   build/inspect [--stats] FILE.safetensors
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "engine/error.h"
#include "engine/safetensors.h"

using namespace eng;

static const char* kUsage =
    "usage: inspect [--stats] FILE.safetensors\n"
    "Prints the file's metadata, then one line per tensor: name, dtype, shape.\n"
    "  --stats   also print min, max and mean of each tensor (NaNs are counted, not compared)\n"
    "  --help    show this help\n";

// One pass over the elements; NaNs are counted apart so that one NaN does not hide the range.
static std::string stats(const Tensor& t) {
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

int main(int argc, char** argv) {
  bool want_stats = false;
  std::string path;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--stats") {
      want_stats = true;
    } else if (a.size() > 1 && a[0] == '-') {
      std::fprintf(stderr, "inspect: unknown option %s\n%s", a.c_str(), kUsage);
      return 1;
    } else if (path.empty()) {
      path = a;
    } else {
      std::fprintf(stderr, "inspect: more than one file given\n%s", kUsage);
      return 1;
    }
  }
  if (path.empty()) {
    std::fprintf(stderr, "inspect: no file given\n%s", kUsage);
    return 1;
  }

  try {
    SafetensorsFile f = load_safetensors(path);
    std::printf("%s: %zu tensors\n", path.c_str(), f.tensors.size());
    if (!f.metadata.empty()) {
      std::printf("metadata:\n");
      for (const auto& [k, v] : f.metadata) std::printf("  %s: %s\n", k.c_str(), v.c_str());
    }
    int64_t total = 0;
    for (const auto& [name, t] : f.tensors) {
      std::printf("%s  %s  %s%s\n", name.c_str(), safetensors_dtype_name(t.dtype()), shape_str(t.shape()).c_str(),
                  want_stats ? stats(t).c_str() : "");
      total += t.numel();
    }
    std::printf("total: %lld elements\n", (long long)total);
  } catch (const std::exception& e) {  // eng::Error for a bad file; bad_alloc and the like too
    std::fprintf(stderr, "inspect: %s\n", e.what());
    return 1;
  }
  return 0;
}

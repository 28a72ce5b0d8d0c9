#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <set>
#include <thread>

#include "engine/allocator.h"
#include "engine/cpu_features.h"
#include "engine/error.h"
#include "engine/rng.h"
#include "engine/tensor.h"
#include "engine/threadpool.h"
#include "tests/gradcheck.h"

using namespace eng;

TEST_CASE("tensor: factories, element access, copies") {
  Tensor z = zeros({2, 3});
  CHECK(z.numel() == 6);
  CHECK(z.dim() == 2);
  CHECK(z.size(-1) == 3);
  CHECK(z.is_contiguous());
  CHECK(z.strides() == Shape{3, 1});
  Tensor f = full({2}, 2.5, DType::F64);
  CHECK(f.to_vector() == std::vector<double>{2.5, 2.5});
  Tensor a = arange(6);
  CHECK(a.at({5}) == 5);
  Tensor c = a.clone();
  c.set_at({0}, 42);
  CHECK(a.at({0}) == 0);
  Tensor d = a.to(DType::F64);
  CHECK(d.dtype() == DType::F64);
  CHECK(d.to_vector() == a.to_vector());
  CHECK(scalar_tensor(3).item() == 3);
  CHECK_THROWS_WITH(a.item(), "item: tensor of shape [6] has 6 elements, not 1");
  CHECK_THROWS_WITH(a.at({6}), "at: index 6 out of range for dim 0 of shape [6]");
  CHECK_THROWS_WITH(a.data<double>(), "data<f64>: tensor holds f32");
  CHECK_THROWS_WITH(from_vector(std::vector<double>{1, 2}, {3}), "from_vector: 2 values do not fill shape [3]");
  CHECK_THROWS_WITH(a.as_strided({4}, {2}, 0), "as_strided: view shape [4] strides [2] offset 0 reaches outside a "
                                                "storage of 6 elements");
}

TEST_CASE("allocator: freed blocks are reused and live/peak bytes are counted") {
  bool was = allocator::caching();
  allocator::set_caching(true);
  allocator::empty_cache();  // so that the block freed below is the only candidate for reuse
  allocator::reset_peak();
  AllocatorStats s0 = allocator::stats();
  void* p;
  {
    Tensor t = empty({1000});  // 4000 bytes -> one 4032-byte block
    p = t.raw_data();
    AllocatorStats s1 = allocator::stats();
    CHECK(s1.live_bytes == s0.live_bytes + 4032);
    CHECK(s1.peak_bytes >= s1.live_bytes);
  }
  CHECK(allocator::stats().live_bytes == s0.live_bytes);
  uint64_t hits = allocator::stats().cache_hits;
  Tensor u = empty({1000});
  CHECK(u.raw_data() == p);  // the same block came back from the pool
  CHECK(allocator::stats().cache_hits == hits + 1);
  CHECK(allocator::stats().peak_bytes >= s0.live_bytes + 4032);
  allocator::set_caching(was);
}

TEST_CASE("rng: Philox4x32-10 known answers and reproducibility") {
  // Known-answer vectors of the Random123 distribution (kat_vectors: philox4x32 10 rounds).
  auto r = philox4x32(0, 0);
  CHECK(r[0] == 0x6627e8d5u);
  CHECK(r[1] == 0xe169c58du);
  CHECK(r[2] == 0xbc57ac4cu);
  CHECK(r[3] == 0x9b00dbd8u);
  Rng a(42), b(42);
  for (int i = 0; i < 10; ++i) CHECK(a.next_u32() == b.next_u32());
  Rng c(42, 5);  // position 5 of the same stream
  Rng d(42);
  for (int i = 0; i < 5; ++i) d.next_u32();
  CHECK(c.next_u32() == d.next_u32());
  Rng e(7);
  double mean = 0, var = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    double x = e.normal();
    mean += x;
    var += x * x;
  }
  mean /= n;
  var = var / n - mean * mean;
  CHECK(std::abs(mean) < 0.03);
  CHECK(std::abs(var - 1) < 0.05);
  for (int i = 0; i < 1000; ++i) CHECK(e.below(7) < 7);
}

TEST_CASE("threadpool: parallel_for covers every index exactly once and propagates errors") {
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    std::vector<std::atomic<int>> hits(10007);
    parallel_for(0, 10007, 16, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) hits[size_t(i)]++;
    });
    for (auto& h : hits) REQUIRE(h.load() == 1);
    CHECK_THROWS_WITH(parallel_for(0, 1000, 1, [](int64_t lo, int64_t) {
                        if (lo >= 0) fail("boom");
                      }),
                      "boom");
  }
  set_num_threads(2);
}

// Back-to-back jobs meet workers still polling from the last one; jobs after a pause longer than the poll meet them
// asleep. Either way each job is done, all of it, when parallel_for returns. With more threads than the hardware
// has, the workers never poll.
TEST_CASE("threadpool: jobs in quick succession and after the workers sleep each finish before parallel_for returns") {
  for (int threads : {2, int(std::thread::hardware_concurrency()) + 1}) {
    set_num_threads(threads);
    std::vector<int> hits(64);
    for (int job = 1; job <= 600; ++job) {
      parallel_for(0, 64, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) hits[size_t(i)]++;  // each index by one thread: no race
      });
      REQUIRE(std::count(hits.begin(), hits.end(), job) == 64);
      if (job % 100 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  }
  set_num_threads(2);
}

TEST_CASE("cpu features: a level is always chosen") {
  SimdLevel l = simd_level();
  CHECK(std::string(simd_level_name(l)).size() > 0);
#if defined(__x86_64__)
  if (cpu_features().avx512f && cpu_features().avx512bw && cpu_features().avx512vl && cpu_features().fma)
    CHECK((l >= SimdLevel::Avx512 || std::getenv("ENG_CPU")));
  if (cpu_features().avx512bf16 && l >= SimdLevel::Avx512) CHECK((l == SimdLevel::Avx512Bf16 || std::getenv("ENG_CPU")));
#endif
}

TEST_CASE("cpu features: ENG_CPU picks a level the CPU runs and refuses one it lacks or does not know") {
  CpuFeatures avx2;  // an x86-64 CPU with AVX2 and FMA, without AVX-512
  avx2.avx2 = avx2.fma = true;
  CHECK(simd_level_for(nullptr, avx2) == SimdLevel::Avx2);
  CHECK(simd_level_for("", avx2) == SimdLevel::Avx2);
  CHECK(simd_level_for("scalar", avx2) == SimdLevel::Scalar);
  CHECK(simd_level_for("avx2", avx2) == SimdLevel::Avx2);
  CHECK_THROWS_WITH_AS(simd_level_for("avx512", avx2),
                       "ENG_CPU: this CPU cannot run avx512; it offers scalar, avx2 (unset ENG_CPU for the best of them)",
                       Error);
  CHECK_THROWS_WITH_AS(simd_level_for("neon", avx2),
                       "ENG_CPU: this CPU cannot run neon; it offers scalar, avx2 (unset ENG_CPU for the best of them)",
                       Error);
  CHECK_THROWS_WITH_AS(simd_level_for("AVX2", avx2), "ENG_CPU: unknown level 'AVX2'; this CPU offers scalar, avx2",
                       Error);

  CpuFeatures avx512 = avx2;
  avx512.avx512f = avx512.avx512bw = avx512.avx512vl = true;
  CHECK(simd_level_for(nullptr, avx512) == SimdLevel::Avx512);
  CHECK(simd_level_for("avx2", avx512) == SimdLevel::Avx2);  // a cap below the best
  CpuFeatures part = avx512;  // AVX-512F without BW: the AVX-512 kernels cannot run
  part.avx512bw = false;
  CHECK_THROWS_WITH_AS(simd_level_for("avx512", part), doctest::Contains("it offers scalar, avx2 "), Error);
  CHECK_THROWS_WITH_AS(simd_level_for("avx512bf16", avx512),
                       "ENG_CPU: this CPU cannot run avx512bf16; it offers scalar, avx2, avx512 (unset ENG_CPU for the "
                       "best of them)",
                       Error);
  CpuFeatures bf16 = avx512;  // AVX512_BF16 on top: a level of its own, which avx512 caps
  bf16.avx512bf16 = true;
  CHECK(simd_level_for(nullptr, bf16) == SimdLevel::Avx512Bf16);
  CHECK(simd_level_for("avx512", bf16) == SimdLevel::Avx512);
  CHECK(simd_level_for("avx512bf16", bf16) == SimdLevel::Avx512Bf16);
  part.avx512bf16 = true;  // the extension without the AVX-512 base the kernels need: no AVX-512 level at all
  CHECK_THROWS_WITH_AS(simd_level_for("avx512bf16", part), doctest::Contains("it offers scalar, avx2 "), Error);

  CpuFeatures arm;
  arm.neon = true;
  CHECK(simd_level_for(nullptr, arm) == SimdLevel::Neon);
  CHECK(simd_level_for("scalar", arm) == SimdLevel::Scalar);
  CHECK_THROWS_WITH_AS(simd_level_for("avx2", arm),
                       "ENG_CPU: this CPU cannot run avx2; it offers scalar, neon (unset ENG_CPU for the best of them)",
                       Error);
  CHECK(simd_level_for("scalar", CpuFeatures{}) == SimdLevel::Scalar);
  CHECK_THROWS_WITH_AS(simd_level_for("neon", CpuFeatures{}), doctest::Contains("it offers scalar ("), Error);
}

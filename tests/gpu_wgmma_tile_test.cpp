// One tile of each wgmma product that tf32x3_wgmma issues
// (tests/templates/wgmma_tile.cu, built on templates/mla_wgmma.cuh), against
// the CPU, with inputs that say where a wrong value came from:
//   probe "A": A(m, k) = 1 + 8 m + k, B one-hot in k = kk, so D(m, n) must be
//              A(m, kk); a wrong value names the A element the tensor core read
//   probe "B": A one-hot in k = kk, B(n, k) = 1 + 8 n + k (the O product:
//              V(k, d) = 1 + 8 d + k), naming the B element read
//   probe "random": N(0, 1) inputs through the three-product split, against
//              float64 (relative error per element <= 1e-5)
// Integers below 2^11 are exact in TF32, so the first two are exact.  Each
// failure prints the first wrong elements decoded and the count, so one run
// on the H200 separates descriptor (shared-memory layout) errors from
// register-fragment errors.  Needs an sm_90 GPU (compiled for sm_90a); skips
// otherwise.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "core/cuda.h"
#include "core/embedded.h"
#include "core/template_source.h"
#include "tuner/support_kernels.h"

namespace mlatune {
namespace {

const std::filesystem::path tile_source =
    std::filesystem::path(MLATUNE_SOURCE_DIR) / "tests" / "templates" / "wgmma_tile.cu";
constexpr int kRows = 64, kK = 8, kDp = 120;  // as in wgmma_tile.cu

struct Probe {
  std::vector<float> a, b;  // a: 64 x 8; b: n x 8 (ss) or 8 x kDp (rs)
  std::string name;
  int kk = -1;  // one-hot column of the exact probes
};

// Runs one kernel of wgmma_tile.cu on (a, b) and returns the 64 x n output.
std::vector<float> run(const std::string& cubin, const std::string& entry, const Probe& probe, int n) {
  LoadedKernel kernel(cubin, entry);
  DeviceBuffer a(probe.a.size() * 4), b(probe.b.size() * 4), d(std::size_t{kRows} * n * 4);
  MLATUNE_CUDA(cudaMemcpy(a.get(), probe.a.data(), probe.a.size() * 4, cudaMemcpyHostToDevice));
  MLATUNE_CUDA(cudaMemcpy(b.get(), probe.b.data(), probe.b.size() * 4, cudaMemcpyHostToDevice));
  MLATUNE_CUDA(cudaMemset(d.get(), 0xff, std::size_t{kRows} * n * 4));  // NaN: unwritten shows
  void* pa = a.get();
  void* pb = b.get();
  void* pd = d.get();
  void* args[] = {&pa, &pb, &pd};
  const std::int64_t grid[3] = {1, 1, 1}, block[3] = {128, 1, 1};
  Stream stream;
  MLATUNE_CUDA(kernel.launch(grid, block, 0, args, stream));
  stream.synchronize();
  std::vector<float> out(std::size_t{kRows} * n);
  MLATUNE_CUDA(cudaMemcpy(out.data(), pd, out.size() * 4, cudaMemcpyDeviceToHost));
  return out;
}

// a (64 x 8) and b as `b_at(n, k)` give the float64 product.
template <class BAt>
std::vector<double> product(const std::vector<float>& a, int n, BAt b_at) {
  std::vector<double> d(std::size_t{kRows} * n, 0.0);
  for (int m = 0; m < kRows; ++m)
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < kK; ++k) d[m * n + j] += double(a[m * kK + k]) * double(b_at(j, k));
  return d;
}

// "1 + 8 r + k" back to "(r, k)", or why the value is no single element.
std::string decode(float v, const char* what) {
  if (std::isnan(v)) return "NaN (not written)";
  const double x = v - 1.0;
  if (v == 0.0f) return "0 (nothing read, or a zero element)";
  if (x < 0 || x != std::floor(x)) return fmt::format("{} (not an element: a sum or garbage)", v);
  const int i = static_cast<int>(x);
  return fmt::format("{} = {}({}, {})", v, what, i / 8, i % 8);
}

// Compares; prints the first few mismatches decoded and a count.  Returns the
// number of mismatches.
int compare(const std::string& label, const std::vector<float>& got, const std::vector<double>& want, int n,
            bool exact, const char* source) {
  int bad = 0;
  double worst = 0;
  for (int m = 0; m < kRows; ++m) {
    for (int j = 0; j < n; ++j) {
      const double g = got[m * n + j], w = want[m * n + j];
      const double err = std::abs(g - w) / std::max(1.0, std::abs(w));
      worst = std::max(worst, std::isnan(g) ? INFINITY : err);
      const bool ok = exact ? g == w : err <= 1e-5;
      if (ok) continue;
      if (bad < 6)
        fmt::print("  {}: D({}, {}) = {}, expected {}{}\n", label, m, j, decode(float(g), source), w,
                   exact ? fmt::format(" = {}", decode(float(w), source)) : "");
      ++bad;
    }
  }
  fmt::print("{}: {} of {} elements wrong (worst relative error {:.3g})\n", label, bad, kRows * n, worst);
  return bad;
}

std::vector<float> unique_rows(int rows) {
  std::vector<float> x(std::size_t(rows) * kK);
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < kK; ++k) x[r * kK + k] = float(1 + 8 * r + k);
  return x;
}

std::vector<float> one_hot(int rows, int kk) {
  std::vector<float> x(std::size_t(rows) * kK, 0.0f);
  for (int r = 0; r < rows; ++r) x[r * kK + kk] = 1.0f;
  return x;
}

std::vector<float> normal(std::size_t count, std::mt19937& rng) {
  std::normal_distribution<float> dist;
  std::vector<float> x(count);
  for (float& v : x) v = dist(rng);
  return x;
}

// Transposes an (n x 8) "row r, k" matrix into the (8 x n) "key k, column r"
// layout of the O product's V.
std::vector<float> as_v(const std::vector<float>& rows_by_k, int n) {
  std::vector<float> v(std::size_t(kK) * n);
  for (int r = 0; r < n; ++r)
    for (int k = 0; k < kK; ++k) v[k * n + r] = rows_by_k[r * kK + k];
  return v;
}

class WgmmaTile : public ::testing::TestWithParam<int> {};

std::string compile_tile(int tile_n) {
  LoadedText text = load_text_file(tile_source);
  CubinBuild build = nvrtc_compile_cubin(inline_template_includes(text.text, tile_source), "wgmma_tile.cu",
                                         "wg_test_ss", {{"TILE_N", std::to_string(tile_n)}}, "sm_90a");
  if (!build.ok) ADD_FAILURE() << build.log;
  return build.cubin;
}

GpuProbe hopper() {
  GpuProbe probe = probe_gpu();
  if (probe.usable && (probe.device.cc_major != 9 || probe.device.cc_minor != 0)) {
    probe.usable = false;
    probe.reason = fmt::format("wgmma needs sm_90 (this GPU is sm_{}{})", probe.device.cc_major,
                               probe.device.cc_minor);
  }
  return probe;
}

// S = Q K^T: both operands through shared-memory descriptors.
TEST_P(WgmmaTile, SharedSharedProductMatchesTheCpu) {
  GpuProbe probe = hopper();
  if (!probe.usable) GTEST_SKIP() << probe.reason;
  const int n = GetParam();
  const std::string cubin = compile_tile(n);
  ASSERT_FALSE(cubin.empty());
  int bad = 0;
  for (int kk = 0; kk < kK; ++kk) {
    Probe p{unique_rows(kRows), one_hot(n, kk), "A", kk};
    bad += compare(fmt::format("ss n{} probe A kk={}", n, kk), run(cubin, "wg_test_ss", p, n),
                   product(p.a, n, [&](int j, int k) { return p.b[j * kK + k]; }), n, true, "A");
    Probe q{one_hot(kRows, kk), unique_rows(n), "B", kk};
    bad += compare(fmt::format("ss n{} probe B kk={}", n, kk), run(cubin, "wg_test_ss", q, n),
                   product(q.a, n, [&](int j, int k) { return q.b[j * kK + k]; }), n, true, "B");
  }
  std::mt19937 rng(5);
  Probe r{normal(kRows * kK, rng), normal(std::size_t(n) * kK, rng), "random"};
  bad += compare(fmt::format("ss n{} random", n), run(cubin, "wg_test_ss", r, n),
                 product(r.a, n, [&](int j, int k) { return r.b[j * kK + k]; }), n, false, "?");
  EXPECT_EQ(bad, 0);
}

// O += P V: P from registers in the attention's accumulator-derived
// fragment, V^T (keys permuted) through descriptors, 120 columns in chunks
// of 64, 32, 16 and 8.
TEST(WgmmaTileO, RegisterSharedProductMatchesTheCpu) {
  GpuProbe probe = hopper();
  if (!probe.usable) GTEST_SKIP() << probe.reason;
  const std::string cubin = compile_tile(16);
  ASSERT_FALSE(cubin.empty());
  int bad = 0;
  for (int kk = 0; kk < kK; ++kk) {
    Probe p{unique_rows(kRows), as_v(one_hot(kDp, kk), kDp), "A", kk};
    bad += compare(fmt::format("rs probe P kk={}", kk), run(cubin, "wg_test_rs", p, kDp),
                   product(p.a, kDp, [&](int j, int k) { return p.b[k * kDp + j]; }), kDp, true, "P");
    Probe q{one_hot(kRows, kk), as_v(unique_rows(kDp), kDp), "B", kk};
    bad += compare(fmt::format("rs probe V kk={} (decoded as V^T(d, key))", kk),
                   run(cubin, "wg_test_rs", q, kDp),
                   product(q.a, kDp, [&](int j, int k) { return q.b[k * kDp + j]; }), kDp, true, "Vt");
  }
  std::mt19937 rng(6);
  Probe r{normal(kRows * kK, rng), normal(std::size_t(kK) * kDp, rng), "random"};
  bad += compare("rs random", run(cubin, "wg_test_rs", r, kDp),
                 product(r.a, kDp, [&](int j, int k) { return r.b[k * kDp + j]; }), kDp, false, "?");
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(KeyTiles, WgmmaTile, ::testing::Values(16, 32, 64));

}  // namespace
}  // namespace mlatune

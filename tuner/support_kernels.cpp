#include "tuner/support_kernels.h"

#include <algorithm>
#include <array>
#include <memory>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "core/compiler.h"
#include "core/embedded.h"

namespace mlatune {

CubinBuild nvrtc_compile_cubin(std::string_view source, const std::string& name, const std::string& entry,
                               const std::vector<std::pair<std::string, std::string>>& definitions,
                               const std::string& arch) {
  CompileRequest request;
  request.source = std::string(source);
  request.source_name = name;
  request.entry = entry;
  request.arch = arch;
  request.definitions = definitions;
  CompileResult result = Compiler().compile(request);
  CubinBuild build;
  if (result.ok()) {
    build.ok = true;
    build.cubin = result.binary().cubin;
    build.log = result.log();
  } else {
    build.log = result.failure().message;
  }
  return build;
}

SupportKernels::SupportKernels(const DeviceProperties& device) {
  const char* path = "templates/mlatune_support.cu";
  auto source = find_embedded(path);
  if (!source) throw EnvironmentError(fmt::format("{} is not embedded in this build", path));
  CubinBuild build =
      nvrtc_compile_cubin(*source, "mlatune_support.cu", "mlatune_fill_normal_f32", {}, device.arch());
  if (!build.ok)
    throw EnvironmentError(
        fmt::format("the support kernels do not compile for {}:\n{}", device.arch(), build.log));
  // One library for all of them (each sibling only looks its entry up).
  fill_f32_ = LoadedKernel(build.cubin, "mlatune_fill_normal_f32");
  fill_f64_ = fill_f32_.sibling("mlatune_fill_normal_f64");
  fill_i32_ = fill_f32_.sibling("mlatune_fill_int32");
  fill_i64_ = fill_f32_.sibling("mlatune_fill_int64");
  poison_f32_ = fill_f32_.sibling("mlatune_poison_f32");
  poison_f64_ = fill_f32_.sibling("mlatune_poison_f64");
  flush_ = fill_f32_.sibling("mlatune_flush_l2");
  compare_f32_ = fill_f32_.sibling("mlatune_compare_f32");
  compare_f64_ = fill_f32_.sibling("mlatune_compare_f64");
  reduce_ = fill_f32_.sibling("mlatune_reduce_partials");
  empty_ = fill_f32_.sibling("mlatune_empty");
  spin_ = fill_f32_.sibling("mlatune_spin");
  fill_guard_ = fill_f32_.sibling("mlatune_fill_guard");
  check_guard_ = fill_f32_.sibling("mlatune_check_guard");
  diff_u32_ = fill_f32_.sibling("mlatune_diff_u32");
  diff_u64_ = fill_f32_.sibling("mlatune_diff_u64");
  widen_f32_ = fill_f32_.sibling("mlatune_widen_f32");
  // Enough blocks to fill every multiprocessor several times over; the
  // element loops are grid-strided, so any count is correct.
  grid_limit_ = std::max(1, device.multiprocessors * 8);
}

void SupportKernels::launch_elementwise(const LoadedKernel& kernel, std::uint64_t n, void** args,
                                        const Stream& stream) const {
  if (n == 0) return;
  constexpr std::int64_t threads = 256;
  std::int64_t blocks = static_cast<std::int64_t>(
      std::min<std::uint64_t>((n + threads - 1) / threads, static_cast<std::uint64_t>(grid_limit_)));
  const std::int64_t grid[3] = {blocks, 1, 1};
  const std::int64_t block[3] = {threads, 1, 1};
  cuda_check(kernel.launch(grid, block, 0, args, stream), kernel.entry(), __FILE__, __LINE__);
}

void SupportKernels::fill_normal_f32(void* data, std::uint64_t n, std::uint64_t key,
                                     const Stream& stream) const {
  void* args[] = {&data, &n, &key};
  launch_elementwise(fill_f32_, n, args, stream);
}

void SupportKernels::fill_normal_f64(void* data, std::uint64_t n, std::uint64_t key,
                                     const Stream& stream) const {
  void* args[] = {&data, &n, &key};
  launch_elementwise(fill_f64_, n, args, stream);
}

void SupportKernels::fill_int32(void* data, std::uint64_t n, std::uint64_t key,
                                const Stream& stream) const {
  void* args[] = {&data, &n, &key};
  launch_elementwise(fill_i32_, n, args, stream);
}

void SupportKernels::fill_int64(void* data, std::uint64_t n, std::uint64_t key,
                                const Stream& stream) const {
  void* args[] = {&data, &n, &key};
  launch_elementwise(fill_i64_, n, args, stream);
}

void SupportKernels::poison_f32(void* data, std::uint64_t n, const Stream& stream) const {
  void* args[] = {&data, &n};
  launch_elementwise(poison_f32_, n, args, stream);
}

void SupportKernels::poison_f64(void* data, std::uint64_t n, const Stream& stream) const {
  void* args[] = {&data, &n};
  launch_elementwise(poison_f64_, n, args, stream);
}

void SupportKernels::flush_l2(void* data, std::uint64_t words, std::uint32_t value,
                              const Stream& stream) const {
  void* args[] = {&data, &words, &value};
  launch_elementwise(flush_, words, args, stream);
}

void SupportKernels::fill_guard(void* data, std::uint64_t words, std::uint32_t pattern,
                                const Stream& stream) const {
  unsigned value = pattern;
  void* args[] = {&data, &words, &value};
  launch_elementwise(fill_guard_, words, args, stream);
}

void SupportKernels::check_guard(const void* data, std::uint64_t words, std::uint32_t pattern,
                                 const Tallies& tallies, std::size_t slot,
                                 const Stream& stream) const {
  unsigned value = pattern;
  std::uint64_t* total = tallies.changed(slot);
  std::uint64_t* lowest = tallies.first(slot);
  void* args[] = {&data, &words, &value, &total, &lowest};
  launch_elementwise(check_guard_, words, args, stream);
}

void SupportKernels::diff(const void* a, const void* b, std::uint64_t elements,
                          std::size_t element_size, const Tallies& tallies, std::size_t slot,
                          const Stream& stream) const {
  if (element_size != 4 && element_size != 8)
    throw EnvironmentError(fmt::format("diff: elements of {} bytes (4 or 8 expected)", element_size));
  std::uint64_t* total = tallies.changed(slot);
  std::uint64_t* lowest = tallies.first(slot);
  void* args[] = {&a, &b, &elements, &total, &lowest};
  launch_elementwise(element_size == 4 ? diff_u32_ : diff_u64_, elements, args, stream);
}

void SupportKernels::widen_f32(const void* in, void* out, std::uint64_t n, const Stream& stream) const {
  void* args[] = {&in, &out, &n};
  launch_elementwise(widen_f32_, n, args, stream);
}

Tallies::Tallies(std::size_t slots)
    : buffer_(std::max<std::size_t>(slots, 1) * 2 * sizeof(std::uint64_t)), slots_(slots) {}

std::uint64_t* Tallies::changed(std::size_t slot) const {
  if (slot >= slots_) throw EnvironmentError(fmt::format("tally slot {} of {}", slot, slots_));
  return static_cast<std::uint64_t*>(buffer_.get()) + slot;
}

std::uint64_t* Tallies::first(std::size_t slot) const {
  if (slot >= slots_) throw EnvironmentError(fmt::format("tally slot {} of {}", slot, slots_));
  return static_cast<std::uint64_t*>(buffer_.get()) + slots_ + slot;
}

void Tallies::reset(const Stream& stream) const {
  if (slots_ == 0) return;
  auto s = static_cast<cudaStream_t>(stream.get());
  auto* base = static_cast<std::uint64_t*>(buffer_.get());
  MLATUNE_CUDA(cudaMemsetAsync(base, 0, slots_ * sizeof(std::uint64_t), s));
  // All bits set: UINT64_MAX, what atomicMin lowers.
  MLATUNE_CUDA(cudaMemsetAsync(base + slots_, 0xff, slots_ * sizeof(std::uint64_t), s));
}

std::vector<Tally> Tallies::read(const Stream& stream) const {
  std::vector<Tally> out(slots_);
  if (slots_ == 0) return out;
  std::vector<std::uint64_t> host(2 * slots_);
  MLATUNE_CUDA(cudaMemcpyAsync(host.data(), buffer_.get(), host.size() * sizeof(std::uint64_t),
                               cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream.get())));
  stream.synchronize();
  for (std::size_t i = 0; i < slots_; ++i) out[i] = Tally{host[i], host[slots_ + i]};
  return out;
}

void SupportKernels::spin(std::int64_t cycles, const Stream& stream) const {
  const std::int64_t one[3] = {1, 1, 1};
  long long count = cycles;
  void* args[] = {&count};
  cuda_check(spin_.launch(one, one, 0, args, stream), spin_.entry(), __FILE__, __LINE__);
}

ComparisonSums SupportKernels::compare(const void* out, bool out_is_f32, const void* ref,
                                       std::uint64_t n, void* scratch,
                                       const Stream& stream) const {
  double* partials = static_cast<double*>(scratch);
  double* totals = partials + compare_blocks * compare_partials;
  {
    const std::int64_t grid[3] = {compare_blocks, 1, 1};
    const std::int64_t block[3] = {compare_threads, 1, 1};
    void* args[] = {&out, &ref, &n, &partials};
    const LoadedKernel& kernel = out_is_f32 ? compare_f32_ : compare_f64_;
    cuda_check(kernel.launch(grid, block, 0, args, stream), kernel.entry(), __FILE__, __LINE__);
  }
  {
    const std::int64_t one[3] = {1, 1, 1};
    unsigned blocks = compare_blocks;
    void* args[] = {&partials, &blocks, &totals};
    cuda_check(reduce_.launch(one, one, 0, args, stream), reduce_.entry(), __FILE__, __LINE__);
  }
  std::array<double, compare_partials> host{};
  MLATUNE_CUDA(cudaMemcpyAsync(host.data(), totals, sizeof host, cudaMemcpyDeviceToHost,
                               static_cast<cudaStream_t>(stream.get())));
  stream.synchronize();
  ComparisonSums sums;
  sums.squared_difference = host[0];
  sums.squared_reference = host[1];
  sums.max_abs = host[2];
  sums.nonfinite_output = static_cast<std::uint64_t>(host[3]);
  sums.nonfinite_reference = static_cast<std::uint64_t>(host[4]);
  return sums;
}

}  // namespace mlatune

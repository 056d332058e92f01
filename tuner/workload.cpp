#include "tuner/workload.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/launch_plan.h"
#include "tuner/argument_list.h"

namespace mlatune {

namespace {

std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::string bytes_text(std::int64_t bytes) {
  if (bytes >= (std::int64_t{1} << 30)) return fmt::format("{:.2f} GiB", bytes / 1073741824.0);
  if (bytes >= (std::int64_t{1} << 20)) return fmt::format("{:.1f} MiB", bytes / 1048576.0);
  return fmt::format("{} bytes", bytes);
}

struct InputSet {
  std::vector<GuardedBuffer> buffers;  // one per input argument; guarded in validation sets
  std::vector<DeviceBuffer> pristine;  // validation sets only: the inputs as filled
  ArgumentList arguments;
};

/// A buffer whose guards check_integrity() reads, and the name it reports.
struct Watched {
  std::string_view name;
  const GuardedBuffer* buffer;
};

std::int64_t checked_bytes(const BoundArgument& bound) {
  std::size_t size = element_size(bound.argument->type);
  if (bound.element_count <= 0)
    throw InputError(bound.argument->where,
                     fmt::format("buffer '{}' has {} elements for this shape", bound.argument->name,
                                 bound.element_count));
  if (bound.element_count > std::numeric_limits<std::int64_t>::max() / 8)
    throw InputError(bound.argument->where,
                     fmt::format("buffer '{}' is too large ({} elements)", bound.argument->name,
                                 bound.element_count));
  return bound.element_count * static_cast<std::int64_t>(size);
}

}  // namespace

struct Workload::Impl {
  DeviceProperties device;
  std::unique_ptr<SupportKernels> support;
  std::optional<Stream> stream;  // created once a GPU is known to be usable
  Tolerance tolerance;
  WorkloadOptions options;
  std::vector<BoundArgument> bound;
  std::vector<std::size_t> input_indices;   // into bound
  std::vector<std::size_t> output_indices;  // into bound
  std::vector<std::size_t> workspace_indices;  // into bound
  ArgumentLayout layout;                    // what each launch argument receives
  std::vector<GuardedBuffer> outputs;       // one per output argument
  std::vector<std::vector<DeviceBuffer>> references;  // [validation set][output]
  std::vector<DeviceBuffer> kept;           // float64 copy of a first run's outputs
  std::vector<const GuardedBuffer*> workspaces;  // installed by set_workspace; null for none
  std::vector<InputSet> sets;
  DeviceBuffer flush;
  DeviceBuffer scratch;
  Tallies tallies;  // slots for one check_integrity()
  double reference_us = 0.0;
  std::int64_t device_bytes = 0;
  std::uint32_t flush_counter = 0;
  std::vector<InputKind> kinds;  // of the validation sets, cyclically

  /// Workspaces stay null until a candidate whose prologue runs installs
  /// its own (set_workspace); the reference always gets null.
  ArgumentList make_arguments(const std::vector<GuardedBuffer>& inputs,
                              const std::vector<void*>& output_pointers) const {
    std::vector<void*> input_pointers;
    for (const GuardedBuffer& buffer : inputs) input_pointers.push_back(buffer.data());
    return ArgumentList(layout, input_pointers, output_pointers);
  }

  void fill(void* data, ElementType type, std::uint64_t n, std::uint64_t key) {
    switch (type) {
      case ElementType::float32: support->fill_normal_f32(data, n, key, *stream); break;
      case ElementType::float64: support->fill_normal_f64(data, n, key, *stream); break;
      case ElementType::int32: support->fill_int32(data, n, key, *stream); break;
      case ElementType::int64: support->fill_int64(data, n, key, *stream); break;
    }
  }

  /// Reshapes input `k` of validation set `set`, filled N(0, 1) on the GPU,
  /// into the set's input kind: on the host, once per workload.
  void shape_input(int set, std::size_t k, void* data, std::uint64_t key) {
    const InputKind kind = kinds[static_cast<std::size_t>(set) % kinds.size()];
    const BoundArgument& b = bound[input_indices[k]];
    if (kind == InputKind::normal || b.argument->type != ElementType::float32) return;
    std::vector<float> host(static_cast<std::size_t>(b.element_count));
    auto raw = static_cast<cudaStream_t>(stream->get());
    MLATUNE_CUDA(cudaMemcpyAsync(host.data(), data, host.size() * 4, cudaMemcpyDeviceToHost, raw));
    stream->synchronize();
    apply_input_kind(kind, HostInput{b.argument->name, b.extents, host}, key);
    MLATUNE_CUDA(cudaMemcpyAsync(data, host.data(), host.size() * 4, cudaMemcpyHostToDevice, raw));
    stream->synchronize();
  }

  void poison(void* data, ElementType type, std::uint64_t n) {
    if (type == ElementType::float32)
      support->poison_f32(data, n, *stream);
    else
      support->poison_f64(data, n, *stream);
  }

  ComparisonSums compare_one(const void* out, ElementType type, const void* ref, std::uint64_t n) {
    return support->compare(out, type == ElementType::float32, ref, n, scratch.get(), *stream);
  }

  void compute_reference(const SearchSpace& space, const Shape& shape);
  /// Allocates outputs, references and `set_count` filled input sets.
  void allocate(int set_count);
  /// The guarded buffers a launch on validation set `set` can reach.
  std::vector<Watched> watched(int set) const;
  void restore_input(int set, std::size_t input);
  ValidationStats compare_with(const std::vector<const void*>& references);
};

void Workload::Impl::compute_reference(const SearchSpace& space, const Shape& shape) {
  const KernelSource& source = space.reference();
  CubinBuild build = nvrtc_compile_cubin(space.reference_text(), source.path.filename().string(),
                                         source.entry, space.reference_definitions(shape), device.arch());
  if (!build.ok)
    throw InputError(source.where, fmt::format("the reference kernel {} does not compile for {}:\n{}",
                                               source.path.string(), device.arch(), build.log));
  LoadedKernel kernel(build.cubin, source.entry);
  LaunchGeometry geometry = space.reference_geometry(shape);
  for (int i = 0; i < 3; ++i)
    if (geometry.grid[i] <= 0 || geometry.block[i] <= 0)
      throw InputError(source.where, "the reference kernel's grid and block must be positive");
  if (geometry.shared_bytes > 0) {
    int code = kernel.set_max_dynamic_shared(geometry.shared_bytes);
    if (code != 0) {
      cuda_take_last_error();
      throw InputError(source.where,
                       fmt::format("the reference kernel cannot use {} bytes of shared memory: {}",
                                   geometry.shared_bytes, cuda_error_string(code)));
    }
  }

  Event start, stop;
  for (std::size_t s = 0; s < references.size(); ++s) {
    std::vector<void*> reference_pointers;
    for (std::size_t k = 0; k < output_indices.size(); ++k) {
      reference_pointers.push_back(references[s][k].get());
      poison(references[s][k].get(), ElementType::float64,
             static_cast<std::uint64_t>(bound[output_indices[k]].element_count));
    }
    // The reference reads the same inputs as the candidate, but writes the
    // float64 reference buffers.
    ArgumentList arguments = make_arguments(sets[s].buffers, reference_pointers);
    // Launch twice on the first set: the second, warm launch is timed.
    int launches = s == 0 ? 2 : 1;
    for (int l = 0; l < launches; ++l) {
      bool timed = s == 0 && l == 1;
      if (timed) start.record(*stream);
      int code = kernel.launch(geometry.grid, geometry.block, geometry.shared_bytes,
                               arguments.pointers(), *stream);
      if (code != 0) {
        cuda_take_last_error();
        if (cuda_error_is_sticky(code)) throw CudaError(code, "launch of the reference kernel", __FILE__, __LINE__);
        throw InputError(source.where, fmt::format("the reference kernel cannot launch: {} ({})",
                                                   cuda_error_string(code), cuda_error_name(code)));
      }
      if (timed) stop.record(*stream);
      stream->synchronize();
    }
    if (s == 0) reference_us = stop.elapsed_ms_since(start) * 1000.0;
    for (std::size_t k = 0; k < output_indices.size(); ++k) {
      auto n = static_cast<std::uint64_t>(bound[output_indices[k]].element_count);
      ComparisonSums sums = compare_one(references[s][k].get(), ElementType::float64,
                                        references[s][k].get(), n);
      const Argument& argument = *bound[output_indices[k]].argument;
      if (sums.nonfinite_reference > 0)
        throw InputError(source.where,
                         fmt::format("the reference kernel left {} of {} elements of '{}' NaN or "
                                     "infinite (unwritten or overflowed)",
                                     sums.nonfinite_reference, n, argument.name));
      if (sums.squared_reference == 0.0)
        throw InputError(source.where,
                         fmt::format("the reference output '{}' is all zeros: relative errors "
                                     "would be undefined",
                                     argument.name));
    }
  }
}

namespace {

/// Device memory of a workload, by purpose (for the "does not fit" message).
struct MemoryPlan {
  int sets = 0;                    // input sets; the first validation_sets are guarded
  std::int64_t input_bytes = 0;    // one input set, unguarded
  std::int64_t guarded_input_bytes = 0;  // one validation input set with its guards
  std::int64_t output_bytes = 0;   // outputs with their guards
  std::int64_t reference_bytes = 0;  // float64 of every output: one per validation set, one kept
  std::int64_t flush_bytes = 0;
  std::int64_t scratch_bytes = 0;
  int validation_sets = 0;

  std::int64_t rotation_bytes() const { return (sets - validation_sets) * input_bytes; }
  /// Guarded inputs and their pristine copies.
  std::int64_t validation_input_bytes() const {
    return validation_sets * (guarded_input_bytes + input_bytes);
  }
  std::int64_t total() const {
    return rotation_bytes() + validation_input_bytes() + output_bytes +
           (validation_sets + 1) * reference_bytes + flush_bytes + scratch_bytes;
  }
};

std::int64_t guarded_bytes(std::int64_t bytes) {
  return static_cast<std::int64_t>(guard_layout(static_cast<std::size_t>(bytes)).total);
}

}  // namespace

Workload::Workload(const SearchSpace& space, const Shape& shape, WorkloadOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& w = *impl_;
  if (options.validation_sets < 1) throw InputError("at least one validation input set is needed");
  w.kinds = options.kinds.empty() ? input_kinds_for(space) : options.kinds;
  options.validation_sets = std::max(options.validation_sets, static_cast<int>(w.kinds.size()));
  w.options = options;
  w.tolerance = space.tolerance();

  // Everything that needs no GPU is checked first, so a bad space says so
  // even on a machine without one.
  w.bound = space.bind_arguments(shape);
  MemoryPlan plan;
  plan.validation_sets = options.validation_sets;
  for (std::size_t i = 0; i < w.bound.size(); ++i) {
    const Argument& argument = *w.bound[i].argument;
    if (argument.role == ArgumentRole::scalar) continue;
    if (argument.role == ArgumentRole::workspace) {
      w.workspace_indices.push_back(i);
      continue;  // the evaluator allocates it, per candidate whose prologue runs
    }
    std::int64_t bytes = checked_bytes(w.bound[i]);
    if (argument.role == ArgumentRole::input) {
      w.input_indices.push_back(i);
      plan.input_bytes += bytes;
      plan.guarded_input_bytes += guarded_bytes(bytes);
    } else {
      if (argument.type != ElementType::float32 && argument.type != ElementType::float64)
        throw InputError(argument.where,
                         fmt::format("output '{}' is {}: outputs must be float32 or float64 to be "
                                     "compared with the float64 reference",
                                     argument.name, element_type_name(argument.type)));
      w.output_indices.push_back(i);
      plan.output_bytes += guarded_bytes(bytes);
      plan.reference_bytes += w.bound[i].element_count * 8;
    }
  }
  if (w.output_indices.empty())
    throw InputError(SourceLocation{space.file_name()}, "the space has no output argument to check");

  GpuProbe probe = probe_gpu();
  if (!probe.usable) throw EnvironmentError("no GPU: " + probe.reason);
  w.device = probe.device;
  w.stream.emplace();

  plan.sets = options.validation_sets;
  if (options.cache == CacheMode::rotate && plan.input_bytes > 0) {
    // Enough sets that one pass over them writes at least twice the L2.
    std::int64_t needed = (2 * w.device.l2_bytes + plan.input_bytes - 1) / plan.input_bytes;
    plan.sets = static_cast<int>(std::clamp<std::int64_t>(needed, plan.sets, 8192));
  }
  plan.flush_bytes =
      options.cache == CacheMode::cold ? ((2 * w.device.l2_bytes + 4095) / 4096) * 4096 : 0;
  plan.scratch_bytes = (compare_blocks + 1) * compare_partials * 8;
  auto [free_bytes, total_bytes] = device_memory();
  // Keep a margin for the context, the candidates' code and their local memory.
  std::int64_t usable = free_bytes - std::min<std::int64_t>(free_bytes / 10, std::int64_t{1} << 30);
  if (plan.total() > usable)
    throw InputError(fmt::format(
        "shape {} does not fit on {}: it needs {} of device memory ({} input set(s) of {}, "
        "validation inputs with guards and pristine copies {}, outputs with guards {}, float64 "
        "references {}, L2 flush {}), but only {} of {} are free",
        space.shape_string(shape), w.device.name, bytes_text(plan.total()), plan.sets,
        bytes_text(plan.input_bytes), bytes_text(plan.validation_input_bytes()),
        bytes_text(plan.output_bytes), bytes_text((plan.validation_sets + 1) * plan.reference_bytes),
        bytes_text(plan.flush_bytes), bytes_text(free_bytes), bytes_text(total_bytes)));
  w.device_bytes = plan.total();
  // A scalar that does not fit its type refuses the shape; a shape too large
  // for the device says so first (above), being the more useful of the two.
  w.layout = workload_layout(w.bound);

  w.support = std::make_unique<SupportKernels>(w.device);
  w.scratch = DeviceBuffer(static_cast<std::size_t>(plan.scratch_bytes));
  if (plan.flush_bytes > 0) w.flush = DeviceBuffer(static_cast<std::size_t>(plan.flush_bytes));
  w.allocate(plan.sets);
  w.compute_reference(space, shape);
  std::vector<void*> output_pointers;
  for (const GuardedBuffer& output : w.outputs) output_pointers.push_back(output.data());
  for (InputSet& set : w.sets) set.arguments = w.make_arguments(set.buffers, output_pointers);
}

void Workload::Impl::allocate(int set_count) {
  tallies = Tallies(2 * output_indices.size() + 3 * input_indices.size() + 2 * workspace_indices.size());
  workspaces.assign(workspace_indices.size(), nullptr);
  for (std::size_t index : output_indices) {
    auto n = static_cast<std::size_t>(bound[index].element_count);
    outputs.emplace_back(guard_layout(n * element_size(bound[index].argument->type)), *support, *stream);
    kept.emplace_back(n * 8);
  }
  references.resize(static_cast<std::size_t>(options.validation_sets));
  for (auto& per_set : references)
    for (std::size_t index : output_indices)
      per_set.emplace_back(static_cast<std::size_t>(bound[index].element_count * 8));

  sets.resize(static_cast<std::size_t>(set_count));
  for (int s = 0; s < set_count; ++s) {
    InputSet& set = sets[static_cast<std::size_t>(s)];
    // Only validation launches are checked: the sets that timing alone
    // reads (rotation) need neither guards nor pristine copies.
    bool validated = s < options.validation_sets;
    for (std::size_t k = 0; k < input_indices.size(); ++k) {
      const BoundArgument& b = bound[input_indices[k]];
      auto bytes = static_cast<std::size_t>(checked_bytes(b));
      set.buffers.emplace_back(validated ? guard_layout(bytes) : unguarded_layout(bytes), *support,
                               *stream);
      // One independent random stream per (seed, set, argument).
      std::uint64_t key = mix64(mix64(options.seed) ^ (static_cast<std::uint64_t>(s) << 20) ^ k);
      fill(set.buffers.back().data(), b.argument->type, static_cast<std::uint64_t>(b.element_count), key);
      if (!validated) continue;
      shape_input(s, k, set.buffers.back().data(), key);
      set.pristine.emplace_back(bytes);
      MLATUNE_CUDA(cudaMemcpyAsync(set.pristine.back().get(), set.buffers.back().data(), bytes,
                                   cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream->get())));
    }
  }
  stream->synchronize();
}

Workload::~Workload() = default;

const DeviceProperties& Workload::device() const { return impl_->device; }
const SupportKernels& Workload::support() const { return *impl_->support; }
const Stream& Workload::stream() const { return *impl_->stream; }
const Tolerance& Workload::tolerance() const { return impl_->tolerance; }
std::uint64_t Workload::seed() const { return impl_->options.seed; }
int Workload::input_sets() const { return static_cast<int>(impl_->sets.size()); }
int Workload::validation_sets() const { return impl_->options.validation_sets; }
InputKind Workload::input_kind(int set) const {
  return impl_->kinds.at(static_cast<std::size_t>(set) % impl_->kinds.size());
}
void** Workload::arguments(int set) { return impl_->sets.at(static_cast<std::size_t>(set)).arguments.pointers(); }
std::int64_t Workload::flush_bytes() const { return static_cast<std::int64_t>(impl_->flush.bytes()); }
double Workload::reference_us() const { return impl_->reference_us; }
std::int64_t Workload::device_bytes() const { return impl_->device_bytes; }

void Workload::poison_outputs() {
  Impl& w = *impl_;
  for (std::size_t k = 0; k < w.output_indices.size(); ++k) {
    const BoundArgument& b = w.bound[w.output_indices[k]];
    w.poison(w.outputs[k].data(), b.argument->type, static_cast<std::uint64_t>(b.element_count));
  }
}

ValidationStats Workload::compare(int set) {
  Impl& w = *impl_;
  if (set < 0 || set >= w.options.validation_sets)
    throw EnvironmentError(fmt::format("input set {} has no reference output", set));
  std::vector<const void*> references;
  for (const DeviceBuffer& reference : w.references[static_cast<std::size_t>(set)])
    references.push_back(reference.get());
  return w.compare_with(references);
}

ValidationStats Workload::Impl::compare_with(const std::vector<const void*>& expected) {
  ValidationStats stats;
  stats.input_sets = 1;
  double squared_difference = 0.0, squared_reference = 0.0;
  for (std::size_t k = 0; k < output_indices.size(); ++k) {
    const BoundArgument& b = bound[output_indices[k]];
    auto n = static_cast<std::uint64_t>(b.element_count);
    ComparisonSums sums = compare_one(outputs[k].data(), b.argument->type, expected[k], n);
    squared_difference += sums.squared_difference;
    squared_reference += sums.squared_reference;
    stats.max_abs = std::max(stats.max_abs, sums.max_abs);
    stats.nonfinite += sums.nonfinite_output;
    stats.elements += n;
  }
  stats.relative_l2 = std::sqrt(squared_difference / squared_reference);
  stats.passed = !tolerance_failure(stats, tolerance).has_value();
  return stats;
}

void Workload::keep_outputs() {
  Impl& w = *impl_;
  for (std::size_t k = 0; k < w.output_indices.size(); ++k) {
    const BoundArgument& b = w.bound[w.output_indices[k]];
    auto n = static_cast<std::uint64_t>(b.element_count);
    if (b.argument->type == ElementType::float32)
      w.support->widen_f32(w.outputs[k].data(), w.kept[k].get(), n, *w.stream);
    else
      MLATUNE_CUDA(cudaMemcpyAsync(w.kept[k].get(), w.outputs[k].data(), n * 8, cudaMemcpyDeviceToDevice,
                                   static_cast<cudaStream_t>(w.stream->get())));
  }
}

ValidationStats Workload::compare_with_kept() {
  Impl& w = *impl_;
  std::vector<const void*> kept;
  for (const DeviceBuffer& copy : w.kept) kept.push_back(copy.get());
  return w.compare_with(kept);
}

std::vector<Watched> Workload::Impl::watched(int set) const {
  std::vector<Watched> out;
  for (std::size_t k = 0; k < output_indices.size(); ++k)
    out.push_back({bound[output_indices[k]].argument->name, &outputs[k]});
  for (std::size_t k = 0; k < input_indices.size(); ++k)
    out.push_back({bound[input_indices[k]].argument->name, &sets[static_cast<std::size_t>(set)].buffers[k]});
  for (std::size_t k = 0; k < workspace_indices.size(); ++k)
    if (workspaces[k]) out.push_back({bound[workspace_indices[k]].argument->name, workspaces[k]});
  return out;
}

void Workload::Impl::restore_input(int set, std::size_t input) {
  const InputSet& inputs = sets[static_cast<std::size_t>(set)];
  MLATUNE_CUDA(cudaMemcpyAsync(inputs.buffers[input].data(), inputs.pristine[input].get(),
                               inputs.pristine[input].bytes(), cudaMemcpyDeviceToDevice,
                               static_cast<cudaStream_t>(stream->get())));
}

void Workload::restore_integrity() {
  Impl& w = *impl_;
  for (int set = 0; set < w.options.validation_sets; ++set) {
    for (const Watched& watched : w.watched(set)) watched.buffer->fill_guards(*w.support, *w.stream);
    for (std::size_t k = 0; k < w.input_indices.size(); ++k) w.restore_input(set, k);
  }
}

std::optional<std::string> Workload::check_integrity(int set) {
  Impl& w = *impl_;
  if (set < 0 || set >= w.options.validation_sets)
    throw EnvironmentError(fmt::format("input set {} is not a validation set", set));
  const InputSet& inputs = w.sets[static_cast<std::size_t>(set)];
  std::vector<Watched> watched = w.watched(set);
  // Slots: two per watched buffer (front and back guard), then one per input.
  w.tallies.reset(*w.stream);
  for (std::size_t i = 0; i < watched.size(); ++i)
    watched[i].buffer->check_guards(*w.support, w.tallies, 2 * i, *w.stream);
  const std::size_t first_input_slot = 2 * watched.size();
  for (std::size_t k = 0; k < w.input_indices.size(); ++k) {
    const BoundArgument& b = w.bound[w.input_indices[k]];
    w.support->diff(inputs.buffers[k].data(), inputs.pristine[k].get(),
                    static_cast<std::uint64_t>(b.element_count), element_size(b.argument->type),
                    w.tallies, first_input_slot + k, *w.stream);
  }
  std::vector<Tally> found = w.tallies.read(*w.stream);

  // Whatever changed is put back, so the candidates after this one are not
  // judged on (or fed) what this one left behind.
  std::vector<std::string> damage;
  for (std::size_t k = 0; k < w.input_indices.size(); ++k) {
    const BoundArgument& b = w.bound[w.input_indices[k]];
    auto text = input_damage(b.argument->name, found[first_input_slot + k],
                             static_cast<std::uint64_t>(b.element_count));
    if (!text) continue;
    damage.push_back(std::move(*text));
    w.restore_input(set, k);
  }
  for (std::size_t i = 0; i < watched.size(); ++i) {
    auto text = guard_damage(watched[i].name, watched[i].buffer->layout(), found[2 * i], found[2 * i + 1]);
    if (!text) continue;
    damage.push_back(std::move(*text));
    watched[i].buffer->fill_guards(*w.support, *w.stream);
  }
  w.stream->synchronize();
  if (damage.empty()) return std::nullopt;
  return fmt::format("{}", fmt::join(damage, "; "));
}

void Workload::flush_l2() {
  Impl& w = *impl_;
  if (!w.flush.get()) return;
  w.support->flush_l2(w.flush.get(), w.flush.bytes() / 4, ++w.flush_counter, *w.stream);
}

ArgumentLayout workload_layout(const std::vector<BoundArgument>& bound) {
  ArgumentLayout layout = layout_arguments(bound);
  if (!layout.ok()) throw InputError(layout.refusal);
  return layout;
}

std::vector<std::int64_t> Workload::workspace_bytes() const { return workspace_sizes(impl_->bound); }

void Workload::set_workspace(const std::vector<const GuardedBuffer*>& buffers) {
  Impl& w = *impl_;
  if (buffers.size() != w.workspace_indices.size())
    throw EnvironmentError(fmt::format("set_workspace: {} buffers for {} workspace arguments",
                                       buffers.size(), w.workspace_indices.size()));
  w.workspaces = buffers;
  std::vector<void*> pointers;
  for (const GuardedBuffer* buffer : buffers) pointers.push_back(buffer ? buffer->data() : nullptr);
  for (InputSet& set : w.sets) set.arguments.set_workspaces(pointers);
}

std::optional<std::string> tolerance_failure(const ValidationStats& stats, const Tolerance& tolerance) {
  // Every violated criterion is named, so a stored failure says all it knows.
  std::vector<std::string> violations;
  if (stats.nonfinite > 0)
    violations.push_back(
        fmt::format("{} of {} output elements are NaN or infinite", stats.nonfinite, stats.elements));
  if (!(stats.relative_l2 <= tolerance.relative_l2))
    violations.push_back(fmt::format("relative L2 error {:.3g} exceeds the tolerance {:.3g}",
                                     stats.relative_l2, tolerance.relative_l2));
  if (tolerance.max_abs && !(stats.max_abs <= *tolerance.max_abs))
    violations.push_back(fmt::format("max abs error {:.3g} exceeds the tolerance {:.3g}",
                                     stats.max_abs, *tolerance.max_abs));
  if (violations.empty()) return std::nullopt;
  return fmt::format("{}", fmt::join(violations, "; "));
}

std::vector<unsigned char> Workload::download_input(int set, std::size_t input) const {
  const Impl& w = *impl_;
  if (set < 0 || set >= static_cast<int>(w.sets.size()) ||
      input >= w.sets[static_cast<std::size_t>(set)].buffers.size())
    throw InternalError(fmt::format("download_input: no input {} in set {}", input, set));
  const GuardedBuffer& buffer = w.sets[static_cast<std::size_t>(set)].buffers[input];
  std::vector<unsigned char> host(buffer.bytes());
  MLATUNE_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(w.stream->get())));
  MLATUNE_CUDA(cudaMemcpy(host.data(), buffer.data(), buffer.bytes(), cudaMemcpyDeviceToHost));
  return host;
}

std::vector<double> Workload::download_reference(int set, std::size_t output) const {
  const Impl& w = *impl_;
  if (set < 0 || set >= static_cast<int>(w.references.size()) ||
      output >= w.references[static_cast<std::size_t>(set)].size())
    throw InputError(fmt::format("download_reference: no output {} in validation set {}", output, set));
  const DeviceBuffer& buffer = w.references[static_cast<std::size_t>(set)][output];
  std::vector<double> host(buffer.bytes() / sizeof(double));
  MLATUNE_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(w.stream->get())));
  MLATUNE_CUDA(cudaMemcpy(host.data(), buffer.get(), host.size() * sizeof(double), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace mlatune

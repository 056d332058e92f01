#include "cache/mla.h"

#include <span>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace mlatune {
namespace {

void check_sizes(int B, int T, int H, int D, int R) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0 || R <= 0)
    throw InputError(fmt::format("fused MLA attention sizes must be positive: B={} T={} H={} D={} R={}", B, T,
                                 H, D, R));
}

}  // namespace

MlaAttention::MlaAttention(Dispatcher& dispatcher) : dispatcher_(&dispatcher) {
  const SearchSpace& space = dispatcher.space();
  const std::vector<std::string> variables{"B", "T", "H", "D", "R"};
  if (space.shape_variables() != variables)
    throw InputError(fmt::format("{} ({}) is not the fused MLA family: its shape variables are [{}], not [{}]",
                                 space.kernel_name(), space.file_name(),
                                 fmt::join(space.shape_variables(), ", "), fmt::join(variables, ", ")));
  const std::vector<std::string> buffers{"q", "kv_latent", "w_up_k", "w_up_v", "out"};
  std::vector<std::string> found;
  for (const Argument& argument : space.arguments()) {
    // Scratch the dispatcher allocates is not the caller's to pass.
    if (argument.role == ArgumentRole::scalar || argument.role == ArgumentRole::workspace) continue;
    if (argument.type != ElementType::float32)
      throw InputError(fmt::format("{}: buffer {} is {}, the typed entry takes float32", space.file_name(),
                                   argument.name, element_type_name(argument.type)));
    found.push_back(argument.name);
  }
  if (found != buffers)
    throw InputError(fmt::format("{} ({}) is not the fused MLA family: its buffers are [{}], not [{}]",
                                 space.kernel_name(), space.file_name(), fmt::join(found, ", "),
                                 fmt::join(buffers, ", ")));
}

Shape MlaAttention::shape(int B, int T, int H, int D, int R) const {
  check_sizes(B, T, H, D, R);
  return Shape{{B, T, H, D, R}};
}

void MlaAttention::operator()(const float* q, const float* kv_latent, const float* w_up_k,
                              const float* w_up_v, float* out, int B, int T, int H, int D, int R,
                              void* stream) const {
  // The kernel reads through these; the launch API takes untyped pointers.
  void* const buffers[5] = {const_cast<float*>(q), const_cast<float*>(kv_latent), const_cast<float*>(w_up_k),
                            const_cast<float*>(w_up_v), out};
  check_sizes(B, T, H, D, R);
  // On the stack: a cache hit allocates nothing.
  const std::int64_t sizes[5] = {B, T, H, D, R};
  dispatcher_->launch_buffers(std::span<const std::int64_t>(sizes), buffers, 5, stream);
}

void fused_mla_attention(Dispatcher& dispatcher, const float* q, const float* kv_latent,
                         const float* w_up_k, const float* w_up_v, float* out, int B, int T, int H,
                         int D, int R, void* stream) {
  const MlaAttention mla(dispatcher);
  mla(q, kv_latent, w_up_k, w_up_v, out, B, T, H, D, R, stream);
}

}  // namespace mlatune

#include "cache/mla_c_api.h"

#include "cache/c_api_handle.h"

namespace {

/// The handle's fused MLA view, checked once per handle; InputError (the
/// reason) when its space is another family.
const mlatune::MlaAttention& mla_of(mlatune_dispatcher& handle) {
  std::call_once(handle.mla_checked, [&] {
    try {
      handle.mla = std::make_unique<mlatune::MlaAttention>(*handle.dispatcher);
    } catch (const mlatune::InputError& e) {
      handle.mla_refusal = e.what();
    }
  });
  if (!handle.mla) throw mlatune::InputError(handle.mla_refusal);
  return *handle.mla;
}

}  // namespace

using mlatune::c_api::guarded;
using mlatune::c_api::require;

extern "C" {

int mlatune_fused_mla_attention(mlatune_dispatcher* dispatcher, const float* q, const float* kv_latent,
                                const float* w_up_k, const float* w_up_v, float* out, int B, int T,
                                int H, int D, int R, void* stream) {
  return guarded([&] {
    require(dispatcher != nullptr, "mlatune_fused_mla_attention: dispatcher is NULL");
    require(q && kv_latent && w_up_k && w_up_v && out, "mlatune_fused_mla_attention: a buffer is NULL");
    // The typed checks (positive sizes), then the dispatcher's launch_buffers:
    // the path mlatune_launch takes.
    mla_of(*dispatcher)(q, kv_latent, w_up_k, w_up_v, out, B, T, H, D, R, stream);
  });
}

int mlatune_choice(mlatune_dispatcher* dispatcher, int B, int T, int H, int D, int R, char* buffer,
                   size_t size) {
  std::string text;
  int status = guarded([&] {
    require(dispatcher != nullptr, "mlatune_choice: dispatcher is NULL");
    require(buffer != nullptr && size > 0, "mlatune_choice: no buffer");
    const mlatune::MlaAttention& mla = mla_of(*dispatcher);
    text = mlatune::c_api::choice_text(*dispatcher->dispatcher, mla.shape(B, T, H, D, R));
  });
  return status == MLATUNE_OK ? mlatune::c_api::copy_text(text, buffer, size, "mlatune_choice") : status;
}

}  // extern "C"

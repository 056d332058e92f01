#include "cache/mla_c_api.h"

#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "cache/dispatcher.h"
#include "cache/mla.h"
#include "core/cuda.h"

struct mlatune_dispatcher {
  std::unique_ptr<mlatune::Dispatcher> dispatcher;
  std::unique_ptr<mlatune::MlaAttention> mla;
};

namespace {

thread_local std::string last_error;

// Runs `body`, turning every exception into a status and a message.
template <typename Body>
int guarded(Body&& body) noexcept {
  try {
    body();
    last_error.clear();
    return MLATUNE_OK;
  } catch (const mlatune::InputError& e) {
    last_error = e.what();
    return MLATUNE_INVALID_ARGUMENT;
  } catch (const mlatune::CudaError& e) {
    last_error = e.what();
    return MLATUNE_CUDA_ERROR;
  } catch (const mlatune::Error& e) {
    last_error = e.what();
    return MLATUNE_ENVIRONMENT;
  } catch (const std::bad_alloc&) {
    last_error = "out of host memory";
    return MLATUNE_ENVIRONMENT;
  } catch (const std::exception& e) {
    last_error = std::string("internal error: ") + e.what();
    return MLATUNE_INTERNAL;
  } catch (...) {
    last_error = "internal error: unknown exception";
    return MLATUNE_INTERNAL;
  }
}

void require(bool condition, const char* what) {
  if (!condition) throw mlatune::InputError(what);
}

}  // namespace

extern "C" {

int mlatune_open(const char* database, const char* space_file, mlatune_dispatcher** out) {
  if (out) *out = nullptr;
  return guarded([&] {
    require(out != nullptr, "mlatune_open: out is NULL");
    require(database != nullptr && space_file != nullptr, "mlatune_open: database or space file is NULL");
    auto handle = std::make_unique<mlatune_dispatcher>();
    handle->dispatcher = mlatune::Dispatcher::open(database, space_file);
    handle->mla = std::make_unique<mlatune::MlaAttention>(*handle->dispatcher);
    *out = handle.release();
  });
}

void mlatune_close(mlatune_dispatcher* dispatcher) { delete dispatcher; }

int mlatune_fused_mla_attention(mlatune_dispatcher* dispatcher, const float* q, const float* kv_latent,
                                const float* w_up_k, const float* w_up_v, float* out, int B, int T,
                                int H, int D, int R, void* stream) {
  return guarded([&] {
    require(dispatcher != nullptr, "mlatune_fused_mla_attention: dispatcher is NULL");
    require(q && kv_latent && w_up_k && w_up_v && out, "mlatune_fused_mla_attention: a buffer is NULL");
    (*dispatcher->mla)(q, kv_latent, w_up_k, w_up_v, out, B, T, H, D, R, stream);
  });
}

const char* mlatune_last_error(const mlatune_dispatcher*) { return last_error.c_str(); }

int mlatune_choice(mlatune_dispatcher* dispatcher, int B, int T, int H, int D, int R, char* buffer,
                   size_t size) {
  std::string text;
  int status = guarded([&] {
    require(dispatcher != nullptr, "mlatune_choice: dispatcher is NULL");
    require(buffer != nullptr && size > 0, "mlatune_choice: no buffer");
    mlatune::Choice choice = dispatcher->dispatcher->describe(dispatcher->mla->shape(B, T, H, D, R)).choice;
    text = std::string(mlatune::to_string(choice.reason)) + " " +
           (choice.ok() ? choice.config_text : std::string("-")) + " (" + choice.explanation + ")";
  });
  if (status != MLATUNE_OK) return status;
  std::size_t n = text.size() < size ? text.size() : size - 1;
  std::memcpy(buffer, text.data(), n);
  buffer[n] = '\0';
  if (n < text.size()) {
    last_error = "mlatune_choice: buffer of " + std::to_string(size) + " bytes; " +
                 std::to_string(text.size() + 1) + " needed";
    return MLATUNE_BUFFER_TOO_SMALL;
  }
  return MLATUNE_OK;
}

int mlatune_compile_count(const mlatune_dispatcher* dispatcher, unsigned long long* count) {
  return guarded([&] {
    require(dispatcher != nullptr && count != nullptr, "mlatune_compile_count: NULL argument");
    *count = dispatcher->dispatcher->stats().compiles;
  });
}

}  // extern "C"

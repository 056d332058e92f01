// The handle behind the C ABI's opaque mlatune_dispatcher, and the guard that
// every exported function runs its body in, shared by the generic entry
// (cache/c_api.cpp) and the typed MLA wrappers (cache/mla_c_api.cpp).
// Internal: C callers see only cache/c_api.h.
#pragma once
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "cache/c_api.h"
#include "cache/dispatcher.h"
#include "cache/mla.h"
#include "core/cuda.h"

struct mlatune_dispatcher {
  std::unique_ptr<mlatune::Dispatcher> dispatcher;
  // The fused MLA view of the space, checked on the first typed MLA call
  // (any family's space opens): set, or why the space is not that family.
  std::once_flag mla_checked;
  std::unique_ptr<mlatune::MlaAttention> mla;
  std::string mla_refusal;
};

namespace mlatune::c_api {

/// The calling thread's last failure message (mlatune_last_error's text).
std::string& last_error();

/// Runs `body`, turning every exception into a status and a message.
template <typename Body>
int guarded(Body&& body) noexcept {
  try {
    body();
    last_error().clear();
    return MLATUNE_OK;
  } catch (const InputError& e) {
    last_error() = e.what();
    return MLATUNE_INVALID_ARGUMENT;
  } catch (const NotReadyError& e) {
    last_error() = e.what();
    return MLATUNE_NOT_READY;
  } catch (const CudaError& e) {
    last_error() = e.what();
    return MLATUNE_CUDA_ERROR;
  } catch (const Error& e) {
    last_error() = e.what();
    return MLATUNE_ENVIRONMENT;
  } catch (const std::bad_alloc&) {
    last_error() = "out of host memory";
    return MLATUNE_ENVIRONMENT;
  } catch (const std::exception& e) {
    last_error() = std::string("internal error: ") + e.what();
    return MLATUNE_INTERNAL;
  } catch (...) {
    last_error() = "internal error: unknown exception";
    return MLATUNE_INTERNAL;
  }
}

/// InputError(what) unless `condition`.
void require(bool condition, const char* what);

/// Copies `text` into the caller's buffer of `size` bytes (NUL-terminated,
/// truncated when it does not fit): MLATUNE_OK, or MLATUNE_BUFFER_TOO_SMALL
/// with a message naming `function` and the size needed.
int copy_text(const std::string& text, char* buffer, std::size_t size, const char* function);

/// mlatune_choice_for's text for a checked shape.
std::string choice_text(const Dispatcher& dispatcher, const Shape& shape);

}  // namespace mlatune::c_api

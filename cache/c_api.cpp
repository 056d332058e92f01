#include "cache/c_api.h"

#include <cstring>
#include <span>

#include <fmt/format.h>

#include "cache/c_api_handle.h"

namespace mlatune::c_api {

std::string& last_error() {
  thread_local std::string message;
  return message;
}

void require(bool condition, const char* what) {
  if (!condition) throw InputError(what);
}

int copy_text(const std::string& text, char* buffer, std::size_t size, const char* function) {
  std::size_t n = text.size() < size ? text.size() : size - 1;
  std::memcpy(buffer, text.data(), n);
  buffer[n] = '\0';
  if (n == text.size()) return MLATUNE_OK;
  last_error() = fmt::format("{}: buffer of {} bytes; {} needed", function, size, text.size() + 1);
  return MLATUNE_BUFFER_TOO_SMALL;
}

std::string choice_text(const Dispatcher& dispatcher, const Shape& shape) {
  DispatchDescription d = dispatcher.describe(shape);
  const Choice& choice = d.choice;
  std::string text = std::string(to_string(choice.reason)) + " " +
                     (choice.ok() ? choice.config_text : std::string("-")) + " (" + choice.explanation + ")";
  if (d.stand_in)
    text += fmt::format("; running stand-in {} {} {}", to_string(d.stand_in->reason), d.stand_in->config_text,
                        d.background_error.empty() ? "while the choice compiles in the background"
                                                   : "(the choice failed to compile: " + d.background_error + ")");
  if (d.race) text += "; " + d.race->text();
  return text;
}

namespace {

const CallSignature& signature_of(const mlatune_dispatcher* handle, const char* function) {
  if (handle == nullptr) throw InputError(fmt::format("{}: dispatcher is NULL", function));
  return handle->dispatcher->signature();
}

/// The buffer at `index`, or InputError saying how many there are.
const Argument& buffer_at(const CallSignature& signature, std::size_t index, const char* function) {
  if (index >= signature.buffer_count())
    throw InputError(fmt::format("{}: buffer index {}; the family has {} buffers", function, index,
                                 signature.buffer_count()));
  return signature.buffer(index);
}

std::span<const std::int64_t> shape_values(const std::int64_t* shape, std::size_t count, const char* function) {
  if (shape == nullptr && count > 0) throw InputError(fmt::format("{}: shape is NULL", function));
  return {shape, count};
}

/// What the dispatcher says of a shape, after checking the handle and the shape.
DispatchDescription described(const mlatune_dispatcher* handle, const std::int64_t* shape, std::size_t count,
                              const char* function) {
  const CallSignature& signature = signature_of(handle, function);
  return handle->dispatcher->describe(signature.shape(shape_values(shape, count, function)));
}

/// The buffers as the dispatcher takes them, after checking that none is NULL.
void* const* checked_buffers(const CallSignature& signature, const void* const* buffers, std::size_t count,
                             const char* function) {
  if (buffers == nullptr) throw InputError(fmt::format("{}: buffers is NULL", function));
  for (std::size_t i = 0; i < count; ++i)
    if (buffers[i] == nullptr)
      throw InputError(fmt::format("{}: buffer {} ({}) is NULL", function, i,
                                   i < signature.buffer_count() ? signature.buffer(i).name : "beyond the family's"));
  // The kernels only read inputs; the launch API takes untyped pointers.
  return const_cast<void* const*>(buffers);
}

int type_code(ElementType type) {
  switch (type) {
    case ElementType::float32: return MLATUNE_FLOAT32;
    case ElementType::float64: return MLATUNE_FLOAT64;
    case ElementType::int32: return MLATUNE_INT32;
    case ElementType::int64: return MLATUNE_INT64;
  }
  throw std::logic_error("unknown element type");
}

}  // namespace
}  // namespace mlatune::c_api

using mlatune::c_api::guarded;
using mlatune::c_api::require;

extern "C" {

int mlatune_open(const char* database, const char* space_file, mlatune_dispatcher** out) {
  if (out) *out = nullptr;
  return guarded([&] {
    require(out != nullptr, "mlatune_open: out is NULL");
    require(database != nullptr && space_file != nullptr, "mlatune_open: database or space file is NULL");
    auto handle = std::make_unique<mlatune_dispatcher>();
    handle->dispatcher = mlatune::Dispatcher::open(database, space_file);
    *out = handle.release();
  });
}

void mlatune_close(mlatune_dispatcher* dispatcher) { delete dispatcher; }

const char* mlatune_last_error(const mlatune_dispatcher*) { return mlatune::c_api::last_error().c_str(); }

int mlatune_compile_count(const mlatune_dispatcher* dispatcher, unsigned long long* count) {
  return guarded([&] {
    require(dispatcher != nullptr && count != nullptr, "mlatune_compile_count: NULL argument");
    *count = dispatcher->dispatcher->stats().compiles;
  });
}

int mlatune_first_use_ns(const mlatune_dispatcher* dispatcher, unsigned long long ns[MLATUNE_PHASE_COUNT]) {
  return guarded([&] {
    require(dispatcher != nullptr && ns != nullptr, "mlatune_first_use_ns: NULL argument");
    const mlatune::DispatcherStats s = dispatcher->dispatcher->stats();
    ns[MLATUNE_PHASE_CHOOSE] = s.choose_ns;
    ns[MLATUNE_PHASE_STORE_READ] = s.store_read_ns;
    ns[MLATUNE_PHASE_LOAD] = s.load_ns;
    ns[MLATUNE_PHASE_READY] = s.ready_ns;
    ns[MLATUNE_PHASE_MISS] = s.miss_ns;
    ns[MLATUNE_PHASE_RANK] = s.rank_ns;
    ns[MLATUNE_PHASE_QUEUE] = s.queue_ns;
    ns[MLATUNE_PHASE_FIRST_LAUNCH] = s.first_launch_ns;
    ns[MLATUNE_PHASE_WORKSPACE] = s.workspace_ns;
    ns[MLATUNE_PHASE_LOCK_WAIT] = s.lock_wait_ns;
  });
}

int mlatune_set_compile_mode(mlatune_dispatcher* dispatcher, int mode) {
  return guarded([&] {
    require(dispatcher != nullptr, "mlatune_set_compile_mode: dispatcher is NULL");
    if (mode != MLATUNE_COMPILE_BACKGROUND && mode != MLATUNE_COMPILE_BLOCKING && mode != MLATUNE_COMPILE_NONBLOCKING)
      throw mlatune::InputError(fmt::format("mlatune_set_compile_mode: mode {}; expected MLATUNE_COMPILE_BACKGROUND "
                                            "(0), MLATUNE_COMPILE_BLOCKING (1) or MLATUNE_COMPILE_NONBLOCKING (2)",
                                            mode));
    dispatcher->dispatcher->set_compile_mode(mode == MLATUNE_COMPILE_BLOCKING      ? mlatune::CompileMode::blocking
                                             : mode == MLATUNE_COMPILE_NONBLOCKING ? mlatune::CompileMode::nonblocking
                                                                                   : mlatune::CompileMode::background);
  });
}

int mlatune_wait_compiles(mlatune_dispatcher* dispatcher) {
  return guarded([&] {
    require(dispatcher != nullptr, "mlatune_wait_compiles: dispatcher is NULL");
    dispatcher->dispatcher->wait_compiles();
  });
}

int mlatune_preloaded(const mlatune_dispatcher* dispatcher, unsigned long long* loaded, unsigned long long* failed) {
  return guarded([&] {
    require(dispatcher != nullptr && loaded != nullptr && failed != nullptr, "mlatune_preloaded: NULL argument");
    const mlatune::DispatcherStats s = dispatcher->dispatcher->stats();
    *loaded = s.binaries_preloaded;
    *failed = s.preload_failures;
  });
}

int mlatune_runs_stand_in(mlatune_dispatcher* dispatcher, const int64_t* shape, size_t shape_count,
                          int* stand_in) {
  using namespace mlatune::c_api;
  return guarded([&] {
    require(stand_in != nullptr, "mlatune_runs_stand_in: stand_in is NULL");
    *stand_in = described(dispatcher, shape, shape_count, "mlatune_runs_stand_in").stand_in ? 1 : 0;
  });
}

int mlatune_race_state(mlatune_dispatcher* dispatcher, const int64_t* shape, size_t shape_count, int* state) {
  using namespace mlatune::c_api;
  return guarded([&] {
    require(state != nullptr, "mlatune_race_state: state is NULL");
    const auto race = described(dispatcher, shape, shape_count, "mlatune_race_state").race;
    *state = !race ? MLATUNE_NO_RACE : race->settled ? MLATUNE_RACE_SETTLED : MLATUNE_RACING;
  });
}

int mlatune_kernel_name(const mlatune_dispatcher* dispatcher, const char** name) {
  return guarded([&] {
    require(dispatcher != nullptr && name != nullptr, "mlatune_kernel_name: NULL argument");
    *name = dispatcher->dispatcher->space().kernel_name().c_str();
  });
}

int mlatune_shape_variable_count(const mlatune_dispatcher* dispatcher, size_t* count) {
  return guarded([&] {
    require(dispatcher != nullptr && count != nullptr, "mlatune_shape_variable_count: NULL argument");
    *count = dispatcher->dispatcher->signature().shape_variable_count();
  });
}

int mlatune_shape_variable_name(const mlatune_dispatcher* dispatcher, size_t index, const char** name) {
  return guarded([&] {
    require(dispatcher != nullptr && name != nullptr, "mlatune_shape_variable_name: NULL argument");
    const auto& variables = dispatcher->dispatcher->signature().shape_variables();
    if (index >= variables.size())
      throw mlatune::InputError(fmt::format("mlatune_shape_variable_name: index {}; the family has {} shape "
                                            "variables", index, variables.size()));
    *name = variables[index].c_str();
  });
}

int mlatune_buffer_count(const mlatune_dispatcher* dispatcher, size_t* count) {
  return guarded([&] {
    require(dispatcher != nullptr && count != nullptr, "mlatune_buffer_count: NULL argument");
    *count = dispatcher->dispatcher->signature().buffer_count();
  });
}

int mlatune_buffer_info(const mlatune_dispatcher* dispatcher, size_t index, const char** name,
                        int* element_type, int* role, size_t* element_bytes) {
  using namespace mlatune::c_api;
  return guarded([&] {
    const char* function = "mlatune_buffer_info";
    const mlatune::Argument& buffer = buffer_at(signature_of(dispatcher, function), index, function);
    if (name) *name = buffer.name.c_str();
    if (element_type) *element_type = type_code(buffer.type);
    if (role) *role = buffer.role == mlatune::ArgumentRole::output ? MLATUNE_OUTPUT : MLATUNE_INPUT;
    if (element_bytes) *element_bytes = mlatune::element_size(buffer.type);
  });
}

int mlatune_buffer_elements(const mlatune_dispatcher* dispatcher, size_t index, const int64_t* shape,
                            size_t shape_count, uint64_t* elements) {
  using namespace mlatune::c_api;
  return guarded([&] {
    const char* function = "mlatune_buffer_elements";
    const mlatune::CallSignature& signature = signature_of(dispatcher, function);
    require(elements != nullptr, "mlatune_buffer_elements: elements is NULL");
    buffer_at(signature, index, function);
    mlatune::Shape checked = signature.shape(shape_values(shape, shape_count, function));
    *elements = static_cast<uint64_t>(signature.buffer_elements(index, checked));
  });
}

int mlatune_launch(mlatune_dispatcher* dispatcher, const void* const* buffers, size_t buffer_count,
                   const int64_t* shape, size_t shape_count, void* stream) {
  using namespace mlatune::c_api;
  return guarded([&] {
    const char* function = "mlatune_launch";
    void* const* pointers = checked_buffers(signature_of(dispatcher, function), buffers, buffer_count, function);
    dispatcher->dispatcher->launch_buffers(shape_values(shape, shape_count, function), pointers, buffer_count,
                                           stream);
  });
}

int mlatune_launch_checked(mlatune_dispatcher* dispatcher, const void* const* buffers,
                           const size_t* buffer_bytes, size_t buffer_count, const int64_t* shape,
                           size_t shape_count, void* stream) {
  using namespace mlatune::c_api;
  return guarded([&] {
    const char* function = "mlatune_launch_checked";
    void* const* pointers = checked_buffers(signature_of(dispatcher, function), buffers, buffer_count, function);
    require(buffer_bytes != nullptr, "mlatune_launch_checked: buffer_bytes is NULL");
    dispatcher->dispatcher->launch_buffers_checked(shape_values(shape, shape_count, function), pointers,
                                                   buffer_bytes, buffer_count, stream);
  });
}

int mlatune_choice_for(mlatune_dispatcher* dispatcher, const int64_t* shape, size_t shape_count, char* buffer,
                       size_t size) {
  using namespace mlatune::c_api;
  std::string text;
  int status = guarded([&] {
    const char* function = "mlatune_choice_for";
    const mlatune::CallSignature& signature = signature_of(dispatcher, function);
    require(buffer != nullptr && size > 0, "mlatune_choice_for: no buffer");
    text = choice_text(*dispatcher->dispatcher, signature.shape(shape_values(shape, shape_count, function)));
  });
  return status == MLATUNE_OK ? copy_text(text, buffer, size, "mlatune_choice_for") : status;
}

}  // extern "C"

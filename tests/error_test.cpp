// The error classes as main() and the C ABI tell them apart: an internal
// error (a bug in mlatune) must never be caught as bad input or as a broken
// environment by the handlers that recover from those.
#include "core/error.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <type_traits>

#include "core/compiler.h"

namespace mlatune {
namespace {

TEST(Errors, AnInternalErrorIsNeitherInputNorEnvironment) {
  static_assert(std::is_base_of_v<std::logic_error, InternalError>);
  static_assert(!std::is_base_of_v<Error, InternalError>);
  static_assert(std::is_base_of_v<Error, InputError> && std::is_base_of_v<Error, EnvironmentError>);
  try {
    throw InternalError("broken invariant");
  } catch (const Error&) {
    FAIL() << "an InternalError was caught as an mlatune::Error";
  } catch (const InternalError& e) {
    EXPECT_STREQ(e.what(), "broken invariant");
  }
}

TEST(Errors, AskingAFailedCompilationForItsBinaryIsAnInternalError) {
  CompileResult failed{CompileFailure{}};
  EXPECT_THROW(failed.binary(), InternalError);
}

}  // namespace
}  // namespace mlatune

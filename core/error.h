// Error types shared by every part of mlatune.
//
// Exceptions are for a broken environment (no GPU, a failing system call, a
// corrupt database), broken input (a malformed space file, a bad option), or
// a bug in mlatune itself (InternalError).  "This config cannot run this
// shape" is a value, never an exception.  main() maps InputError to exit
// code 2, InternalError to 3 and every other error to 1.
#pragma once
#include <stdexcept>
#include <string>

namespace mlatune {

/// A position in a text file; line and column are 1-based, 0 means unknown.
struct SourceLocation {
  std::string file;
  int line = 0;
  int column = 0;
  /// "file:line:col", "file:line" or "file", whichever is known.
  std::string str() const;
};

/// Base of all mlatune errors.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Bad input from the user: a file, an option, a shape.  Exit code 2.
/// what() reads "file:line:col: <message>" when a location is known.
class InputError : public Error {
 public:
  explicit InputError(const std::string& message);
  InputError(SourceLocation where, const std::string& message);
  const SourceLocation& where() const { return where_; }
  /// The message without the location prefix.
  const std::string& message() const { return message_; }

 private:
  SourceLocation where_;
  std::string message_;
};

/// The environment failed: no GPU or driver, a system call, a library call.
/// Exit code 1.
class EnvironmentError : public Error {
 public:
  using Error::Error;
};

/// mlatune's own parts disagree: a broken invariant, a state that cannot
/// happen, a request one part of mlatune sent another that it does not
/// understand.  A bug to report, never the user's doing.  Exit code 3.
/// It derives from std::logic_error, not from Error, on purpose: the
/// handlers that recover from bad input or a broken environment
/// (`catch (const Error&)`) must not swallow a bug.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

}  // namespace mlatune

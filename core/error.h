// Error types shared by every part of mlatune.
//
// Exceptions are for a broken environment (no GPU, a failing system call, a
// corrupt database) or broken input (a malformed space file, a bad option).
// "This config cannot run this shape" is a value, never an exception.
// main() maps InputError to exit code 2 and every other error to 1.
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

}  // namespace mlatune

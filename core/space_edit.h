// Edits of a search-space file that keep everything else byte-for-byte:
// comments, blank lines, order and quoting of all other content.  yaml-cpp
// drops comments when it emits, so edits splice the text at the position of
// the edited node instead of re-emitting the document.
//
// Each edit_* function returns the new text and throws InputError (naming
// file:line:col) when the edit cannot apply: unknown parameter, a value that
// is already there / not there, removing a parameter's last value, a
// constraint that is already there / not there.  The new text is *not*
// validated as a space: replace_file_validated() does that before writing.
#pragma once
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace mlatune {

/// Replace the value list of `parameter` with `values` (written as given:
/// "4", "true", "absorbed"), keeping the list's style (flow `[a, b]` or block
/// `- a` lines) and its indentation.
std::string edit_set_values(std::string_view text, const std::string& file_name,
                            const std::string& parameter, const std::vector<std::string>& values);
/// Append one value to `parameter`'s list.
std::string edit_add_value(std::string_view text, const std::string& file_name,
                           const std::string& parameter, const std::string& value);
/// Remove one value from `parameter`'s list.
std::string edit_remove_value(std::string_view text, const std::string& file_name,
                              const std::string& parameter, const std::string& value);
/// Append a constraint to the `constraints:` list (created at the end of the
/// file if the file has none).
std::string edit_add_constraint(std::string_view text, const std::string& file_name,
                                const std::string& expression);
/// Remove the constraint whose text equals `expression` (compared with
/// whitespace removed).
std::string edit_remove_constraint(std::string_view text, const std::string& file_name,
                                   const std::string& expression);

/// Runs `validate(new_text)` (which throws InputError for a bad space) and
/// only if it passes replaces `file` atomically: a temporary file in the same
/// directory, flushed, then renamed over the original (permissions kept).
/// On any failure the original file is untouched and the exception propagates.
void replace_file_validated(const std::filesystem::path& file, std::string_view new_text,
                            const std::function<void(std::string_view)>& validate);

}  // namespace mlatune

#include "core/space_edit.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace mlatune {
namespace {

const std::string kFile = "space.yaml";

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

std::string with_crlf(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\n') out += '\r';
    out += c;
  }
  return out;
}

/// Runs `edit` expecting an InputError and returns it.
template <typename Edit>
InputError input_error(Edit edit) {
  try {
    edit();
  } catch (const InputError& e) {
    return e;
  }
  ADD_FAILURE() << "expected an InputError";
  return InputError("none");
}

// ---- flow lists -------------------------------------------------------------------

const std::string kFlow =
    "# header comment\n"
    "kernel: k   # trailing\n"
    "\n"
    "parameters:              # name: [values]\n"
    "  ALGORITHM: [absorbed, expanded]   # two ways\n"
    "  T: [1, 2,\n"
    "      4,   # four\n"
    "      8]\n"
    "  EMPTY: []\n"
    "\n"
    "# after\n";

TEST(SpaceEditFlow, AddAppendsAfterTheLastItemKeepingCommentsAndLines) {
  EXPECT_EQ(edit_add_value(kFlow, kFile, "T", "16"),
            "# header comment\n"
            "kernel: k   # trailing\n"
            "\n"
            "parameters:              # name: [values]\n"
            "  ALGORITHM: [absorbed, expanded]   # two ways\n"
            "  T: [1, 2,\n"
            "      4,   # four\n"
            "      8, 16]\n"
            "  EMPTY: []\n"
            "\n"
            "# after\n");
  EXPECT_EQ(edit_add_value(kFlow, kFile, "ALGORITHM", "hybrid"),
            "# header comment\n"
            "kernel: k   # trailing\n"
            "\n"
            "parameters:              # name: [values]\n"
            "  ALGORITHM: [absorbed, expanded, hybrid]   # two ways\n"
            "  T: [1, 2,\n"
            "      4,   # four\n"
            "      8]\n"
            "  EMPTY: []\n"
            "\n"
            "# after\n");
}

TEST(SpaceEditFlow, AddToAnEmptyList) {
  std::string out = edit_add_value(kFlow, kFile, "EMPTY", "3");
  EXPECT_NE(out.find("  EMPTY: [3]\n"), std::string::npos) << out;
  EXPECT_EQ(edit_remove_value(edit_add_value(out, kFile, "EMPTY", "5"), kFile, "EMPTY", "5"), out);
}

TEST(SpaceEditFlow, RemoveTheLastItemKeepsTheCommentOfTheItemBefore) {
  EXPECT_EQ(edit_remove_value(kFlow, kFile, "T", "8"),
            "# header comment\n"
            "kernel: k   # trailing\n"
            "\n"
            "parameters:              # name: [values]\n"
            "  ALGORITHM: [absorbed, expanded]   # two ways\n"
            "  T: [1, 2,\n"
            "      4   # four\n"
            "      ]\n"
            "  EMPTY: []\n"
            "\n"
            "# after\n");
}

TEST(SpaceEditFlow, RemoveTheFirstAndAMiddleItem) {
  EXPECT_EQ(edit_remove_value(kFlow, kFile, "T", "1"),
            "# header comment\n"
            "kernel: k   # trailing\n"
            "\n"
            "parameters:              # name: [values]\n"
            "  ALGORITHM: [absorbed, expanded]   # two ways\n"
            "  T: [2,\n"
            "      4,   # four\n"
            "      8]\n"
            "  EMPTY: []\n"
            "\n"
            "# after\n");
  EXPECT_EQ(edit_remove_value(kFlow, kFile, "ALGORITHM", "absorbed"),
            "# header comment\n"
            "kernel: k   # trailing\n"
            "\n"
            "parameters:              # name: [values]\n"
            "  ALGORITHM: [expanded]   # two ways\n"
            "  T: [1, 2,\n"
            "      4,   # four\n"
            "      8]\n"
            "  EMPTY: []\n"
            "\n"
            "# after\n");
}

TEST(SpaceEditFlow, SetChangesOnlyTheValuesThatDiffer) {
  // 4 and 8 stay where they are (with the comment); 1, 2 become 32; 64 is appended.
  EXPECT_EQ(edit_set_values(kFlow, kFile, "T", {"32", "4", "8", "64"}),
            "# header comment\n"
            "kernel: k   # trailing\n"
            "\n"
            "parameters:              # name: [values]\n"
            "  ALGORITHM: [absorbed, expanded]   # two ways\n"
            "  T: [32, 4,   # four\n"
            "      8, 64]\n"
            "  EMPTY: []\n"
            "\n"
            "# after\n");
  EXPECT_EQ(edit_set_values(kFlow, kFile, "ALGORITHM", {"a", "b", "c"}),
            "# header comment\n"
            "kernel: k   # trailing\n"
            "\n"
            "parameters:              # name: [values]\n"
            "  ALGORITHM: [a, b, c]   # two ways\n"
            "  T: [1, 2,\n"
            "      4,   # four\n"
            "      8]\n"
            "  EMPTY: []\n"
            "\n"
            "# after\n");
  EXPECT_EQ(edit_set_values(kFlow, kFile, "T", {"1", "2", "4", "8"}), kFlow);
}

TEST(SpaceEditFlow, InsertFollowsTheListsOwnSeparator) {
  const std::string text = "parameters:\n  T: [1,\n      4]\n";
  EXPECT_EQ(edit_set_values(text, kFile, "T", {"1", "2", "4"}), "parameters:\n  T: [1,\n      2,\n      4]\n");
  EXPECT_EQ(edit_set_values(text, kFile, "T", {"0", "1", "4"}), "parameters:\n  T: [0,\n      1,\n      4]\n");
}

TEST(SpaceEditFlow, ValuesThatDoNotFitAsGivenAreRefused) {
  InputError e = input_error([&] { edit_set_values(kFlow, kFile, "T", {"1, 2"}); });
  EXPECT_EQ(e.where().line, 6);
  EXPECT_EQ(e.where().column, 6);
  EXPECT_NE(e.message().find("'1', '2'"), std::string::npos) << e.what();
  InputError none = input_error([&] { edit_set_values(kFlow, kFile, "T", {}); });
  EXPECT_EQ(none.where().line, 6);
  EXPECT_EQ(none.where().column, 6);
}

// ---- block lists -------------------------------------------------------------------

const std::string kBlock =
    "parameters:\n"
    "    Q:\n"
    "      - 1     # one\n"
    "\n"
    "      # between\n"
    "      - \"2\"\n"
    "      - 4\n"
    "    # end of Q\n"
    "    B:\n"
    "    - false\n"
    "    - 'true'\n"
    "other: 1\n";

TEST(SpaceEditBlock, AddAppendsALineWithTheSameIndentation) {
  EXPECT_EQ(edit_add_value(kBlock, kFile, "Q", "8"),
            "parameters:\n"
            "    Q:\n"
            "      - 1     # one\n"
            "\n"
            "      # between\n"
            "      - \"2\"\n"
            "      - 4\n"
            "      - 8\n"
            "    # end of Q\n"
            "    B:\n"
            "    - false\n"
            "    - 'true'\n"
            "other: 1\n");
  EXPECT_EQ(edit_add_value(kBlock, kFile, "B", "maybe"),
            "parameters:\n"
            "    Q:\n"
            "      - 1     # one\n"
            "\n"
            "      # between\n"
            "      - \"2\"\n"
            "      - 4\n"
            "    # end of Q\n"
            "    B:\n"
            "    - false\n"
            "    - 'true'\n"
            "    - maybe\n"
            "other: 1\n");
}

TEST(SpaceEditBlock, RemoveDeletesOnlyThatItemsLine) {
  EXPECT_EQ(edit_remove_value(kBlock, kFile, "Q", "1"),
            "parameters:\n"
            "    Q:\n"
            "\n"
            "      # between\n"
            "      - \"2\"\n"
            "      - 4\n"
            "    # end of Q\n"
            "    B:\n"
            "    - false\n"
            "    - 'true'\n"
            "other: 1\n");
  // A quoted value is found by what it reads as.
  EXPECT_EQ(edit_remove_value(kBlock, kFile, "Q", "2"),
            "parameters:\n"
            "    Q:\n"
            "      - 1     # one\n"
            "\n"
            "      # between\n"
            "      - 4\n"
            "    # end of Q\n"
            "    B:\n"
            "    - false\n"
            "    - 'true'\n"
            "other: 1\n");
}

TEST(SpaceEditBlock, SetReplacesInPlaceAndInsertsAfterThePrecedingItem) {
  EXPECT_EQ(edit_set_values(kBlock, kFile, "Q", {"16", "2", "3", "4"}),
            "parameters:\n"
            "    Q:\n"
            "      - 16     # one\n"
            "\n"
            "      # between\n"
            "      - \"2\"\n"
            "      - 3\n"
            "      - 4\n"
            "    # end of Q\n"
            "    B:\n"
            "    - false\n"
            "    - 'true'\n"
            "other: 1\n");
  EXPECT_EQ(edit_set_values(kBlock, kFile, "B", {"true"}),
            "parameters:\n"
            "    Q:\n"
            "      - 1     # one\n"
            "\n"
            "      # between\n"
            "      - \"2\"\n"
            "      - 4\n"
            "    # end of Q\n"
            "    B:\n"
            "    - 'true'\n"
            "other: 1\n");
}

TEST(SpaceEditBlock, MultiLinePlainItemIsOneItem) {
  const std::string text = "constraints:\n- A <\n  B   # folded\n- C\n";
  EXPECT_EQ(edit_remove_constraint(text, kFile, "A < B"), "constraints:\n- C\n");
}

// ---- line endings, final newline, byte order mark ----------------------------------------

TEST(SpaceEditText, CrlfFilesKeepCrlf) {
  const std::string text = with_crlf(kBlock + "constraints:\n  - Q > 0  # c\n");
  EXPECT_EQ(
      edit_add_value(text, kFile, "Q", "8"),
      with_crlf("parameters:\n    Q:\n      - 1     # one\n\n      # between\n      - \"2\"\n      - 4\n      - 8\n"
                "    # end of Q\n    B:\n    - false\n    - 'true'\nother: 1\nconstraints:\n  - Q > 0  # c\n"));
  EXPECT_EQ(edit_add_constraint(text, kFile, "Q < 9"), text + "  - Q < 9\r\n");
  EXPECT_EQ(edit_remove_value(text, kFile, "B", "true"),
            with_crlf("parameters:\n    Q:\n      - 1     # one\n\n      # between\n      - \"2\"\n      - 4\n"
                      "    # end of Q\n    B:\n    - false\nother: 1\nconstraints:\n  - Q > 0  # c\n"));
  const std::string flow = with_crlf(kFlow);
  EXPECT_EQ(edit_remove_value(flow, kFile, "T", "8"),
            with_crlf("# header comment\nkernel: k   # trailing\n\nparameters:              # name: [values]\n"
                      "  ALGORITHM: [absorbed, expanded]   # two ways\n  T: [1, 2,\n      4   # four\n      ]\n"
                      "  EMPTY: []\n\n# after\n"));
}

TEST(SpaceEditText, FileWithoutFinalNewlineGetsNone) {
  const std::string text = "parameters:\n  Q:\n    - 1\n    - 2  # two";
  EXPECT_EQ(edit_add_value(text, kFile, "Q", "4"), "parameters:\n  Q:\n    - 1\n    - 2  # two\n    - 4");
  EXPECT_EQ(edit_remove_value(text, kFile, "Q", "2"), "parameters:\n  Q:\n    - 1");
  EXPECT_EQ(edit_add_constraint(text, kFile, "Q > 0"),
            "parameters:\n  Q:\n    - 1\n    - 2  # two\nconstraints:\n  - Q > 0");
  const std::string flow = "parameters:\n  T: [1, 2]";
  EXPECT_EQ(edit_add_value(flow, kFile, "T", "4"), "parameters:\n  T: [1, 2, 4]");
  const std::string crlf = "parameters:\r\n  Q:\r\n    - 1\r\n    - 2";
  EXPECT_EQ(edit_add_value(crlf, kFile, "Q", "4"), "parameters:\r\n  Q:\r\n    - 1\r\n    - 2\r\n    - 4");
  EXPECT_EQ(edit_remove_value(crlf, kFile, "Q", "2"), "parameters:\r\n  Q:\r\n    - 1");
}

TEST(SpaceEditText, ByteOrderMarkIsKept) {
  const std::string text = "\xEF\xBB\xBFparameters:\n  T: [1, 2]\n";
  EXPECT_EQ(edit_add_value(text, kFile, "T", "4"), "\xEF\xBB\xBFparameters:\n  T: [1, 2, 4]\n");
}

// ---- constraints ---------------------------------------------------------------------

const std::string kConstraints =
    "parameters:\n"
    "  A: [1, 2]\n"
    "constraints:   # all must hold\n"
    "  - A * 2 <= 4\n"
    "  # quoted because of ': '\n"
    "  - \"A > 1 ? 1 : 0\"\n"
    "launch: {}\n";

TEST(SpaceEditConstraints, ConstrainAppendsAfterTheLastItem) {
  EXPECT_EQ(edit_add_constraint(kConstraints, kFile, "A != 3"),
            "parameters:\n"
            "  A: [1, 2]\n"
            "constraints:   # all must hold\n"
            "  - A * 2 <= 4\n"
            "  # quoted because of ': '\n"
            "  - \"A > 1 ? 1 : 0\"\n"
            "  - A != 3\n"
            "launch: {}\n");
}

TEST(SpaceEditConstraints, TextThatYamlWouldMisreadIsQuoted) {
  auto last_line = [](const std::string& text) {
    std::string tail = text.substr(0, text.rfind("launch:"));
    tail.pop_back();
    return tail.substr(tail.rfind('\n') + 1);
  };
  EXPECT_EQ(last_line(edit_add_constraint(kConstraints, kFile, "A == 1 ? 2 : 3")), "  - \"A == 1 ? 2 : 3\"");
  EXPECT_EQ(last_line(edit_add_constraint(kConstraints, kFile, "!A")), "  - \"!A\"");
  EXPECT_EQ(last_line(edit_add_constraint(kConstraints, kFile, "*A")), "  - \"*A\"");
  EXPECT_EQ(last_line(edit_add_constraint(kConstraints, kFile, "A > 0 # x")), "  - \"A > 0 # x\"");
  EXPECT_EQ(last_line(edit_add_constraint(kConstraints, kFile, "A == \"x\\y\" || 1")),
            "  - A == \"x\\y\" || 1");  // fine as a plain scalar: quotes inside are literal
  EXPECT_EQ(last_line(edit_add_constraint(kConstraints, kFile, "\"A\" > 0")), "  - \"\\\"A\\\" > 0\"");
  EXPECT_EQ(last_line(edit_add_constraint(kConstraints, kFile, "  min(A, 2) > 0  ")), "  - min(A, 2) > 0");
  // The quoted text reads back as the expression.
  YAML::Node node = YAML::Load(edit_add_constraint(kConstraints, kFile, "A == 1 ? 2 : 3"));
  EXPECT_EQ(node["constraints"][2].as<std::string>(), "A == 1 ? 2 : 3");
}

TEST(SpaceEditConstraints, FlowListQuotesCommas) {
  const std::string text = "constraints: [A > 0]  # c\n";
  EXPECT_EQ(edit_add_constraint(text, kFile, "min(A, 2) > 1"), "constraints: [A > 0, \"min(A, 2) > 1\"]  # c\n");
  EXPECT_EQ(edit_remove_constraint(text, kFile, "A>0"), "constraints: []  # c\n");
}

TEST(SpaceEditConstraints, UnconstrainComparesWithoutWhitespace) {
  EXPECT_EQ(edit_remove_constraint(kConstraints, kFile, "A*2<=4"),
            "parameters:\n"
            "  A: [1, 2]\n"
            "constraints:   # all must hold\n"
            "  # quoted because of ': '\n"
            "  - \"A > 1 ? 1 : 0\"\n"
            "launch: {}\n");
  EXPECT_EQ(edit_remove_constraint(kConstraints, kFile, "A > 1 ? 1 : 0"),
            "parameters:\n"
            "  A: [1, 2]\n"
            "constraints:   # all must hold\n"
            "  - A * 2 <= 4\n"
            "  # quoted because of ': '\n"
            "launch: {}\n");
}

TEST(SpaceEditConstraints, ConstrainCreatesTheListAtTheEnd) {
  const std::string text = "kernel: k\nparameters:\n    A: [1]   # only\n# last comment\n";
  EXPECT_EQ(edit_add_constraint(text, kFile, "A > 0"),
            "kernel: k\nparameters:\n    A: [1]   # only\n# last comment\nconstraints:\n    - A > 0\n");
}

TEST(SpaceEditConstraints, ConstrainFillsAnEmptyConstraintsKey) {
  const std::string text = "parameters:\n  A: [1]\nconstraints:   # none yet\nlaunch: {}\n";
  EXPECT_EQ(edit_add_constraint(text, kFile, "A > 0"),
            "parameters:\n  A: [1]\nconstraints:   # none yet\n  - A > 0\nlaunch: {}\n");
  const std::string not_a_list = "parameters:\n  A: [1]\nconstraints: 3\n";
  InputError e = input_error([&] { edit_add_constraint(not_a_list, kFile, "A > 0"); });
  EXPECT_EQ(e.where().line, 3);
  EXPECT_EQ(e.where().column, 1);
}

TEST(SpaceEditConstraints, EmptyOrDuplicateConstraintIsRefused) {
  input_error([&] { edit_add_constraint(kConstraints, kFile, "   "); });
  InputError e = input_error([&] { edit_add_constraint(kConstraints, kFile, "A*2 <= 4"); });
  EXPECT_EQ(e.where().line, 4);
  EXPECT_EQ(e.where().column, 5);
}

// ---- inverse edits return the original bytes ------------------------------------------

std::string fixture() {
  return read_bytes(std::filesystem::path(MLATUNE_TEST_DATA_DIR) / "spaces" / "edit" / "commented.yaml");
}

void expect_inverses_restore(const std::string& text) {
  for (const auto& [parameter, value] : std::vector<std::pair<std::string, std::string>>{
           {"ALGORITHM", "hybrid"}, {"THREADS_PER_QUERY", "64"}, {"QUERIES_PER_BLOCK", "128"}, {"FLOAT4", "maybe"}}) {
    std::string added = edit_add_value(text, kFile, parameter, value);
    EXPECT_NE(added, text);
    EXPECT_EQ(edit_remove_value(added, kFile, parameter, value), text) << parameter;
  }
  for (const std::string& expression : {std::string("B <= 64"), std::string("D % 2 == 0 ? 1 : 0")}) {
    std::string added = edit_add_constraint(text, kFile, expression);
    EXPECT_NE(added, text);
    EXPECT_EQ(edit_remove_constraint(added, kFile, expression), text) << expression;
  }
}

TEST(SpaceEditRoundTrip, InverseEditsRestoreTheOriginalBytes) {
  const std::string text = fixture();
  ASSERT_NE(text.find("# one warp at most"), std::string::npos);
  expect_inverses_restore(text);
  expect_inverses_restore(with_crlf(text));
  std::string unterminated = text;
  while (!unterminated.empty() && unterminated.back() == '\n') unterminated.pop_back();
  expect_inverses_restore(unterminated);
}

TEST(SpaceEditRoundTrip, AnEditChangesOnlyItsOwnLines) {
  const std::string text = fixture();
  std::string out = edit_remove_value(text, kFile, "QUERIES_PER_BLOCK", "2");
  EXPECT_EQ(out.size(), text.size() - std::string("    - 2       # small blocks for short sequences\n").size());
  EXPECT_EQ(out.find("    - 2       # small blocks"), std::string::npos);
  std::string restored = edit_set_values(out, kFile, "QUERIES_PER_BLOCK", {"1", "2", "4", "8", "16", "32", "64"});
  // The comment went with the value; everything else is back.
  std::string expected = text;
  expected.replace(expected.find("    - 2       # small blocks for short sequences\n"),
                   std::string("    - 2       # small blocks for short sequences\n").size(), "    - 2\n");
  EXPECT_EQ(restored, expected);
}

// ---- errors point at file:line:col -------------------------------------------------------

TEST(SpaceEditErrors, UnknownParameterPointsAtTheParametersKey) {
  InputError e = input_error([&] { edit_add_value(kFlow, kFile, "NOPE", "1"); });
  EXPECT_EQ(e.where().file, kFile);
  EXPECT_EQ(e.where().line, 4);
  EXPECT_EQ(e.where().column, 1);
  EXPECT_NE(e.message().find("unknown parameter 'NOPE'"), std::string::npos) << e.what();
  EXPECT_NE(e.message().find("ALGORITHM, T, EMPTY"), std::string::npos) << e.what();
  EXPECT_EQ(std::string(e.what()).rfind("space.yaml:4:1: ", 0), 0u) << e.what();
  InputError nested = input_error([&] { edit_remove_value(kBlock, kFile, "X", "1"); });
  EXPECT_EQ(nested.where().line, 1);
  EXPECT_EQ(nested.where().column, 1);
}

TEST(SpaceEditErrors, DuplicateValuePointsAtTheValueAlreadyThere) {
  InputError e = input_error([&] { edit_add_value(kFlow, kFile, "T", "4"); });
  EXPECT_EQ(e.where().line, 7);
  EXPECT_EQ(e.where().column, 7);
  EXPECT_NE(e.message().find("already has the value '4'"), std::string::npos) << e.what();
  InputError quoted = input_error([&] { edit_add_value(kBlock, kFile, "Q", "2"); });
  EXPECT_EQ(quoted.where().line, 6);
  EXPECT_EQ(quoted.where().column, 9);
}

TEST(SpaceEditErrors, RemovingTheLastValuePointsAtIt) {
  const std::string text = "parameters:\n  A: [1, 2]\n  ONLY:\n     - 7  # lonely\n";
  InputError e = input_error([&] { edit_remove_value(text, kFile, "ONLY", "7"); });
  EXPECT_EQ(e.where().line, 4);
  EXPECT_EQ(e.where().column, 8);
  EXPECT_NE(e.message().find("last value"), std::string::npos) << e.what();
}

TEST(SpaceEditErrors, RemovingAMissingValueListsTheValues) {
  InputError e = input_error([&] { edit_remove_value(kFlow, kFile, "T", "3"); });
  EXPECT_EQ(e.where().line, 6);
  EXPECT_EQ(e.where().column, 6);
  EXPECT_NE(e.message().find("1, 2, 4, 8"), std::string::npos) << e.what();
}

TEST(SpaceEditErrors, UnconstrainOfAMissingConstraintListsTheConstraints) {
  InputError e = input_error([&] { edit_remove_constraint(kConstraints, kFile, "A > 7"); });
  EXPECT_EQ(e.where().line, 3);
  EXPECT_EQ(e.where().column, 1);
  EXPECT_NE(e.message().find("no constraint 'A > 7'"), std::string::npos) << e.what();
  EXPECT_NE(e.message().find("'A * 2 <= 4', 'A > 1 ? 1 : 0'"), std::string::npos) << e.what();
  InputError none = input_error([&] { edit_remove_constraint("parameters:\n  A: [1]\n", kFile, "A > 7"); });
  EXPECT_EQ(none.where().file, kFile);
}

TEST(SpaceEditErrors, YamlSyntaxErrorsCarryTheirPosition) {
  InputError e = input_error([&] { edit_add_value("parameters:\n  A: [1, 2\nb: 1\n", kFile, "A", "3"); });
  EXPECT_EQ(e.where().file, kFile);
  EXPECT_GT(e.where().line, 0);
  InputError not_list = input_error([&] { edit_add_value("parameters:\n  A: 4\n", kFile, "A", "3"); });
  EXPECT_EQ(not_list.where().line, 2);
  EXPECT_EQ(not_list.where().column, 3);
  InputError alias = input_error([&] { edit_add_value("parameters:\n  A: [&x 1, 2]\n", kFile, "A", "3"); });
  EXPECT_EQ(alias.where().line, 2);
  EXPECT_EQ(alias.where().column, 7);
}

// ---- replace_file_validated ----------------------------------------------------------------

class ReplaceFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "mlatune-space-edit-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    file_ = dir_ / "space.yaml";
    write_bytes(file_, original_);
    ASSERT_EQ(::chmod(file_.c_str(), 0640), 0);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::vector<std::string> directory_entries() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) names.push_back(entry.path().filename());
    return names;
  }

  std::filesystem::path dir_;
  std::filesystem::path file_;
  const std::string original_ = "parameters:   # keep me\n  A: [1, 2]\n";
};

TEST_F(ReplaceFile, FailedValidationLeavesTheFileUntouched) {
  struct stat before {};
  ASSERT_EQ(::stat(file_.c_str(), &before), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // so a rewrite would show in mtime
  const std::string bad = edit_add_value(original_, kFile, "A", "oops");
  bool validated = false;
  EXPECT_THROW(replace_file_validated(file_, bad,
                                      [&](std::string_view text) {
                                        validated = true;
                                        YAML::Node node = YAML::Load(std::string(text));
                                        for (const auto& v : node["parameters"]["A"]) {
                                          if (v.Scalar() == "oops") {
                                            throw InputError(SourceLocation{kFile, 2, 13}, "not an integer");
                                          }
                                        }
                                      }),
               InputError);
  EXPECT_TRUE(validated);
  EXPECT_EQ(read_bytes(file_), original_);
  struct stat after {};
  ASSERT_EQ(::stat(file_.c_str(), &after), 0);
  EXPECT_EQ(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
  EXPECT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(directory_entries(), std::vector<std::string>{"space.yaml"});
}

TEST_F(ReplaceFile, PassingValidationReplacesTheFileAndKeepsItsMode) {
  const std::string edited = edit_add_value(original_, kFile, "A", "4");
  std::string seen;
  replace_file_validated(file_, edited, [&](std::string_view text) {
    seen = text;
    if (!YAML::Load(seen)["parameters"].IsMap()) throw InputError("no parameters");
  });
  EXPECT_EQ(seen, edited);
  EXPECT_EQ(read_bytes(file_), "parameters:   # keep me\n  A: [1, 2, 4]\n");
  struct stat after {};
  ASSERT_EQ(::stat(file_.c_str(), &after), 0);
  EXPECT_EQ(after.st_mode & 07777, 0640u);
  EXPECT_EQ(directory_entries(), std::vector<std::string>{"space.yaml"});
}

TEST_F(ReplaceFile, EditingThroughASymlinkReplacesTheTarget) {
  std::filesystem::path link = dir_ / "link.yaml";
  std::filesystem::create_symlink(file_, link);
  replace_file_validated(link, "parameters: {}\n", [](std::string_view) {});
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(read_bytes(file_), "parameters: {}\n");
}

TEST_F(ReplaceFile, SystemFailuresAreEnvironmentErrorsNamingThePath) {
  std::filesystem::path missing = dir_ / "missing.yaml";
  try {
    replace_file_validated(missing, "x: 1\n", [](std::string_view) {});
    ADD_FAILURE() << "expected an EnvironmentError";
  } catch (const EnvironmentError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.yaml"), std::string::npos) << e.what();
  }
  std::filesystem::create_directory(dir_ / "sub");
  EXPECT_THROW(replace_file_validated(dir_ / "sub", "x: 1\n", [](std::string_view) {}), EnvironmentError);
  EXPECT_EQ(directory_entries().size(), 2u);
  EXPECT_EQ(read_bytes(file_), original_);
}

}  // namespace
}  // namespace mlatune

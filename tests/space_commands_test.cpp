// The `mlatune space ...` commands, run as the built program: exit codes
// (0 success, 2 bad input), output, and errors that name file:line:col with
// no crash or stack trace.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

namespace {

namespace fs = std::filesystem;
const fs::path spaces_dir = fs::path(MLATUNE_TEST_DATA_DIR) / "spaces";
const fs::path program = fs::path(MLATUNE_BINARY_DIR) / "mlatune";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct Outcome {  // of one run of the program
  int code = -1;
  std::string out, err;
};

class SpaceCommands : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(program)) << program << " is not built";
    dir_ = fs::temp_directory_path() /
           ("mlatune_space_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Outcome run(const std::vector<std::string>& args) {
    std::string command = quote(program.string());
    for (const std::string& a : args) command += " " + quote(a);
    const fs::path out = dir_ / "stdout", err = dir_ / "stderr";
    command += " >" + quote(out.string()) + " 2>" + quote(err.string());
    int status = std::system(command.c_str());
    Outcome r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = read_file(out);
    r.err = read_file(err);
    return r;
  }

  // A writable copy of small.yaml with its templates.
  fs::path copy_small() {
    for (const char* f : {"small.yaml", "tiny.cu", "tiny_reference.cu"})
      fs::copy_file(spaces_dir / f, dir_ / f);
    return dir_ / "small.yaml";
  }

  static void expect_clean_error(const Outcome& r) {
    EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("Aborted"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
    EXPECT_FALSE(std::regex_search(r.err, std::regex(R"(#\d+ +0x)"))) << r.err;  // backtrace frames
  }

  fs::path dir_;
};

TEST_F(SpaceCommands, ValidatePrintsAOneLineSummary) {
  Outcome r = run({"space", "validate", (spaces_dir / "small.yaml").string()});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(
      r.out.find("4 parameters, 96 raw configs; 70 valid at N=1000,M=16; 35 valid at N=64,M=3"),
      std::string::npos)
      << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1);
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST_F(SpaceCommands, CountForAGivenShapeAndForTheDefaults) {
  Outcome r = run({"space", "count", (spaces_dir / "small.yaml").string(), "--shape", "N=50,M=3"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "35 valid of 96 raw configs at N=50,M=3\n");
  r = run({"space", "count", (spaces_dir / "small.yaml").string()});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "70 valid of 96 raw configs at N=1000,M=16\n35 valid of 96 raw configs at N=64,M=3\n");
}

TEST_F(SpaceCommands, AShapeWithNoValidConfigNamesTheConstraintToBlame) {
  fs::path file = copy_small();
  std::string text = read_file(file);
  text += "  - N >= 32\n";  // constraints: is the last section of small.yaml
  std::ofstream(file, std::ios::binary) << text;
  Outcome r = run({"space", "count", file.string(), "--shape", "N=8,M=4"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "0 valid of 96 raw configs at N=8,M=4 (constraint 'N >= 32' at " +
                       file.string() + ":47:5 removes the most)\n");
  r = run({"space", "list", file.string(), "--shape", "N=8,M=4"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.out.empty());
  EXPECT_NE(r.err.find("no valid config at N=8,M=4"), std::string::npos) << r.err;
}

TEST_F(SpaceCommands, ListAsTextAndJson) {
  const std::string file = (spaces_dir / "small.yaml").string();
  Outcome r = run({"space", "list", file, "--shape", "N=64,M=3", "--limit", "3"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "ALGORITHM=plain,THREADS=32,ITEMS=1,VECTOR=false\n"
            "ALGORITHM=plain,THREADS=32,ITEMS=2,VECTOR=false\n"
            "ALGORITHM=plain,THREADS=32,ITEMS=4,VECTOR=false\n");
  r = run({"space", "list", file, "--shape", "N=64,M=16", "--json"});
  EXPECT_EQ(r.code, 0) << r.err;
  nlohmann::json all = nlohmann::json::parse(r.out);
  ASSERT_TRUE(all.is_array());
  EXPECT_EQ(all.size(), 70u);
  EXPECT_EQ(all[1]["ALGORITHM"], "plain");
  EXPECT_EQ(all[1]["THREADS"], 32);
  EXPECT_EQ(all[1]["VECTOR"], true);
}

TEST_F(SpaceCommands, BadShapeOrMissingFileExitsWithTwo) {
  const std::string file = (spaces_dir / "small.yaml").string();
  Outcome r = run({"space", "count", file, "--shape", "N=64"});
  EXPECT_EQ(r.code, 2);
  // The shape is the option's, not a line of the space file.
  EXPECT_EQ(r.err, "mlatune: error: --shape: shape 'N=64' lacks variable 'M'; expected every one "
                   "of N, M\n");
  expect_clean_error(r);
  for (const char* command : {"count", "list"}) {
    r = run({"space", command, file, "--shape", ""});  // not the default shapes
    EXPECT_EQ(r.code, 2) << command;
    EXPECT_EQ(r.err, "mlatune: error: --shape: empty shape; expected NAME=VALUE for each of N, M\n");
  }
  r = run({"space", "validate", (dir_ / "nothing.yaml").string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("nothing.yaml"), std::string::npos) << r.err;
  r = run({"space", "frobnicate", file});
  EXPECT_EQ(r.code, 2);
  expect_clean_error(r);
}

TEST_F(SpaceCommands, EveryMalformedFileGivesFileLineColumnAndExitCodeTwo) {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(spaces_dir / "bad")) {
    const std::string path = entry.path().string();
    SCOPED_TRACE(path);
    std::string first = read_file(entry.path());
    first = first.substr(0, first.find('\n'));
    std::smatch m;
    ASSERT_TRUE(std::regex_match(first, m, std::regex(R"(# expect: (\d+):(\d+): .*)")));
    for (const char* command : {"validate", "count", "list"}) {
      Outcome r = run({"space", command, path});
      EXPECT_EQ(r.code, 2) << command << ": " << r.err;
      EXPECT_EQ(r.err.rfind("mlatune: error: " + path + ":" + std::string(m[1]) + ":" +
                                std::string(m[2]) + ": ",
                            0),
                0u)
          << r.err;
      EXPECT_TRUE(r.out.empty()) << r.out;
      expect_clean_error(r);
    }
    ++files;
  }
  EXPECT_GE(files, 25);
}

TEST_F(SpaceCommands, ConstrainValidatesBeforeWriting) {
  fs::path file = copy_small();
  const std::string before = read_file(file);
  // Errors in the expression point into the expression, not at the line of
  // the file it would have been written to.
  Outcome r = run({"space", "constrain", file.string(), "THREADS +* 2 <= 64"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("mlatune: error: space constrain 'THREADS +* 2 <= 64': column 10: "
                        "unexpected operator '*'",
                        0),
            0u)
      << r.err;
  expect_clean_error(r);
  EXPECT_EQ(read_file(file), before);  // untouched
  r = run({"space", "constrain", file.string(), "WIDTH > 2"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("mlatune: error: space constrain 'WIDTH > 2': column 1: unknown name 'WIDTH'", 0), 0u)
      << r.err;

  // A whole-space error caused by the new line is the command's.
  r = run({"space", "constrain", file.string(), "THREADS > 100000"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("mlatune: error: space constrain 'THREADS > 100000' would make it invalid: "
                        "no valid config",
                        0),
            0u)
      << r.err;
  EXPECT_EQ(read_file(file), before);

  // One at an unchanged line is reported at that line of the file as it is:
  // launch.shared_memory (line 37) compares ALGORITHM with 'tiled'.
  r = run({"space", "set", file.string(), "ALGORITHM", "plain,unrolled"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("mlatune: error: " + file.string() + ":37:32: space set ALGORITHM plain,unrolled "
                        "would make it invalid: unknown name 'tiled'",
                        0),
            0u)
      << r.err;
  r = run({"space", "add", file.string(), "THREADS", "many"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("mlatune: error: space add THREADS many would make it invalid: value 'many'", 0), 0u)
      << r.err;
  EXPECT_EQ(read_file(file), before);

  r = run({"space", "constrain", file.string(), "ITEMS <= 2"});
  EXPECT_EQ(r.code, 0) << r.err;
  r = run({"space", "count", file.string(), "--shape", "N=64,M=3"});
  EXPECT_EQ(r.out,
            "20 valid of 96 raw configs at N=64,M=3\n");  // 8 (THREADS, ITEMS) pairs: 8 + 8 + 4
}

// The edit renames a new file over the old one, which the directory's
// permission alone allows: the file's own mode must be asked first.  Tests
// run as root, for whom access(W_OK) always succeeds: the mode decides.
TEST_F(SpaceCommands, EditsRefuseAReadOnlyFileAndLeaveItAlone) {
  fs::path file = copy_small();
  const std::string before = read_file(file);
  fs::permissions(file, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  const std::vector<std::vector<std::string>> edits = {
      {"set", "THREADS", "32,64"},    {"add", "THREADS", "512"},
      {"remove", "THREADS", "256"},   {"constrain", "ITEMS <= 2"},
      {"unconstrain", "THREADS * ITEMS <= 512"}};
  for (std::vector<std::string> edit : edits) {
    SCOPED_TRACE(edit[0]);
    edit.insert(edit.begin() + 1, file.string());
    edit.insert(edit.begin(), "space");
    Outcome r = run(edit);
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_NE(r.err.find("is read-only (mode 444)"), std::string::npos) << r.err;
    expect_clean_error(r);
    EXPECT_EQ(read_file(file), before);
    EXPECT_EQ(fs::status(file).permissions() & fs::perms::all,
              fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  }
}

TEST_F(SpaceCommands, EditOfAnUnknownParameterExitsWithTwo) {
  fs::path file = copy_small();
  const std::string before = read_file(file);
  Outcome r = run({"space", "set", file.string(), "NO_SUCH_PARAMETER", "1,2"});
  EXPECT_EQ(r.code, 2) << r.err;
  expect_clean_error(r);
  r = run({"space", "add", file.string(), "NO_SUCH_PARAMETER", "4"});
  EXPECT_EQ(r.code, 2) << r.err;
  r = run({"space", "remove", file.string(), "NO_SUCH_PARAMETER", "4"});
  EXPECT_EQ(r.code, 2) << r.err;
  r = run({"space", "unconstrain", file.string(), "NO_SUCH == CONSTRAINT"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(read_file(file), before);
}

}  // namespace

// Inputs the fuzz targets (tests/fuzz) found, fed to the same code in the
// ordinary build: each must now be rejected with a clear error, or accepted,
// quickly.  The inputs live in tests/fuzz/regressions/<target>/, where the
// fuzz build's CTest runs them through the fuzz targets too.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/space.h"
#include "tuner/worker/client.h"
#include "tuner/worker/codec.h"
#include "tuner/worker/framing.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

const fs::path regressions = fs::path(MLATUNE_TEST_DATA_DIR) / "fuzz" / "regressions";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Every message framed in `bytes`, read back through a real pipe as the
// tuner and the worker read them.
std::vector<Bytes> messages_in(const std::string& bytes) {
  int ends[2];
  EXPECT_EQ(::pipe(ends), 0);
  EXPECT_EQ(::write(ends[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  ::close(ends[1]);
  MessageReader reader(ends[0]);
  std::vector<Bytes> out;
  Bytes message;
  while (reader.read(message) == MessageReader::Status::message) out.push_back(message);
  ::close(ends[0]);
  return out;
}

// Whether `decode` accepts `body` or rejects it as a malformed message; any
// other exception fails the test.
template <typename Decode>
void expect_decoded_or_malformed(const Bytes& body, Decode decode, const std::string& input) {
  try {
    (void)decode(body);
  } catch (const MalformedMessage& error) {
    EXPECT_NE(std::string(error.what()).find("malformed message"), std::string::npos)
        << input << ": " << error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << input << ": " << typeid(error).name() << ": " << error.what();
  }
}

TEST(FuzzRegressions, WorkerMessagesOfTheWrongShapeAreMalformed) {
  for (const auto& entry : fs::directory_iterator(regressions / "worker_message")) {
    const std::string input = entry.path().filename().string();
    for (const Bytes& body : messages_in(read_file(entry.path()))) {
      expect_decoded_or_malformed(body, decode_request, input);
      expect_decoded_or_malformed(body, decode_reply, input);
    }
  }
  // A progress message is a progress reply, never a result.
  std::vector<Bytes> progress = messages_in(read_file(regressions / "worker_message" / "progress_as_result"));
  ASSERT_EQ(progress.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<ProgressReply>(decode_reply(progress[0])));
}

// A stand-in worker that answers any request with one framed message read
// from a file (tests/fuzz/regressions/worker_message/), then exits.
fs::path fake_worker(const fs::path& reply) {
  fs::path script = fs::temp_directory_path() / ("mlatune-fake-worker-" + std::to_string(::getpid()));
  // It keeps reading until the tuner closes its pipe, so that the request
  // never meets a closed pipe.
  std::ofstream(script) << "#!/bin/sh\ncat '" << reply.string() << "' >&4\nexec cat <&3 >/dev/null\n";
  ::chmod(script.c_str(), 0700);
  return script;
}

TEST(FuzzRegressions, AReplyThatIsNotAnObjectIsAnEnvironmentError) {
  WorkerOptions options;
  options.executable = fake_worker(regressions / "worker_message" / "integer_message");
  Worker worker(options);
  try {
    worker.probe_device();
    ADD_FAILURE() << "a bare integer was taken for a probe reply";
  } catch (const EnvironmentError& error) {
    EXPECT_NE(std::string(error.what()).find("malformed message"), std::string::npos) << error.what();
  }
  fs::remove(options.executable);
}

TEST(FuzzRegressions, ReadingAHugeSpaceDoesNotWalkIt) {
  const fs::path file = regressions / "space_parse" / "huge_raw_space.yaml";
  auto start = std::chrono::steady_clock::now();
  SearchSpace space = SearchSpace::parse(read_file(file), file.string(),
                                         fs::path(MLATUNE_TEST_DATA_DIR) / "spaces");
  EXPECT_EQ(space.raw_count(), 1'000'000'000'000u);
  // Walking 10^12 configs takes hours; finding the first valid one, nothing.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(FuzzRegressions, InputThatHungYamlLoadAllIsRefusedQuickly) {
  // YAML::LoadAll never returned on this file; the reader now uses Load.
  const fs::path file = regressions / "space_parse" / "load_all_hang.yaml";
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(SearchSpace::parse(read_file(file), file.string(), fs::path(MLATUNE_TEST_DATA_DIR) / "spaces"),
               InputError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(FuzzRegressions, ANameLongerThanTheExpressionParserTakesIsAnInputError) {
  // A named value of 126 characters reached muParser's DefineConst, whose
  // "identifier too long" error escaped the reader and ended the process.
  const fs::path file = regressions / "space_parse" / "named_value_longer_than_muparser_allows.yaml";
  try {
    SearchSpace::parse(read_file(file), file.string(), fs::path(MLATUNE_TEST_DATA_DIR) / "spaces");
    ADD_FAILURE() << "accepted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("at most 64 characters"), std::string::npos) << error.what();
  }
}

TEST(FuzzRegressions, AssignmentInAWhereIsAnInputError) {
  // 'THREADS = 64' assigned 64 to the evaluator's THREADS slot and held, so
  // the restricted space admitted configs its own constraints reject.
  const SearchSpace space = SearchSpace::load(fs::path(MLATUNE_TEST_DATA_DIR) / "spaces" / "small.yaml");
  const std::string where = read_file(regressions / "where" / "assignment");
  try {
    space.restrict({where});
    ADD_FAILURE() << "'" << where << "' was accepted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("expected '=='"), std::string::npos) << error.what();
  }
  for (const char* comparison : {"THREADS == 64", "THREADS <= 64", "THREADS >= 64", "THREADS != 64"})
    EXPECT_NO_THROW(space.restrict({comparison})) << comparison;
}

}  // namespace
}  // namespace mlatune

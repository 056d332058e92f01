// Replay: the CSV reader (quotes, comments, malformed rows with their line),
// lookups of recorded measurements, the optimum, the recorded H200 fixture,
// and replaying a strategy against recorded data; the restriction a fixture
// states ("# where:"), gzip-compressed fixtures, searches over the recorded
// configs only, and proposals made ahead of the results.
#include "tuner/replay.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>

#include <unistd.h>

#include "core/error.h"
#include "core/space.h"
#include "tests/run_program.h"
#include "tuner/strategy.h"
#include "tests/h200_sweeps_where.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;
const fs::path tests_dir = fs::path(MLATUNE_TEST_DATA_DIR);

const SearchSpace& small_space() {
  static const SearchSpace space = SearchSpace::load(tests_dir / "spaces" / "small.yaml");
  return space;
}

std::vector<std::vector<std::string>> fields_of(const std::vector<CsvRow>& rows) {
  std::vector<std::vector<std::string>> out;
  for (const auto& row : rows) out.push_back(row.fields);
  return out;
}

// The InputError `f` throws; fails the test when it throws none.
template <typename F>
InputError input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e;
  }
  ADD_FAILURE() << "no InputError";
  return InputError("none");
}

TEST(Csv, QuotedFieldsCommentsAndLineNumbers) {
  const std::string text =
      "# a comment, with \"quotes\"\n"
      "a,b,c\n"
      "\n"
      "\"x,y\",\"say \"\"hi\"\"\",plain\r\n"
      "# another comment\n"
      "\"two\nlines\",,\"\"\n"
      "last,row,no newline";
  auto rows = parse_csv(text, "t.csv");
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(fields_of(rows),
            (std::vector<std::vector<std::string>>{{"a", "b", "c"},
                                                   {"x,y", "say \"hi\"", "plain"},
                                                   {"two\nlines", "", ""},
                                                   {"last", "row", "no newline"}}));
  EXPECT_EQ(rows[0].line, 2);
  EXPECT_EQ(rows[1].line, 4);
  EXPECT_EQ(rows[2].line, 6);
  EXPECT_EQ(rows[3].line, 8);
}

TEST(Csv, MalformedQuotingNamesTheLineAndColumn) {
  auto e = input_error([] { parse_csv("a,b\nx,\"open\n\nmore", "t.csv"); });
  EXPECT_EQ(e.where().line, 2);
  EXPECT_EQ(e.where().column, 3);
  EXPECT_NE(std::string(e.what()).find("t.csv:2:3"), std::string::npos) << e.what();
  EXPECT_NE(e.message().find("unterminated"), std::string::npos);

  e = input_error([] { parse_csv("a,b\n\"x\"y,z\n", "t.csv"); });
  EXPECT_EQ(e.where().line, 2);
  EXPECT_EQ(e.where().column, 4);

  e = input_error([] { parse_csv("a,b\nx\"y,z\n", "t.csv"); });
  EXPECT_EQ(e.where().line, 2);
}

const std::string header = "shape,config,outcome,median_us,min_us\n";
const std::string s1 = "\"N=64,M=3\"";
const std::string c_plain = "\"ALGORITHM=plain,THREADS=32,ITEMS=1,VECTOR=false\"";
const std::string c_tiled = "\"ALGORITHM=tiled,THREADS=64,ITEMS=2,VECTOR=false\"";
const std::string c_fail = "\"ALGORITHM=unrolled,THREADS=32,ITEMS=2,VECTOR=false\"";

ReplayData small_data() {
  return ReplayData::parse(
      header + "# recorded by hand\n" +           //
          s1 + "," + c_plain + ",ok,12.5,12\n" +  //
          s1 + "," + c_tiled + ",ok,8.25,8\n" +   //
          s1 + "," + c_fail + ",wrong_result,,\n" +
          // the same shape, spelled in another order
          "\"M=3,N=64\",\"VECTOR=true,ALGORITHM=plain,THREADS=32,ITEMS=1\",ok,20,19\n",
      "small.csv", small_space());
}

TEST(ReplayData, LooksUpByTypedShapeAndConfig) {
  const ReplayData data = small_data();
  const Shape shape = small_space().parse_shape("N=64,M=3");
  ASSERT_EQ(data.shapes(), std::vector<Shape>{shape});
  EXPECT_EQ(data.size(shape), 4u);
  auto config = [](const char* text) { return small_space().parse_config(text); };
  EXPECT_EQ(data.time(shape, config("ALGORITHM=plain,THREADS=32,ITEMS=1,VECTOR=false")), 12.5);
  EXPECT_EQ(data.time(shape, config("ITEMS=2,ALGORITHM=tiled,THREADS=64,VECTOR=false")), 8.25);
  EXPECT_EQ(data.time(shape, config("ALGORITHM=plain,THREADS=32,ITEMS=1,VECTOR=true")), 20.0);
  EXPECT_EQ(data.time(shape, config("ALGORITHM=unrolled,THREADS=32,ITEMS=2,VECTOR=false")),
            std::nullopt);
  EXPECT_DOUBLE_EQ(data.optimum(shape), 8.25);

  const Config absent = config("ALGORITHM=tiled,THREADS=128,ITEMS=4,VECTOR=false");
  EXPECT_FALSE(data.contains(shape, absent));
  auto e = input_error([&] { data.time(shape, absent); });
  EXPECT_NE(e.message().find("ALGORITHM=tiled,THREADS=128,ITEMS=4,VECTOR=false"), std::string::npos)
      << e.message();
  const Shape other = small_space().parse_shape("N=1000,M=16");
  EXPECT_EQ(data.size(other), 0u);
  input_error([&] { data.time(other, absent); });
  input_error([&] { data.optimum(other); });
}

TEST(ReplayData, NoSuccessfulMeasurementHasNoOptimum) {
  const ReplayData data =
      ReplayData::parse(header + s1 + "," + c_fail + ",crashed,,\n", "f.csv", small_space());
  auto e = input_error([&] { data.optimum(small_space().parse_shape("N=64,M=3")); });
  EXPECT_NE(e.message().find("no successful"), std::string::npos) << e.message();
}

TEST(ReplayData, BadRowsNameTheirLine) {
  struct Case {
    std::string row;
    std::string says;
  };
  const std::vector<Case> cases = {
      {s1 + "," + c_plain + ",ok,12.5\n", "4 fields"},
      {s1 + "," + c_plain + ",ok,fast,1\n", "median_us 'fast'"},
      {s1 + "," + c_plain + ",ok,-3,1\n", "median_us '-3'"},
      {s1 + "," + c_plain + ",exploded,1,1\n", "unknown outcome 'exploded'"},
      {s1 + ",\"ALGORITHM=plain,THREADS=32,ITEMS=1\",ok,1,1\n", "VECTOR"},
      {"\"N=64\"," + c_plain + ",ok,1,1\n", "M"},
      {s1 + "," + c_plain + ",ok,2,2\n", "recorded twice"},
  };
  for (const auto& c : cases) {
    // The bad row is the 4th line: header, comment, a good row, then it.
    const std::string text = header + "# comment\n" + s1 + "," + c_plain + ",ok,1,1\n" + c.row;
    auto e = input_error([&] { ReplayData::parse(text, "bad.csv", small_space()); });
    EXPECT_EQ(e.where().file, "bad.csv") << c.row;
    EXPECT_EQ(e.where().line, 4) << c.row << " -> " << e.what();
    EXPECT_NE(e.message().find(c.says), std::string::npos) << c.row << " -> " << e.what();
  }
  auto e = input_error([] { ReplayData::parse("shape,config,outcome\n", "h.csv", small_space()); });
  EXPECT_NE(e.message().find("median_us"), std::string::npos) << e.what();
  input_error([] { ReplayData::parse("# only a comment\n", "e.csv", small_space()); });
}

TEST(ReplayData, UnreadableFileIsAnEnvironmentError) {
  EXPECT_THROW(ReplayData::load(tests_dir / "data" / "no_such_file.csv", small_space()),
               EnvironmentError);
}

TEST(ReplayData, RecordedH200SweepsMatchTheirRows) {
  // Exact configs only: the sweeps were recorded before shape-bucketed ones.
  const SearchSpace space =
      SearchSpace::load(tests_dir.parent_path() / "search_spaces" / "fused_mla_attention.yaml")
          .restrict({kH200SweepsWhere});
  const fs::path file = tests_dir / "data" / "h200_sweeps.csv";
  const ReplayData data = ReplayData::load(file, space);

  // Recount from the raw rows, independently of ReplayData.
  std::ifstream in(file);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  auto rows = parse_csv(text, file.string());
  ASSERT_GT(rows.size(), 1u);
  std::map<std::string, std::pair<std::size_t, double>> by_shape;  // rows, fastest ok
  for (std::size_t r = 1; r < rows.size(); ++r) {
    auto& [count, fastest] = by_shape.try_emplace(rows[r].fields[0], 0, 1e300).first->second;
    ++count;
    if (rows[r].fields[2] == "ok") fastest = std::min(fastest, std::stod(rows[r].fields[3]));
  }
  ASSERT_EQ(by_shape.size(), 3u);
  EXPECT_EQ(data.shapes().size(), 3u);
  for (const auto& [shape_text, expected] : by_shape) {
    const Shape shape = space.parse_shape(shape_text);
    EXPECT_EQ(data.size(shape), expected.first) << shape_text;
    EXPECT_DOUBLE_EQ(data.optimum(shape), expected.second) << shape_text;
  }
  // S0 and S1 are exhaustive: every valid config has a measurement.
  for (const char* text : {"B=2,T=32,H=4,D=16,R=24", "B=4,T=256,H=8,D=32,R=64"}) {
    const Shape shape = space.parse_shape(text);
    std::size_t missing = 0;
    space.for_each_valid(shape, [&](const Config& c) {
      missing += !data.contains(shape, c);
      return true;
    });
    EXPECT_EQ(missing, 0u) << text;
  }
}

// Proposes configs in a fixed order and records what it was told.
class Scripted final : public Strategy {
 public:
  explicit Scripted(std::vector<Config> order) : order_(std::move(order)) {}
  std::optional<Config> next() override {
    if (position_ == order_.size()) return std::nullopt;
    return order_[position_++];
  }
  void observe(const Config& config, std::optional<double> time_us) override {
    told.push_back({config, time_us});
  }
  std::vector<std::pair<Config, std::optional<double>>> told;

 private:
  std::vector<Config> order_;
  std::size_t position_ = 0;
};

TEST(Replay, TracesTheBestSoFarAndStops) {
  const ReplayData data = small_data();
  const Shape shape = small_space().parse_shape("N=64,M=3");
  auto config = [](const char* text) { return small_space().parse_config(text); };
  const std::vector<Config> order = {
      config("ALGORITHM=unrolled,THREADS=32,ITEMS=2,VECTOR=false"),  // failed
      config("ALGORITHM=plain,THREADS=32,ITEMS=1,VECTOR=true"),      // 20
      config("ALGORITHM=plain,THREADS=32,ITEMS=1,VECTOR=false"),     // 12.5
      config("ALGORITHM=tiled,THREADS=64,ITEMS=2,VECTOR=false"),     // 8.25
  };
  const double inf = std::numeric_limits<double>::infinity();

  Scripted all(order);
  auto trace = replay(all, data, shape, 100);
  EXPECT_EQ(trace.best_after, (std::vector<double>{inf, 20, 12.5, 8.25}));
  ASSERT_EQ(all.told.size(), 4u);
  EXPECT_EQ(all.told[0].second, std::nullopt);
  EXPECT_EQ(all.told[3].second, 8.25);
  EXPECT_EQ(trace.evaluations_to_within(8.25, 0.03), 4u);
  EXPECT_EQ(trace.evaluations_to_within(8.25, 0.6), 3u);
  EXPECT_EQ(trace.evaluations_to_within(1.0, 0.03), std::nullopt);
  EXPECT_EQ(trace.best_after_evaluations(0), inf);
  EXPECT_EQ(trace.best_after_evaluations(2), 20);
  EXPECT_EQ(trace.best_after_evaluations(50), 8.25);

  Scripted budgeted(order);
  EXPECT_EQ(replay(budgeted, data, shape, 2).best_after.size(), 2u);
  // Continuing the same strategy picks up where it stopped.
  EXPECT_EQ(replay(budgeted, data, shape, 5).best_after, (std::vector<double>{12.5, 8.25}));

  Scripted stopping(order);
  EXPECT_EQ(replay(stopping, data, shape, 100, 15.0).best_after.size(), 3u);

  Scripted outside({config("ALGORITHM=tiled,THREADS=128,ITEMS=4,VECTOR=false")});
  EXPECT_THROW(replay(outside, data, shape, 10), InputError);
}

// ---- what a fixture states, and how it is read ---------------------------------

TEST(ReplayData, WhereLinesBeforeTheHeaderStateTheRestriction) {
  const ReplayData data = ReplayData::parse("# recorded with only plain and tiled configs\n"
                                            "# where: ALGORITHM != unrolled\n"
                                            "#   where: not a directive (indented)\n"
                                            "# where:   THREADS <= 64  \n" +
                                                header + s1 + "," + c_plain + ",ok,12.5,12\n" +
                                                "# where: after the header, a comment\n",
                                            "w.csv", small_space());
  EXPECT_EQ(data.restriction(), (std::vector<std::string>{"ALGORITHM != unrolled", "THREADS <= 64"}));
  // What replays search: the space restricted so.
  const SearchSpace restricted = small_space().restrict(data.restriction());
  const Shape shape = small_space().parse_shape("N=64,M=3");
  EXPECT_LT(restricted.count(shape), small_space().count(shape));
  EXPECT_TRUE(small_data().restriction().empty());
}

TEST(ReplayData, ABadWhereLineNamesItsLine) {
  auto e = input_error([] {
    ReplayData::parse("# fine\n# where: THREADS <=\n" + header, "w.csv", small_space());
  });
  EXPECT_EQ(e.where().file, "w.csv");
  EXPECT_EQ(e.where().line, 2);
  e = input_error([] { ReplayData::parse("# where: NO_SUCH_PARAMETER == 1\n" + header, "w.csv", small_space()); });
  EXPECT_EQ(e.where().line, 1);
  EXPECT_NE(e.message().find("NO_SUCH_PARAMETER"), std::string::npos) << e.message();
  e = input_error([] { ReplayData::parse("# where:\n" + header, "w.csv", small_space()); });
  EXPECT_NE(e.message().find("without a constraint"), std::string::npos) << e.message();
}

TEST(ReplayData, TheRecordedH200SweepsStateTheirRestriction) {
  const SearchSpace space = SearchSpace::load(tests_dir.parent_path() / "search_spaces" / "fused_mla_attention.yaml");
  const ReplayData data = ReplayData::load(tests_dir / "data" / "h200_sweeps.csv", space);
  EXPECT_EQ(data.restriction(), std::vector<std::string>{kH200SweepsWhere});
}

TEST(ReplayData, AGzipFileReadsAsItsText) {
  const fs::path gzip = "/usr/bin/gzip";
  if (!fs::exists(gzip)) GTEST_SKIP() << "no " << gzip << " to compress a fixture with";
  const fs::path dir = fs::temp_directory_path() / ("mlatune_replay_gz_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string text = "# where: THREADS <= 64\n" + header + s1 + "," + c_plain + ",ok,12.5,12\n" + s1 + "," +
                           c_tiled + ",ok,8.25,8\n";
  {
    std::ofstream out(dir / "small.csv", std::ios::binary);
    out << text;
  }
  const auto result = test_support::run_program(gzip, {"-kf", (dir / "small.csv").string()}, dir);
  ASSERT_EQ(result.code, 0) << result.err;
  ASSERT_TRUE(fs::exists(dir / "small.csv.gz"));
  const ReplayData plain = ReplayData::load(dir / "small.csv", small_space());
  const ReplayData packed = ReplayData::load(dir / "small.csv.gz", small_space());
  const Shape shape = small_space().parse_shape("N=64,M=3");
  EXPECT_EQ(packed.size(shape), 2u);
  EXPECT_EQ(packed.optimum(shape), plain.optimum(shape));
  EXPECT_EQ(packed.best_config(shape), small_space().parse_config("ALGORITHM=tiled,THREADS=64,ITEMS=2,VECTOR=false"));
  EXPECT_EQ(packed.restriction(), plain.restriction());
  // A file named .gz that is not gzip is an error of that file.
  {
    std::ofstream out(dir / "fake.csv.gz", std::ios::binary);
    out << "\x1f\x8b\x08 not really";
  }
  EXPECT_THROW(ReplayData::load(dir / "fake.csv.gz", small_space()), InputError);
  EXPECT_THROW(ReplayData::load(dir / "missing.csv.gz", small_space()), EnvironmentError);
  fs::remove_all(dir);
}

TEST(Replay, SkipsUnrecordedConfigsWhenAskedWithoutCountingOrTellingThem) {
  const ReplayData data = small_data();
  const Shape shape = small_space().parse_shape("N=64,M=3");
  auto config = [](const char* text) { return small_space().parse_config(text); };
  Scripted strategy({config("ALGORITHM=tiled,THREADS=128,ITEMS=4,VECTOR=false"),  // not recorded
                     config("ALGORITHM=plain,THREADS=32,ITEMS=1,VECTOR=false")});
  const auto trace = replay(strategy, data, shape, 10, std::nullopt, Unrecorded::skip);
  EXPECT_EQ(trace.best_after, std::vector<double>{12.5});
  ASSERT_EQ(strategy.told.size(), 1u);
  EXPECT_EQ(strategy.told[0].first, config("ALGORITHM=plain,THREADS=32,ITEMS=1,VECTOR=false"));
}

// Counts the proposals made before each result comes back.
class Eager final : public Strategy {
 public:
  explicit Eager(std::vector<Config> order) : order_(std::move(order)) {}
  std::optional<Config> next() override {
    if (position_ == order_.size()) return std::nullopt;
    return order_[position_++];
  }
  void observe(const Config&, std::optional<double>) override { proposed_when_told.push_back(position_); }
  std::vector<std::size_t> proposed_when_told;

 private:
  std::vector<Config> order_;
  std::size_t position_ = 0;
};

TEST(Replay, ALookaheadProposesAheadOfTheResultsAndDropsWhatIsInFlight) {
  const ReplayData data = small_data();
  const Shape shape = small_space().parse_shape("N=64,M=3");
  auto config = [](const char* text) { return small_space().parse_config(text); };
  const std::vector<Config> order = {
      config("ALGORITHM=unrolled,THREADS=32,ITEMS=2,VECTOR=false"), config("ALGORITHM=plain,THREADS=32,ITEMS=1,VECTOR=true"),
      config("ALGORITHM=plain,THREADS=32,ITEMS=1,VECTOR=false"), config("ALGORITHM=tiled,THREADS=64,ITEMS=2,VECTOR=false")};
  Eager ahead(order);
  const auto trace = replay(ahead, data, shape, 2, std::nullopt, Unrecorded::error, 3);
  EXPECT_EQ(trace.best_after.size(), 2u);
  // Three proposed before the first result; the fourth before the second.
  EXPECT_EQ(ahead.proposed_when_told, (std::vector<std::size_t>{3, 4}));
  Eager one_by_one(order);
  replay(one_by_one, data, shape, 4);
  EXPECT_EQ(one_by_one.proposed_when_told, (std::vector<std::size_t>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace mlatune

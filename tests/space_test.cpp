// SearchSpace: reading a file, text forms of shapes and configs, evaluation of
// geometry, definitions and arguments, versions, thread safety, and the corpus
// of malformed files with the exact location of each error.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "core/error.h"
#include "core/hash.h"
#include "core/space.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;
const fs::path spaces_dir = fs::path(MLATUNE_TEST_DATA_DIR) / "spaces";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

SearchSpace small_space() { return SearchSpace::load(spaces_dir / "small.yaml"); }

// small.yaml with `from` replaced by `to` (which must occur once).
SearchSpace small_with(const std::string& from, const std::string& to) {
  std::string text = read_file(spaces_dir / "small.yaml");
  auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  EXPECT_EQ(text.find(from, at + 1), std::string::npos) << from;
  text.replace(at, from.size(), to);
  return SearchSpace::parse(text, "edited.yaml", spaces_dir);
}

std::vector<std::string> names_of(const std::vector<Parameter>& parameters) {
  std::vector<std::string> out;
  for (const Parameter& p : parameters) out.push_back(p.name);
  return out;
}

TEST(SearchSpace, ReadsEveryPartOfTheFile) {
  SearchSpace s = small_space();
  EXPECT_EQ(s.kernel_name(), "tiny");
  EXPECT_EQ(s.file_name(), (spaces_dir / "small.yaml").string());
  EXPECT_EQ(s.text(), read_file(spaces_dir / "small.yaml"));
  EXPECT_EQ(s.kernel().entry, "tiny");
  EXPECT_EQ(s.kernel().path, (spaces_dir / "tiny.cu").lexically_normal());
  EXPECT_EQ(s.reference().entry, "tiny_reference");
  EXPECT_EQ(s.reference().path, (spaces_dir / "tiny_reference.cu").lexically_normal());
  EXPECT_EQ(s.reference().grid[0].text(), "ceil(N / 128)");
  EXPECT_EQ(s.reference().shared_bytes.text(), "0");  // absent: defaults to 0

  EXPECT_EQ(s.shape_variables(), (std::vector<std::string>{"N", "M"}));
  EXPECT_EQ(s.compiled_shape_variables(), (std::vector<std::string>{"M"}));
  EXPECT_EQ(s.default_shapes(), (std::vector<Shape>{{{1000, 16}}, {{64, 3}}}));

  ASSERT_EQ(names_of(s.parameters()),
            (std::vector<std::string>{"ALGORITHM", "THREADS", "ITEMS", "VECTOR"}));
  const Parameter& algorithm = s.parameters()[0];
  EXPECT_EQ(algorithm.kind, ValueKind::name);
  EXPECT_EQ(algorithm.text, (std::vector<std::string>{"plain", "tiled", "unrolled"}));
  EXPECT_EQ(algorithm.numeric, (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(algorithm.where.line, 27);
  EXPECT_EQ(algorithm.where.column, 3);
  EXPECT_EQ(s.parameters()[1].kind, ValueKind::integer);
  EXPECT_EQ(s.parameters()[1].numeric, (std::vector<std::int64_t>{32, 64, 128, 256}));
  EXPECT_EQ(s.parameters()[3].kind, ValueKind::boolean);
  EXPECT_EQ(s.parameters()[3].numeric, (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(s.parameters()[3].text, (std::vector<std::string>{"false", "true"}));

  ASSERT_EQ(s.arguments().size(), 4u);
  EXPECT_EQ(s.arguments()[0].name, "x");
  EXPECT_EQ(s.arguments()[0].role, ArgumentRole::input);
  EXPECT_EQ(s.arguments()[0].type, ElementType::float32);
  ASSERT_EQ(s.arguments()[0].shape.size(), 2u);
  EXPECT_EQ(s.arguments()[0].shape[1].text(), "M");
  EXPECT_EQ(s.arguments()[1].role, ArgumentRole::output);
  EXPECT_EQ(s.arguments()[2].role, ArgumentRole::scalar);
  EXPECT_EQ(s.arguments()[2].type, ElementType::int32);
  ASSERT_TRUE(s.arguments()[3].value.has_value());
  EXPECT_EQ(s.arguments()[3].value->text(), "1 / sqrt(M)");
  EXPECT_EQ(s.arguments()[3].value->variables(), (std::vector<std::string>{"M"}));

  ASSERT_EQ(s.constraints().size(), 3u);
  EXPECT_EQ(s.constraints()[2].text(), "ALGORITHM != unrolled || ITEMS >= 2");
  EXPECT_EQ(s.constraints()[2].where().line, 46);
  EXPECT_EQ(s.constraints()[2].where().column, 5);
  EXPECT_EQ(s.constraints()[0].variables(), (std::vector<std::string>{"THREADS", "ITEMS"}));

  EXPECT_DOUBLE_EQ(s.tolerance().relative_l2, 1e-6);
  ASSERT_TRUE(s.tolerance().max_abs.has_value());
  EXPECT_DOUBLE_EQ(*s.tolerance().max_abs, 1e-4);
  EXPECT_EQ(s.config_string(s.default_config()),
            "ALGORITHM=plain,THREADS=128,ITEMS=1,VECTOR=false");

  EXPECT_EQ(s.template_text(), read_file(spaces_dir / "tiny.cu"));
  EXPECT_EQ(s.reference_text(), read_file(spaces_dir / "tiny_reference.cu"));
  EXPECT_EQ(s.template_hash(), content_hash(read_file(spaces_dir / "tiny.cu")));
}

TEST(SearchSpace, ToleranceDefaultsWhenAbsent) {
  SearchSpace s = small_with("tolerance:\n  relative_l2: 1e-6\n  max_abs: 1e-4\n", "");
  EXPECT_DOUBLE_EQ(s.tolerance().relative_l2, 1e-5);
  EXPECT_FALSE(s.tolerance().max_abs.has_value());
}

TEST(SearchSpace, ShapeTextRoundTripsAndRejectsBadShapes) {
  SearchSpace s = small_space();
  Shape shape = s.parse_shape("M=16,N=1000");
  EXPECT_EQ(shape, (Shape{{1000, 16}}));
  EXPECT_EQ(s.shape_string(shape), "N=1000,M=16");
  EXPECT_EQ(s.parse_shape(s.shape_string(shape)), shape);
  auto fails_with = [&](const char* text, const char* fragment) {
    try {
      s.parse_shape(text);
      ADD_FAILURE() << text << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      // The text comes from a command line or a database, not the space file.
      EXPECT_EQ(e.where().file, "");
      EXPECT_EQ(e.where().line, 0);
    }
  };
  fails_with("N=1000", "lacks variable 'M'");
  fails_with("N=1000,M=0", "M=0 is not a positive integer");
  fails_with("N=1000,M=x", "is not a positive integer");
  fails_with("N=1000,M=16,K=2", "unknown shape variable 'K'");
  fails_with("N=1,N=2,M=3", "'N' is given twice");
  fails_with("N=1000;M=16", "is not a positive integer");
  fails_with("N1000,M=16", "is not NAME=VALUE");
  fails_with("", "empty shape; expected NAME=VALUE for each of N, M");
  fails_with("  ", "empty shape");
}

TEST(SearchSpace, ConfigTextRoundTripsForEveryConfig) {
  SearchSpace s = small_space();
  int visited = 0;
  s.for_each_valid(s.default_shapes()[0], [&](const Config& c) {
    EXPECT_EQ(s.parse_config(s.config_string(c)), c);
    ++visited;
    return true;
  });
  EXPECT_EQ(visited, 70);
  Config c = s.parse_config("VECTOR=true,ITEMS=4,THREADS=64,ALGORITHM=unrolled");
  EXPECT_EQ(c.choice, (std::vector<std::uint32_t>{2, 1, 2, 1}));
  EXPECT_EQ(s.config_string(c), "ALGORITHM=unrolled,THREADS=64,ITEMS=4,VECTOR=true");
  try {
    s.parse_config("ALGORITHM=plain,THREADS=48,ITEMS=4,VECTOR=true");
    ADD_FAILURE() << "THREADS=48 accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where().line, 28);  // the THREADS parameter
    EXPECT_NE(e.message().find("THREADS=48 is not one of its values"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(s.parse_config("ALGORITHM=plain,THREADS=64,ITEMS=4"), InputError);  // missing
  EXPECT_THROW(s.parse_config("ALGORITHM=fast,THREADS=64,ITEMS=4,VECTOR=true"),
               InputError);  // value
  EXPECT_THROW(s.parse_config("ALGORITHM=plain,THREADS=64,ITEMS=4,VECTOR=true,X=1"), InputError);
  EXPECT_THROW(s.config_string(Config{{0, 9, 0, 0}}), InputError);  // choice out of range
}

TEST(SearchSpace, GeometryEvaluatesTheLaunchExpressions) {
  SearchSpace s = small_space();
  Shape shape = s.parse_shape("N=1000,M=16");
  LaunchGeometry g =
      s.geometry(s.parse_config("ALGORITHM=tiled,THREADS=64,ITEMS=2,VECTOR=true"), shape);
  EXPECT_TRUE(g.valid()) << g.invalid_reason;
  EXPECT_EQ(g.grid[0], 8);  // ceil(1000 / 128)
  EXPECT_EQ(g.grid[1], 1);
  EXPECT_EQ(g.block[0], 64);
  EXPECT_EQ(g.shared_bytes, 256);  // the named value `tiled` as a constant
  g = s.geometry(s.parse_config("ALGORITHM=plain,THREADS=256,ITEMS=1,VECTOR=true"), shape);
  EXPECT_EQ(g.grid[0], 4);
  EXPECT_EQ(g.shared_bytes, 0);
  LaunchGeometry r = s.reference_geometry(shape);
  EXPECT_TRUE(r.valid());
  EXPECT_EQ(r.grid[0], 8);
  EXPECT_EQ(r.block[0], 128);
  EXPECT_EQ(r.shared_bytes, 0);
}

TEST(SearchSpace, NonIntegerGridIsAnInvalidGeometryValueNotAnError) {
  SearchSpace s =
      // Valid for the default config (THREADS=128), as a space must be.
      small_with("grid: [ceil(N / (THREADS * ITEMS)), 1, 1]",
                 "grid: [\"THREADS == 128 ? 8 : N / THREADS\", 1, 1]");
  Config c = s.parse_config("ALGORITHM=plain,THREADS=64,ITEMS=1,VECTOR=false");
  LaunchGeometry g = s.geometry(c, s.parse_shape("N=1000,M=16"));
  EXPECT_FALSE(g.valid());
  EXPECT_EQ(g.grid[0], 0);
  EXPECT_NE(g.invalid_reason.find("grid.x = 15.625"), std::string::npos) << g.invalid_reason;
  EXPECT_TRUE(s.geometry(c, s.parse_shape("N=1024,M=16")).valid());

  SearchSpace zero = small_with("block: [THREADS, 1, 1]", "block: [THREADS - 32, 1, 1]");
  g = zero.geometry(zero.parse_config("ALGORITHM=plain,THREADS=32,ITEMS=1,VECTOR=false"),
                    zero.parse_shape("N=1000,M=16"));
  EXPECT_FALSE(g.valid());
  EXPECT_NE(g.invalid_reason.find("block.x = 0"), std::string::npos) << g.invalid_reason;
}

TEST(SearchSpace, DefinitionsListParametersNamedValuesAndCompiledShape) {
  SearchSpace s = small_space();
  Shape shape = s.parse_shape("N=1000,M=16");
  Config c = s.parse_config("ALGORITHM=tiled,THREADS=64,ITEMS=2,VECTOR=true");
  using Defs = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(s.definitions(c, shape), (Defs{{"ALGORITHM", "1"},
                                           {"ALGORITHM_plain", "0"},
                                           {"ALGORITHM_tiled", "1"},
                                           {"ALGORITHM_unrolled", "2"},
                                           {"ITEMS", "2"},
                                           {"SHAPE_M", "16"},
                                           {"THREADS", "64"},
                                           {"VECTOR", "1"}}));
  EXPECT_EQ(s.reference_definitions(shape), (Defs{{"SHAPE_M", "16"}}));
  // N is not compiled in: another N gives the same definitions.
  EXPECT_EQ(s.definitions(c, s.parse_shape("N=7,M=16")), s.definitions(c, shape));
}

TEST(SearchSpace, BindArgumentsEvaluatesShapesAndScalars) {
  SearchSpace s = small_space();
  std::vector<BoundArgument> bound = s.bind_arguments(s.parse_shape("N=1000,M=16"));
  ASSERT_EQ(bound.size(), 4u);
  for (std::size_t i = 0; i < bound.size(); ++i) EXPECT_EQ(bound[i].argument, &s.arguments()[i]);
  EXPECT_EQ(bound[0].extents, (std::vector<std::int64_t>{1000, 16}));
  EXPECT_EQ(bound[0].element_count, 16000);
  EXPECT_EQ(bound[1].extents, (std::vector<std::int64_t>{1000}));
  EXPECT_DOUBLE_EQ(bound[2].scalar, 1000.0);
  EXPECT_DOUBLE_EQ(bound[3].scalar, 0.25);
  EXPECT_EQ(element_size(ElementType::float64), 8u);
  EXPECT_EQ(element_type_name(ElementType::int32), "int32");
}

TEST(SearchSpace, BindArgumentsRejectsAFractionalExtent) {
  SearchSpace s = small_with("shape: [N]}", "shape: [N / 2]}");
  EXPECT_EQ(s.bind_arguments(s.parse_shape("N=1000,M=16"))[1].extents[0], 500);
  try {
    s.bind_arguments(s.parse_shape("N=7,M=16"));
    ADD_FAILURE() << "N/2 with N=7 was accepted as an extent";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where().line, 22);  // y's shape in small.yaml
    EXPECT_NE(e.message().find("expected a non-negative integer"), std::string::npos) << e.what();
  }
}

TEST(SearchSpace, CheckNamesTheFailingConstraint) {
  SearchSpace s = small_space();
  Shape shape = s.parse_shape("N=1000,M=3");
  EXPECT_TRUE(s.check(s.parse_config("ALGORITHM=plain,THREADS=32,ITEMS=1,VECTOR=false"), shape));
  Validity v = s.check(s.parse_config("ALGORITHM=unrolled,THREADS=32,ITEMS=1,VECTOR=false"), shape);
  EXPECT_FALSE(v);
  EXPECT_EQ(v.failed_constraint, "ALGORITHM != unrolled || ITEMS >= 2");
  EXPECT_EQ(v.where.line, 46);
  v = s.check(s.parse_config("ALGORITHM=plain,THREADS=256,ITEMS=4,VECTOR=false"), shape);
  EXPECT_EQ(v.failed_constraint, "THREADS * ITEMS <= 512");
  v = s.check(s.parse_config("ALGORITHM=plain,THREADS=32,ITEMS=1,VECTOR=true"), shape);
  EXPECT_EQ(v.failed_constraint, "VECTOR == 0 || M % 4 == 0");
  EXPECT_TRUE(s.check(s.parse_config("ALGORITHM=plain,THREADS=32,ITEMS=1,VECTOR=true"),
                      s.parse_shape("N=1000,M=8")));
}

TEST(SearchSpace, EvaluatesItsOwnExpressionsOnly) {
  SearchSpace s = small_space();
  Shape shape = s.parse_shape("N=1000,M=16");
  Config c = s.parse_config("ALGORITHM=plain,THREADS=256,ITEMS=4,VECTOR=false");
  EXPECT_EQ(s.evaluate(s.constraints()[0], &c, shape), 0.0);  // 1024 <= 512 is false
  EXPECT_DOUBLE_EQ(s.evaluate(*s.arguments()[3].value, nullptr, shape), 0.25);
  EXPECT_THROW(s.evaluate(s.constraints()[0], nullptr, shape), InputError);  // needs a config
  SearchSpace copy = s;
  EXPECT_EQ(copy.evaluate(copy.constraints()[0], &c, shape), 0.0);
  EXPECT_THROW(copy.evaluate(s.constraints()[0], &c, shape), std::invalid_argument);
  EXPECT_THROW(s.evaluate(Expression(), nullptr, shape), std::invalid_argument);
}

TEST(SearchSpace, CopiesAndMovesKeepWorking) {
  auto original = std::make_unique<SearchSpace>(small_space());
  SearchSpace copy = *original;
  Shape shape = copy.default_shapes()[0];
  Config c = copy.default_config();
  LaunchGeometry before = original->geometry(c, shape);
  original.reset();
  EXPECT_EQ(copy.count(shape), 70u);
  EXPECT_EQ(copy.geometry(c, shape).grid[0], before.grid[0]);
  SearchSpace moved = std::move(copy);
  EXPECT_EQ(moved.count(shape), 70u);
  EXPECT_EQ(moved.check(c, shape).valid, true);
}

TEST(SearchSpace, DefinitionHashIgnoresCommentsLayoutAndDefaultShapes) {
  const std::string text = read_file(spaces_dir / "small.yaml");
  auto hash_of = [](const std::string& t) {
    return SearchSpace::parse(t, "h.yaml", spaces_dir).definition_hash();
  };
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  const std::string base = hash_of(text);
  EXPECT_EQ(base.size(), 32u);
  EXPECT_EQ(hash_of("# another comment\n\n" + text), base);
  EXPECT_EQ(hash_of(edited("{N: 1000, M: 16}", "{N: 4096, M: 16}")), base);
  EXPECT_EQ(hash_of(edited("THREADS * ITEMS <= 512", "THREADS*ITEMS<=512")), base);
  EXPECT_EQ(hash_of(edited("  THREADS: [32, 64, 128, 256]",
                           "  THREADS:\n    - 32\n    - 64\n    - 128\n    - 256")),
            base);
  EXPECT_NE(hash_of(edited("[32, 64, 128, 256]", "[32, 64, 128, 256, 512]")), base);
  EXPECT_NE(hash_of(edited("THREADS * ITEMS <= 512", "THREADS * ITEMS <= 256")), base);
  EXPECT_NE(hash_of(edited("relative_l2: 1e-6", "relative_l2: 1e-5")), base);
  EXPECT_NE(hash_of(edited("block: [THREADS, 1, 1]", "block: [THREADS, 2, 1]")), base);
  EXPECT_NE(hash_of(edited("compiled: [M]", "compiled: [N, M]")), base);
  EXPECT_NE(hash_of(edited("{name: n,     type: int32", "{name: n,     type: int64")), base);
}

TEST(SearchSpace, ConstMethodsAreSafeFromManyThreads) {
  const SearchSpace s = small_space();
  const Shape shape = s.default_shapes()[0];
  std::vector<Config> valid;
  s.for_each_valid(shape, [&](const Config& c) {
    valid.push_back(c);
    return true;
  });
  std::vector<LaunchGeometry> expected;
  for (const Config& c : valid) expected.push_back(s.geometry(c, shape));
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int round = 0; round < 20; ++round) {
        if (s.count(Shape{{1000 + round, 16}}) != 70u) ++mismatches;
        for (std::size_t i = 0; i < valid.size(); ++i) {
          if (!s.check(valid[i], shape)) ++mismatches;
          LaunchGeometry g = s.geometry(valid[i], shape);
          if (g.grid[0] != expected[i].grid[0] || g.block[0] != expected[i].block[0] ||
              g.shared_bytes != expected[i].shared_bytes)
            ++mismatches;
        }
        auto sampled = s.sample(shape, rng);
        if (!sampled || !s.check(*sampled, shape)) ++mismatches;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// ---- prologue and workspace -------------------------------------------------------

SearchSpace prologue_space() { return SearchSpace::load(spaces_dir / "prologue.yaml"); }

// prologue.yaml with `from` replaced by `to` (which must occur once).
SearchSpace prologue_with(const std::string& from, const std::string& to) {
  std::string text = read_file(spaces_dir / "prologue.yaml");
  auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  return SearchSpace::parse(text, "edited.yaml", spaces_dir);
}

TEST(SearchSpacePrologue, ReadsThePrologueAndTheWorkspaceArgument) {
  SearchSpace s = prologue_space();
  ASSERT_TRUE(s.prologue().has_value());
  EXPECT_EQ(s.prologue()->kernel.entry, "double_into");
  EXPECT_EQ(s.prologue()->kernel.path, s.kernel().path);  // the same template, the same cubin
  ASSERT_TRUE(s.prologue()->when.has_value());
  EXPECT_EQ(s.prologue()->when->text(), "EXPAND");
  ASSERT_EQ(s.arguments().size(), 4u);
  EXPECT_EQ(s.arguments()[2].role, ArgumentRole::workspace);
  EXPECT_EQ(s.arguments()[2].type, ElementType::float32);
  std::vector<BoundArgument> bound = s.bind_arguments(s.parse_shape("N=1000"));
  EXPECT_EQ(bound[2].element_count, 1000);
  EXPECT_FALSE(small_space().prologue().has_value());
}

TEST(SearchSpacePrologue, WhenDecidesWhetherThePrologueRunsAndWithWhichGeometry) {
  SearchSpace s = prologue_space();
  Shape shape = s.parse_shape("N=1000");
  Config expand = s.parse_config("EXPAND=true,THREADS=256,PROLOGUE_THREADS=128");
  Config direct = s.parse_config("EXPAND=false,THREADS=256,PROLOGUE_THREADS=128");
  EXPECT_TRUE(s.prologue_runs(expand, shape));
  EXPECT_FALSE(s.prologue_runs(direct, shape));
  EXPECT_FALSE(s.prologue_geometry(direct, shape).has_value());
  std::optional<LaunchGeometry> g = s.prologue_geometry(expand, shape);
  ASSERT_TRUE(g.has_value());
  EXPECT_TRUE(g->valid()) << g->invalid_reason;
  EXPECT_EQ(g->grid[0], 8);  // ceil(1000 / 128)
  EXPECT_EQ(g->block[0], 128);
  EXPECT_EQ(g->shared_bytes, 0);
  EXPECT_EQ(s.geometry(expand, shape).grid[0], 4);  // the main launch is its own

  // `when` may read shape variables: the prologue runs only from N = 512 on.
  SearchSpace by_shape = prologue_with("when: EXPAND", "when: EXPAND && N >= 512");
  EXPECT_TRUE(by_shape.prologue_runs(expand, by_shape.parse_shape("N=512")));
  EXPECT_FALSE(by_shape.prologue_runs(expand, by_shape.parse_shape("N=511")));
  // Without `when` it always runs.
  SearchSpace always = prologue_with("  when: EXPAND\n", "");
  EXPECT_FALSE(always.prologue()->when.has_value());
  EXPECT_TRUE(always.prologue_runs(direct, shape));
}

TEST(SearchSpacePrologue, AnInvalidPrologueGeometryMakesTheConfigUnableToRun) {
  SearchSpace s = prologue_space();
  Shape shape = s.parse_shape("N=1000");
  // PROLOGUE_THREADS = 2048 is above CUDA's limit of 1024 threads a block
  // (the space also gives the prologue shared_memory -1 there).
  LaunchGeometry g = s.geometry(s.parse_config("EXPAND=true,THREADS=64,PROLOGUE_THREADS=2048"), shape);
  EXPECT_FALSE(g.valid());
  EXPECT_EQ(g.invalid_reason.rfind("prologue block.x = 2048 is above the CUDA limit of 1024", 0), 0u)
      << g.invalid_reason;
  // Where the prologue does not run, its geometry does not matter.
  EXPECT_TRUE(s.geometry(s.parse_config("EXPAND=false,THREADS=64,PROLOGUE_THREADS=2048"), shape).valid());
}

TEST(SearchSpacePrologue, DefinitionHashFollowsThePrologueAndWorkspaceText) {
  const std::string base = prologue_space().definition_hash();
  EXPECT_EQ(prologue_with("when: EXPAND", "when:   EXPAND  ").definition_hash(), base);
  EXPECT_NE(prologue_with("when: EXPAND", "when: EXPAND && N > 1").definition_hash(), base);
  EXPECT_NE(prologue_with("  when: EXPAND\n", "").definition_hash(), base);
  EXPECT_NE(prologue_with("entry: double_into", "entry: triple_into").definition_hash(), base);
  EXPECT_NE(prologue_with("block: [PROLOGUE_THREADS, 1, 1]", "block: [PROLOGUE_THREADS, 2, 1]")
                .definition_hash(),
            base);
  EXPECT_NE(prologue_with("role: workspace, shape: [N]", "role: workspace, shape: [2 * N]")
                .definition_hash(),
            base);
  EXPECT_NE(prologue_with("role: workspace", "role: input").definition_hash(), base);
  // Default shapes stay out of it, as for every space.
  EXPECT_EQ(prologue_with("{N: 1000}", "{N: 4096}").definition_hash(), base);
}

// ---- malformed files ------------------------------------------------------------

TEST(SearchSpaceErrors, EveryMalformedFileFailsAtItsExpectedLocation) {
  const std::regex expect_line(R"(# expect: (\d+):(\d+): (.*))");
  int files = 0;
  std::vector<fs::path> paths;
  for (const auto& entry : fs::directory_iterator(spaces_dir / "bad"))
    paths.push_back(entry.path());
  std::sort(paths.begin(), paths.end());
  for (const fs::path& path : paths) {
    SCOPED_TRACE(path.filename().string());
    std::string text = read_file(path);
    std::smatch m;
    std::string first_line = text.substr(0, text.find('\n'));
    ASSERT_TRUE(std::regex_match(first_line, m, expect_line)) << "no '# expect:' line";
    const int line = std::stoi(m[1]), column = std::stoi(m[2]);
    const std::string fragment = m[3];
    try {
      SearchSpace::load(path);
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      EXPECT_EQ(e.where().file, path.string());
      EXPECT_EQ(e.where().line, line) << e.what();
      EXPECT_EQ(e.where().column, column) << e.what();
      EXPECT_NE(e.message().find(fragment), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind(
                    path.string() + ":" + std::to_string(line) + ":" + std::to_string(column), 0),
                0u)
          << e.what();
    }
    ++files;
  }
  EXPECT_GE(files, 25);
}

// yaml-cpp's Load keeps the first document only: whatever followed a stray
// marker used to vanish without a word.
TEST(SearchSpaceErrors, OnlyOneYamlDocumentIsAccepted) {
  const std::string text = read_file(spaces_dir / "small.yaml");
  EXPECT_NO_THROW(SearchSpace::parse("---\n" + text, "start.yaml", spaces_dir));
  EXPECT_NO_THROW(SearchSpace::parse("%YAML 1.2\n---\n" + text, "directive.yaml", spaces_dir));
  EXPECT_NO_THROW(SearchSpace::parse(text + "...\n", "ended.yaml", spaces_dir));
  const int lines = static_cast<int>(std::count(text.begin(), text.end(), '\n'));
  auto line_of_error = [&](const std::string& edited) {
    try {
      SearchSpace::parse(edited, "two.yaml", spaces_dir);
    } catch (const InputError& e) {
      EXPECT_NE(e.message().find("second YAML document"), std::string::npos) << e.what();
      return e.where().line;
    }
    ADD_FAILURE() << "accepted";
    return 0;
  };
  EXPECT_EQ(line_of_error(text + "---\n"), lines + 1);
  EXPECT_EQ(line_of_error("---\n" + text + "--- # again\nkernel: other\n"), lines + 2);
  EXPECT_EQ(line_of_error(text + "...\n# note\nkernel: other\n"), lines + 3);
}

// The dispatcher falls back to the first valid config where the default is
// invalid, so a default invalid at some default shapes is fine; invalid at
// all of them, or by a constraint that reads no shape, it could never run.
TEST(SearchSpaceErrors, TheDefaultConfigMustRunAtSomeDefaultShape) {
  // VECTOR needs M % 4 == 0: true at M=16, false at M=3.
  EXPECT_NO_THROW(small_with("VECTOR: false}", "VECTOR: true}"));
  try {
    SearchSpace::parse(
        [] {
          std::string t = read_file(spaces_dir / "small.yaml");
          t.replace(t.find("{N: 1000, M: 16}"), 16, "{N: 1000, M: 15}");
          t.replace(t.find("VECTOR: false}"), 14, "VECTOR: true}");
          return t;
        }(),
        "vector_default.yaml", spaces_dir);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where().line, 45) << e.what();
    EXPECT_NE(e.message().find("breaks constraint 'VECTOR == 0 || M % 4 == 0' at default shape "
                               "N=1000,M=15"),
              std::string::npos)
        << e.what();
    EXPECT_NE(e.message().find("(and at every other default shape)"), std::string::npos) << e.what();
  }
}

TEST(SearchSpaceErrors, MissingFileIsAnInputError) {
  EXPECT_THROW(SearchSpace::load(spaces_dir / "no_such_space.yaml"), InputError);
  EXPECT_THROW(SearchSpace::load(spaces_dir / "bad"), InputError);  // a directory
}

TEST(SearchSpaceErrors, ParseNamesTheGivenFileName) {
  try {
    SearchSpace::parse("kernel: [a\n", "virtual.yaml", spaces_dir);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where().file, "virtual.yaml");
    EXPECT_GT(e.where().line, 0);
  }
}

TEST(SearchSpaceErrors, ArbitraryBytesNeverCrash) {
  // Mutations of a valid file: every outcome is a space or an InputError.
  const std::string text = read_file(spaces_dir / "small.yaml");
  std::mt19937_64 rng(7);
  const std::string alphabet = "[]{}:,-#'\"\n ?!&|*%()0aZ_\t\\";
  int accepted = 0, rejected = 0;
  for (int i = 0; i < 400; ++i) {
    std::string t = text;
    for (int k = 0; k < 3; ++k) {
      std::size_t at = rng() % t.size();
      t[at] = alphabet[rng() % alphabet.size()];
    }
    try {
      SearchSpace::parse(t, "fuzz.yaml", spaces_dir);
      ++accepted;
    } catch (const InputError& e) {
      EXPECT_EQ(e.where().file, "fuzz.yaml");
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_EQ(accepted + rejected, 400);
}

}  // namespace
}  // namespace mlatune

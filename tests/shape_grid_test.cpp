// The grid syntax of `tune --grid` and the shapes files of `tune
// --shapes-file` (core/shape_grid.h): what each form expands to, in which
// order, and that every mistake is named by its column or file:line.
#include "core/shape_grid.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

const SearchSpace& flagship() {
  static const SearchSpace space =
      SearchSpace::load(fs::path(MLATUNE_SOURCE_DIR) / "search_spaces" / "fused_mla_attention.yaml");
  return space;
}

std::vector<std::int64_t> values_of(std::string_view text, std::size_t axis = 0) {
  return parse_shape_grid(text).axes.at(axis).values;
}

std::vector<std::string> shape_texts(const std::vector<Shape>& shapes) {
  std::vector<std::string> texts;
  for (const Shape& s : shapes) texts.push_back(flagship().shape_string(s));
  return texts;
}

/// The message of the InputError `text` raises, or "" when it raises none.
std::string grid_error(std::string_view text) {
  try {
    grid_shapes(flagship(), text);
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

TEST(ShapeGrid, EachItemFormExpandsAsDocumented) {
  EXPECT_EQ(values_of("T=7"), (std::vector<std::int64_t>{7}));
  EXPECT_EQ(values_of("T=3|1|2"), (std::vector<std::int64_t>{3, 1, 2}));  // the order written
  EXPECT_EQ(values_of("T=64..4096:x2"), (std::vector<std::int64_t>{64, 128, 256, 512, 1024, 2048, 4096}));
  EXPECT_EQ(values_of("T=1..100:x10"), (std::vector<std::int64_t>{1, 10, 100}));
  EXPECT_EQ(values_of("T=2..50:x3"), (std::vector<std::int64_t>{2, 6, 18}));  // 50 is off the progression
  EXPECT_EQ(values_of("T=16..64:+16"), (std::vector<std::int64_t>{16, 32, 48, 64}));
  EXPECT_EQ(values_of("T=10..20:+7"), (std::vector<std::int64_t>{10, 17}));
  EXPECT_EQ(values_of("T=4..7"), (std::vector<std::int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(values_of("T=5..5:x2"), (std::vector<std::int64_t>{5}));
  // Items of a list may be ranges; a value given twice counts once.
  EXPECT_EQ(values_of("T=1|64..256:x2|128|1000"), (std::vector<std::int64_t>{1, 64, 128, 256, 1000}));
  // Blanks around tokens are ignored; ',' separates parts as ';' does.
  ShapeGrid grid = parse_shape_grid(" B = 2 ; T = 1 .. 4 : x 2 , H=3 ");
  ASSERT_EQ(grid.axes.size(), 3u);
  EXPECT_EQ(grid.axes[1].name, "T");
  EXPECT_EQ(grid.axes[1].values, (std::vector<std::int64_t>{1, 2, 4}));
  EXPECT_EQ(grid.axes[2].column, 29);
}

TEST(ShapeGrid, RangesNearTheIntegerLimitDoNotOverflow) {
  const std::int64_t big = INT64_MAX;
  EXPECT_EQ(values_of(fmt::format("T={}..{}:x2", big - 1, big)), (std::vector<std::int64_t>{big - 1}));
  EXPECT_EQ(values_of(fmt::format("T={}..{}:+5", big - 6, big)), (std::vector<std::int64_t>{big - 6, big - 1}));
}

TEST(ShapeGrid, TheGridIsTheProductInTheSpacesVariableOrder) {
  // Parts in any order; B, T, H, D, R is the space's order, B slowest.
  std::vector<Shape> shapes = grid_shapes(flagship(), "R=128; D=32|64; T=64..256:x2; H=16; B=2");
  EXPECT_EQ(shape_texts(shapes), (std::vector<std::string>{
                                     "B=2,T=64,H=16,D=32,R=128", "B=2,T=64,H=16,D=64,R=128",
                                     "B=2,T=128,H=16,D=32,R=128", "B=2,T=128,H=16,D=64,R=128",
                                     "B=2,T=256,H=16,D=32,R=128", "B=2,T=256,H=16,D=64,R=128"}));
  // The brief's example: 7 sequence lengths x 3 head sizes.
  EXPECT_EQ(grid_shapes(flagship(), "B=2;T=64..4096:x2;H=16;D=32|64|128;R=128").size(), 21u);
  // A plain shape is a grid of one.
  EXPECT_EQ(shape_texts(grid_shapes(flagship(), "B=2,T=32,H=4,D=16,R=24")),
            (std::vector<std::string>{"B=2,T=32,H=4,D=16,R=24"}));
}

TEST(ShapeGrid, SyntaxErrorsNameTheirColumn) {
  const std::string full = ";T=32;H=4;D=16;R=24";
  EXPECT_EQ(grid_error(""), "grid '': column 1: empty grid; expected NAME=VALUES for each shape variable");
  EXPECT_EQ(grid_error("B2" + full), "grid 'B2" + full + "': column 3: expected '=' after 'B2'");
  EXPECT_EQ(grid_error("B=" + full), "grid 'B=" + full + "': column 3: expected a value (a positive integer)");
  EXPECT_EQ(grid_error("B=0" + full), "grid 'B=0" + full + "': column 3: a value 0 is not a positive integer");
  EXPECT_EQ(grid_error("B=-2" + full),
            "grid 'B=-2" + full + "': column 3: a value -2 is not a positive integer");
  EXPECT_EQ(grid_error("B=2x" + full), "grid 'B=2x" + full + "': column 4: unexpected 'x'; expected ';' between parts");
  EXPECT_EQ(grid_error("B=2;=3"), "grid 'B=2;=3': column 5: expected a shape variable name");
  EXPECT_EQ(grid_error("B=8..2" + full),
            "grid 'B=8..2" + full + "': column 3: range 8..2 is empty (its end is below its start)");
  EXPECT_EQ(grid_error("B=2..8:x1" + full), "grid 'B=2..8:x1" + full + "': column 8: step 1 must be at least 2");
  EXPECT_EQ(grid_error("B=2..8:+0" + full),
            "grid 'B=2..8:+0" + full + "': column 9: a step 0 is not a positive integer");
  EXPECT_EQ(grid_error("B=2..8:*2" + full),
            "grid 'B=2..8:*2" + full + "': column 8: expected a step 'xK' (geometric) or '+K' (arithmetic) after ':'");
  EXPECT_EQ(grid_error("B=2..:x2" + full),
            "grid 'B=2..:x2" + full + "': column 6: expected the end of the range (a positive integer)");
  EXPECT_EQ(grid_error("B=99999999999999999999" + full),
            "grid 'B=99999999999999999999" + full + "': column 3: a value is too large");
  EXPECT_EQ(grid_error("B=2|" + full), "grid 'B=2|" + full + "': column 5: expected a value (a positive integer)");
}

TEST(ShapeGrid, VariablesAreCheckedAgainstTheSpace) {
  EXPECT_EQ(grid_error("B=2;T=32;Q=1;H=4;D=16;R=24"),
            "grid 'B=2;T=32;Q=1;H=4;D=16;R=24': column 10: unknown shape variable 'Q'; expected B, T, H, D, R");
  EXPECT_EQ(grid_error("B=2;T=32;H=4;T=64;D=16;R=24"),
            "grid 'B=2;T=32;H=4;T=64;D=16;R=24': column 14: 'T' is given twice");
  EXPECT_EQ(grid_error("B=2;T=32;H=4;D=16"),
            "grid 'B=2;T=32;H=4;D=16': column 18: lacks 'R'; every one of B, T, H, D, R needs a value");
  // A typo that would expand to millions of shapes is refused, at the part
  // that crossed the limit.
  EXPECT_EQ(grid_error("B=1..100;T=1..100;H=1..100;D=16;R=24"),
            fmt::format("grid 'B=1..100;T=1..100;H=1..100;D=16;R=24': column 19: the grid has more than {} shapes",
                        max_grid_shapes));
  EXPECT_EQ(grid_error("B=1..1000000;T=1;H=1;D=16;R=24"),
            fmt::format("grid 'B=1..1000000;T=1;H=1;D=16;R=24': column 3: 'B' takes more than {} values",
                        max_grid_shapes));
}

TEST(ShapesFile, OneShapePerLineWithCommentsAndBlankLines) {
  const std::string text =
      "# the decode shapes\n"
      "B=1,T=1,H=16,D=64,R=128\n"
      "\n"
      "   \t\n"
      "  B=4,T=256,H=8,D=32,R=64   # S1\n"
      "T=1,B=1,R=128,D=64,H=16\n"  // the first shape again, spelt otherwise
      "B=2,T=32,H=4,D=16,R=24";    // no final newline
  std::vector<Shape> shapes = parse_shapes_text(flagship(), text, "decode.txt");
  EXPECT_EQ(shape_texts(shapes), (std::vector<std::string>{"B=1,T=1,H=16,D=64,R=128", "B=4,T=256,H=8,D=32,R=64",
                                                           "B=2,T=32,H=4,D=16,R=24"}));
}

TEST(ShapesFile, ErrorsNameTheFileAndLine) {
  auto error = [](const std::string& text) -> std::string {
    try {
      parse_shapes_text(flagship(), text, "shapes.txt");
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error("B=1,T=1,H=16,D=64,R=128\n# fine\nB=1,T=1,H=16,D=64\n"),
            "shapes.txt:3: shape 'B=1,T=1,H=16,D=64' lacks variable 'R'; expected every one of B, T, H, D, R");
  EXPECT_EQ(error("\nB=1,T=0,H=16,D=64,R=128\n"), "shapes.txt:2: shape 'B=1,T=0,H=16,D=64,R=128': T=0 is not a positive integer");
  EXPECT_EQ(error("# nothing but comments\n\n"),
            "shapes.txt: no shape in the file; expected one per line, as B=N,T=N,H=N,D=N,R=N");

  const fs::path missing = fs::temp_directory_path() / "mlatune_no_such_shapes_file.txt";
  EXPECT_THROW(read_shapes_file(flagship(), missing), InputError);
  const fs::path file = fs::temp_directory_path() / ("mlatune_shapes_" + std::to_string(::getpid()) + ".txt");
  std::ofstream(file) << "B=2,T=32,H=4,D=16,R=24\nB=2,T=64,H=4,D=16,R=24\n";
  EXPECT_EQ(read_shapes_file(flagship(), file).size(), 2u);
  fs::remove(file);
}

}  // namespace
}  // namespace mlatune

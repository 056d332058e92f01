// Quoted includes of a template are inlined when it is read (see
// core/template_source.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "core/error.h"
#include "core/space.h"
#include "core/template_source.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("mlatune_template_source_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path / "sub"); }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path / name) << text; }
};

TEST(TemplateSource, QuotedIncludesAreInlinedOnceWithLineDirectives) {
  TempDir dir;
  dir.write("sub/b.cuh", "int b;\n");
  dir.write("a.cuh", "#include \"sub/b.cuh\"\nint a;\n");
  const std::string text = "#include <cstdio>\n  # include \"a.cuh\"  // why\n#include \"a.cuh\"\nint main;\n";
  const std::string out = inline_template_includes(text, dir.path / "k.cu");
  EXPECT_EQ(out,
            "#include <cstdio>\n"
            "#line 1 \"a.cuh\"\n"
            "#line 1 \"b.cuh\"\n"
            "int b;\n"
            "#line 2 \"a.cuh\"\n"
            "int a;\n"
            "#line 3 \"k.cu\"\n"
            "#line 4 \"k.cu\"\n"
            "int main;\n");
}

TEST(TemplateSource, TextWithoutIncludesIsUnchanged) {
  EXPECT_EQ(inline_template_includes("int x;", "/nonexistent/k.cu"), "int x;");
}

TEST(TemplateSource, AMissingIncludeNamesTheIncludingLine) {
  TempDir dir;
  try {
    inline_template_includes("int x;\n#include \"missing_header_of_this_test.cuh\"\n", dir.path / "k.cu");
    FAIL() << "expected InputError";
  } catch (const InputError& error) {
    EXPECT_EQ(error.where().line, 2);
    EXPECT_NE(std::string(error.what()).find("missing_header_of_this_test.cuh"), std::string::npos);
  }
}

// The flagship template's text holds its wgmma header (embedded or on disk).
TEST(TemplateSource, TheFlagshipTemplateCarriesItsWgmmaHeader) {
  const SearchSpace space =
      SearchSpace::load(fs::path(MLATUNE_SOURCE_DIR) / "search_spaces" / "fused_mla_attention.yaml");
  EXPECT_EQ(space.template_text().find("#include \"mla_wgmma.cuh\""), std::string::npos);
  EXPECT_NE(space.template_text().find("wgmma_attention("), std::string::npos);
}

}  // namespace
}  // namespace mlatune

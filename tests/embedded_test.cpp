#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/embedded.h"
#include "core/error.h"

namespace mlatune {
namespace {

TEST(Embedded, EveryTemplateAndSpaceIsEmbeddedByteForByte) {
  namespace fs = std::filesystem;
  int checked = 0;
  for (const char* dir : {"templates", "search_spaces"}) {
    for (const auto& entry : fs::directory_iterator(fs::path(MLATUNE_SOURCE_DIR) / dir)) {
      auto ext = entry.path().extension();
      if (ext != ".cu" && ext != ".yaml") continue;
      std::string rel = std::string(dir) + "/" + entry.path().filename().string();
      auto embedded = find_embedded(rel);
      ASSERT_TRUE(embedded.has_value()) << rel;
      std::ifstream in(entry.path(), std::ios::binary);
      std::string disk((std::istreambuf_iterator<char>(in)), {});
      EXPECT_EQ(*embedded, disk) << rel;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(Embedded, DiskFileWinsAndMissingFileFallsBackToEmbedded) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / "mlatune_embedded_test";
  fs::create_directories(dir / "templates");
  auto spaces = embedded_files();
  ASSERT_FALSE(spaces.empty());
  std::string name = fs::path(std::string(spaces.front().path)).filename().string();
  fs::path on_disk = dir / "templates" / name;
  fs::remove(on_disk);
  LoadedText fallback = load_text_file(on_disk);
  EXPECT_EQ(fallback.text, spaces.front().bytes);
  EXPECT_EQ(fallback.origin.rfind("embedded:", 0), 0u);
  {
    std::ofstream out(on_disk, std::ios::binary);
    out << "edited by the user";
  }
  LoadedText edited = load_text_file(on_disk);
  EXPECT_EQ(edited.text, "edited by the user");
  EXPECT_EQ(edited.origin, on_disk.string());
  fs::remove_all(dir);
}

TEST(Embedded, UnknownFileIsAnInputErrorNamingThePath) {
  try {
    load_text_file("/nonexistent/dir/no_such_template_xyz.cu");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_template_xyz.cu"), std::string::npos);
  }
}

}  // namespace
}  // namespace mlatune

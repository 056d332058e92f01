// libmlatune_c.so as a foreign caller (Python's ctypes) sees it: loaded with
// dlopen, it exports exactly the C ABI of cache/c_api.h and cache/mla_c_api.h
// (the MLA header includes the generic one) and no C++
// symbol that could clash with the loading process, and every failure,
// including the absence of a GPU, is a status with a message, never a crash.
#include <gtest/gtest.h>

#include <algorithm>

#include <dlfcn.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cache/mla_c_api.h"
#include "tests/run_program.h"
#include "core/cuda.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

const fs::path library_path = fs::path(MLATUNE_BINARY_DIR) / "libmlatune_c.so";
const fs::path space_file = fs::path(MLATUNE_TEST_DATA_DIR).parent_path() / "search_spaces" /
                            "fused_mla_attention.yaml";

const std::set<std::string> c_abi = {
    // cache/c_api.h
    "mlatune_open", "mlatune_close", "mlatune_last_error", "mlatune_compile_count", "mlatune_first_use_ns",
    "mlatune_kernel_name",
    "mlatune_shape_variable_count", "mlatune_shape_variable_name", "mlatune_buffer_count", "mlatune_buffer_info",
    "mlatune_buffer_elements", "mlatune_launch", "mlatune_launch_checked", "mlatune_choice_for",
    "mlatune_set_compile_mode", "mlatune_wait_compiles", "mlatune_preloaded", "mlatune_runs_stand_in", "mlatune_race_state",
    // cache/mla_c_api.h
    "mlatune_fused_mla_attention", "mlatune_choice"};

/// Owner of a dlopen handle.
class SharedLibrary {
 public:
  explicit SharedLibrary(const fs::path& path) : handle_(dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
    if (!handle_) error_ = dlerror();
  }
  ~SharedLibrary() {
    if (handle_) dlclose(handle_);
  }
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;

  bool loaded() const { return handle_ != nullptr; }
  const std::string& error() const { return error_; }

  /// The symbol cast to the type of `Declared` (a function of the header).
  template <typename Declared>
  Declared* get(const char* name) const {
    return reinterpret_cast<Declared*>(dlsym(handle_, name));
  }

 private:
  void* handle_;
  std::string error_;
};

/// The functions of the C ABI, resolved from the library with the headers'
/// own prototypes.
struct CApi {
#define MLATUNE_C_FUNCTION(name) decltype(::mlatune_##name)* name = nullptr;
#define MLATUNE_C_FUNCTIONS(X)                                                                     \
  X(open) X(close) X(last_error) X(compile_count) X(first_use_ns) X(kernel_name) X(shape_variable_count) \
  X(shape_variable_name) X(buffer_count) X(buffer_info) X(buffer_elements) X(launch) X(launch_checked) \
  X(choice_for) X(set_compile_mode) X(wait_compiles) X(runs_stand_in) X(race_state)   \
  X(fused_mla_attention) X(choice)
  MLATUNE_C_FUNCTIONS(MLATUNE_C_FUNCTION)
#undef MLATUNE_C_FUNCTION

  explicit CApi(const SharedLibrary& lib) {
#define MLATUNE_C_RESOLVE(name) name = lib.get<decltype(::mlatune_##name)>("mlatune_" #name);
    MLATUNE_C_FUNCTIONS(MLATUNE_C_RESOLVE)
#undef MLATUNE_C_RESOLVE
  }
  /// Names of the functions that did not resolve.
  std::vector<std::string> missing() const {
    std::vector<std::string> names;
#define MLATUNE_C_MISSING(name) \
  if (name == nullptr) names.push_back("mlatune_" #name);
    MLATUNE_C_FUNCTIONS(MLATUNE_C_MISSING)
#undef MLATUNE_C_MISSING
    return names;
  }
};

class CLibraryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(library_path)) << library_path << " is not built (target mlatune_c)";
    library_ = std::make_unique<SharedLibrary>(library_path);
    ASSERT_TRUE(library_->loaded()) << "dlopen(" << library_path << "): " << library_->error();
    api_ = std::make_unique<CApi>(*library_);
    ASSERT_EQ(api_->missing(), std::vector<std::string>{}) << "functions of the headers not exported";
    dir_ = fs::temp_directory_path() / ("mlatune_c_library_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  std::string last_error() const { return api_->last_error(nullptr); }

  std::unique_ptr<SharedLibrary> library_;
  std::unique_ptr<CApi> api_;
  fs::path dir_;
};

// The dynamic symbol table, by nm: the exact set of names a loading process
// can bind to.
TEST_F(CLibraryTest, ExportsTheCAbiAndNothingElse) {
  test_support::ProgramResult nm =
      test_support::run_program(MLATUNE_NM, {"-D", "--defined-only", library_path.string()}, dir_);
  ASSERT_EQ(nm.code, 0) << MLATUNE_NM << " failed: " << nm.err;
  std::set<std::string> exported;
  std::istringstream lines(nm.out);
  for (std::string line; std::getline(lines, line);) {
    // "<address> <type> <name>"; the name is the last field.
    std::size_t space = line.find_last_of(' ');
    if (space == std::string::npos || space + 1 == line.size()) continue;
    exported.insert(line.substr(space + 1));
  }
  EXPECT_EQ(exported, c_abi) << "nm -D --defined-only printed:\n" << nm.out;
  for (const std::string& name : exported)
    EXPECT_NE(name.rfind("_Z", 0), 0u) << "C++ symbol exported: " << name;
}

// mlatune::probe_gpu(int) and the static CUDA runtime's cudaGetDeviceCount
// are linked into the library (mlatune_open calls both) but must not be
// reachable from outside.
// The list above is what the library must export; every function the two
// headers declare must be in it, so that a new entry point cannot be
// declared, tested through the static library and still be missing from
// libmlatune_c.so (the version script names each export).
TEST(CLibraryHeaders, EveryDeclaredFunctionIsInTheExportList) {
  const fs::path root = fs::path(MLATUNE_TEST_DATA_DIR).parent_path();
  std::set<std::string> declared;
  for (const char* header : {"cache/c_api.h", "cache/mla_c_api.h"}) {
    std::ifstream in(root / header);
    ASSERT_TRUE(in) << header;
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    for (std::size_t at = s.find("mlatune_"); at != std::string::npos; at = s.find("mlatune_", at + 1)) {
      std::size_t end = at;
      while (end < s.size() && (std::isalnum(static_cast<unsigned char>(s[end])) || s[end] == '_')) ++end;
      const bool call = end < s.size() && s[end] == '(';
      const bool word_start = at == 0 || !(std::isalnum(static_cast<unsigned char>(s[at - 1])) || s[at - 1] == '_');
      // A declaration starts its line with a return type: "int mlatune_x(".
      const std::size_t line = s.rfind('\n', at);
      const std::string before = s.substr(line == std::string::npos ? 0 : line + 1, at - (line == std::string::npos ? 0 : line + 1));
      const bool declaration = before.find_first_not_of(" ") != std::string::npos && before.find('(') == std::string::npos &&
                               before.find("/*") == std::string::npos && before.find('*') != 0 && before.find("//") == std::string::npos;
      if (call && word_start && declaration) declared.insert(s.substr(at, end - at));
    }
  }
  EXPECT_FALSE(declared.empty());
  EXPECT_EQ(declared, c_abi);
}

TEST_F(CLibraryTest, InternalFunctionsAreNotVisible) {
  EXPECT_EQ(library_->get<void()>("_ZN7mlatune9probe_gpuEi"), nullptr);
  EXPECT_EQ(library_->get<void()>("cudaGetDeviceCount"), nullptr) << "the static CUDA runtime is private";
}

TEST_F(CLibraryTest, OpenWithoutDatabaseFailsWithAMessage) {
  fs::path missing = dir_ / "no_such_dir" / "tuned.db";
  mlatune_dispatcher* dispatcher = reinterpret_cast<mlatune_dispatcher*>(this);  // must be reset to NULL
  int status = api_->open(missing.c_str(), space_file.c_str(), &dispatcher);
  EXPECT_EQ(dispatcher, nullptr);
  std::string message = last_error();
  GpuProbe probe = probe_gpu();
  if (probe.usable) {
    // The GPU is probed first; with one, the missing file is what fails.
    EXPECT_EQ(status, MLATUNE_INVALID_ARGUMENT) << message;
    EXPECT_NE(message.find(missing.string()), std::string::npos) << message;
    EXPECT_NE(message.find("mlatune tune"), std::string::npos) << message;
  } else {
    EXPECT_EQ(status, MLATUNE_ENVIRONMENT) << message;
    EXPECT_EQ(message.rfind("no GPU: ", 0), 0u) << message;
    EXPECT_NE(message.find(probe.reason), std::string::npos) << message;
  }
}

TEST_F(CLibraryTest, WithoutAGpuOpenFailsCleanly) {
  GpuProbe probe = probe_gpu();
  if (probe.usable) GTEST_SKIP() << "a GPU is present (" << probe.device.name << "); this checks its absence";
  fs::path db = dir_ / "tuned.db";
  std::ofstream(db) << "";
  mlatune_dispatcher* dispatcher = nullptr;
  EXPECT_EQ(api_->open(db.c_str(), space_file.c_str(), &dispatcher), MLATUNE_ENVIRONMENT);
  EXPECT_EQ(dispatcher, nullptr);
  EXPECT_EQ(last_error(), "no GPU: " + probe.reason);
}

TEST_F(CLibraryTest, NullArgumentsAreStatusesNotCrashes) {
  EXPECT_EQ(api_->open("x.db", space_file.c_str(), nullptr), MLATUNE_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "mlatune_open: out is NULL");

  mlatune_dispatcher* dispatcher = nullptr;
  EXPECT_EQ(api_->open(nullptr, space_file.c_str(), &dispatcher), MLATUNE_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("database or space file is NULL"), std::string::npos) << last_error();

  float buffer = 0.0f;
  EXPECT_EQ(api_->fused_mla_attention(nullptr, &buffer, &buffer, &buffer, &buffer, &buffer, 1, 1, 1, 1, 1,
                                      nullptr),
            MLATUNE_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("dispatcher is NULL"), std::string::npos) << last_error();

  char text[64];
  EXPECT_EQ(api_->choice(nullptr, 1, 1, 1, 1, 1, text, sizeof text), MLATUNE_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("dispatcher is NULL"), std::string::npos) << last_error();

  unsigned long long count = 0;
  EXPECT_EQ(api_->compile_count(nullptr, &count), MLATUNE_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("NULL argument"), std::string::npos) << last_error();

  unsigned long long phases[MLATUNE_PHASE_COUNT];
  std::fill(std::begin(phases), std::end(phases), 7ull);
  EXPECT_EQ(api_->first_use_ns(nullptr, phases), MLATUNE_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "mlatune_first_use_ns: NULL argument");
  EXPECT_TRUE(std::all_of(std::begin(phases), std::end(phases), [](unsigned long long v) { return v == 7; }));

  api_->close(nullptr);  // documented as ignored
}

// Every function of the generic entry, given no dispatcher, returns
// MLATUNE_INVALID_ARGUMENT with a message that names the function, and
// writes nothing through its out-pointers.
TEST_F(CLibraryTest, GenericEntryWithoutADispatcherFailsWithStatuses) {
  auto expect_refused = [&](int status, const std::string& function) {
    EXPECT_EQ(status, MLATUNE_INVALID_ARGUMENT) << function;
    EXPECT_EQ(last_error().rfind(function + ": ", 0), 0u) << function << ": " << last_error();
  };
  const char* name = "untouched";
  std::size_t count = 77;
  expect_refused(api_->kernel_name(nullptr, &name), "mlatune_kernel_name");
  expect_refused(api_->shape_variable_count(nullptr, &count), "mlatune_shape_variable_count");
  expect_refused(api_->shape_variable_name(nullptr, 0, &name), "mlatune_shape_variable_name");
  expect_refused(api_->buffer_count(nullptr, &count), "mlatune_buffer_count");
  int type = -1, role = -1;
  expect_refused(api_->buffer_info(nullptr, 0, &name, &type, &role, &count), "mlatune_buffer_info");
  const std::int64_t shape[2] = {4, 512};
  std::uint64_t elements = 77;
  expect_refused(api_->buffer_elements(nullptr, 0, shape, 2, &elements), "mlatune_buffer_elements");
  float x = 0.0f;
  const void* buffers[3] = {&x, &x, &x};
  const std::size_t bytes[3] = {4, 4, 4};
  expect_refused(api_->launch(nullptr, buffers, 3, shape, 2, nullptr), "mlatune_launch");
  expect_refused(api_->launch_checked(nullptr, buffers, bytes, 3, shape, 2, nullptr), "mlatune_launch_checked");
  char text[64] = "untouched";
  expect_refused(api_->choice_for(nullptr, shape, 2, text, sizeof text), "mlatune_choice_for");
  EXPECT_STREQ(name, "untouched");
  EXPECT_EQ(count, 77u);
  EXPECT_EQ(type, -1);
  EXPECT_EQ(role, -1);
  EXPECT_EQ(elements, 77u);
  EXPECT_STREQ(text, "untouched");
}

// The last error belongs to the thread that failed: another thread's failure
// does not overwrite this one's message.
TEST_F(CLibraryTest, LastErrorIsPerThread) {
  EXPECT_EQ(api_->open("x.db", space_file.c_str(), nullptr), MLATUNE_INVALID_ARGUMENT);
  const std::string mine = last_error();
  std::string theirs;
  std::thread other([&] {
    EXPECT_STREQ(api_->last_error(nullptr), "");
    unsigned long long count = 0;
    EXPECT_EQ(api_->compile_count(nullptr, &count), MLATUNE_INVALID_ARGUMENT);
    theirs = api_->last_error(nullptr);
  });
  other.join();
  EXPECT_NE(theirs, mine);
  EXPECT_EQ(last_error(), mine);
}

}  // namespace
}  // namespace mlatune

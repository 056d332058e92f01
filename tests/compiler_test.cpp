#include "core/compiler.h"

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "core/embedded.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/space.h"

namespace mlatune {
namespace {

std::string test_template(const std::string& name) {
  return load_text_file(std::filesystem::path(MLATUNE_TEST_DATA_DIR) / "templates" / name).text;
}

CompileRequest small_request(int scale = 3) {
  CompileRequest request;
  request.source = test_template("small.cu");
  request.source_name = "small.cu";
  request.entry = "scale_vector";
  request.arch = "sm_90";
  request.definitions = {{"SCALE", std::to_string(scale)}};
  request.config = "SCALE=" + std::to_string(scale);
  return request;
}

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

TEST(Compiler, SmallKernelGivesCubinAndResourceReport) {
  Compiler compiler;
  CompileResult result = compiler.compile(small_request());
  ASSERT_TRUE(result.ok()) << result.failure().message;
  const CompiledBinary& binary = result.binary();
  ASSERT_GE(binary.cubin.size(), 4u);
  EXPECT_EQ(binary.cubin.substr(0, 4), std::string("\x7f" "ELF"));
  EXPECT_GT(binary.usage.registers, 0);
  EXPECT_FALSE(binary.usage.spills());
  EXPECT_EQ(binary.usage.stack_frame_bytes, 0);
  EXPECT_EQ(binary.arch, "sm_90");
  EXPECT_EQ(binary.entry, "scale_vector");
  EXPECT_TRUE(contains(binary.options, "--gpu-architecture=sm_90"));
  EXPECT_TRUE(contains(binary.options, "-DSCALE=3"));
  EXPECT_TRUE(contains(binary.options, "--ptxas-options=-v"));
  EXPECT_NE(binary.log.find("Compiling entry function 'scale_vector'"), std::string::npos);
  EXPECT_GT(binary.compile_seconds, 0.0);
  EXPECT_TRUE(std::regex_match(binary.key.hash, std::regex("[0-9a-f]{32}")));
  EXPECT_TRUE(binary.ptx.empty()) << "the PTX is kept only where asked";
}

TEST(Compiler, KeepsThePtxWhereAskedWithoutChangingTheKeyOrTheCubin) {
  Compiler compiler;
  CompileRequest request = small_request();
  const CompileResult plain = compiler.compile(request);
  request.keep_ptx = true;
  const CompileResult kept = compiler.compile(request);
  ASSERT_TRUE(plain.ok() && kept.ok());
  EXPECT_EQ(kept.key(), plain.key());
  EXPECT_EQ(kept.binary().cubin, plain.binary().cubin);
  const std::string& ptx = kept.binary().ptx;
  EXPECT_NE(ptx.find(".target sm_90"), std::string::npos) << ptx;
  EXPECT_NE(ptx.find(".entry scale_vector("), std::string::npos) << ptx;
  EXPECT_NE(ptx.find("// Cuda compilation tools, release"), std::string::npos) << ptx;
  EXPECT_EQ(ptx.find('\0'), std::string::npos) << "no terminator kept";
}

TEST(Compiler, ReportsCpuAndPtxasTimeWithinTheWallTime) {
  CompileResult result = Compiler().compile(small_request());
  ASSERT_TRUE(result.ok()) << result.failure().message;
  const CompiledBinary& binary = result.binary();
  // One thread cannot use more CPU than wall time (plus the clocks' tick).
  EXPECT_GT(binary.cpu_seconds, 0.0);
  EXPECT_LE(binary.cpu_seconds, binary.compile_seconds + 0.002);
  EXPECT_EQ(result.cpu_seconds(), binary.cpu_seconds);
  // ptxas is one part of the compilation (its report names its time).
  EXPECT_GT(binary.ptxas_seconds, 0.0);
  EXPECT_LT(binary.ptxas_seconds, binary.compile_seconds);
  EXPECT_EQ(binary.ptxas_seconds, ptxas_seconds(binary.log));
}

TEST(Compiler, PtxasSecondsSumsEveryFunctionsCompileTime) {
  const std::string log =
      "ptxas info    : Compiling entry function 'main_kernel' for 'sm_90'\n"
      "ptxas info    : Used 108 registers, used 1 barriers\n"
      "ptxas info    : Compile time = 110.250 ms\n"
      "ptxas info    : Compiling entry function 'prologue' for 'sm_90'\n"
      "ptxas info    : Compile time = 1.5 ms\n";
  EXPECT_NEAR(ptxas_seconds(log), 0.11175, 1e-12);
  EXPECT_NEAR(ptxas_seconds("ptxas info    : Compile time = 2 s"), 2.0, 1e-12);
  EXPECT_EQ(ptxas_seconds("ptxas info    : Used 4 registers"), 0.0);
  // A malformed number or an unknown unit adds nothing.
  EXPECT_EQ(ptxas_seconds("Compile time = fast\nCompile time = 3 fortnights"), 0.0);
  EXPECT_EQ(ptxas_seconds(""), 0.0);
}

TEST(Compiler, OneCubinHoldsTheMainEntryAndItsPrologue) {
  SearchSpace space =
      SearchSpace::load(std::filesystem::path(MLATUNE_TEST_DATA_DIR) / "spaces" / "prologue.yaml");
  const Shape shape = space.parse_shape("N=1000");
  const Config config = space.parse_config("EXPAND=true,THREADS=64,PROLOGUE_THREADS=128");
  CompileResult result = Compiler().compile(compile_request(space, config, shape, "sm_90"));
  ASSERT_TRUE(result.ok()) << result.log();
  const CompiledBinary& binary = result.binary();
  // The report is the main entry's; both functions are in the one image (the
  // ELF symbol table names them), so the worker and the dispatcher load both from it.
  EXPECT_EQ(binary.entry, "plus_one");
  EXPECT_GT(binary.usage.registers, 0);
  EXPECT_NE(binary.cubin.find(std::string("plus_one") + '\0'), std::string::npos);
  EXPECT_NE(binary.cubin.find(std::string("double_into") + '\0'), std::string::npos);
  EXPECT_NE(binary.log.find("Compiling entry function 'double_into'"), std::string::npos)
      << binary.log;
}

TEST(Compiler, RuntimeIndexedLocalArrayIsFlagged) {
  CompileRequest request;
  request.source = test_template("local_array.cu");
  request.source_name = "local_array.cu";
  request.entry = "gather_local";
  request.arch = "sm_90";
  request.definitions = {{"LOCAL_SIZE", "512"}};
  Compiler compiler;
  CompileResult result = compiler.compile(request);
  ASSERT_TRUE(result.ok()) << result.failure().message;
  const ResourceUsage& usage = result.binary().usage;
  // 512 floats indexed at run time cannot be registers: ptxas gives them a frame.
  EXPECT_GE(usage.stack_frame_bytes, 512 * 4);
  EXPECT_TRUE(usage.spills());
}

TEST(Compiler, SyntaxErrorIsAValueWithLogConfigAndOptions) {
  CompileRequest request;
  request.source = test_template("broken.cu");
  request.source_name = "broken.cu";
  request.entry = "broken_kernel";
  request.arch = "sm_90";
  request.definitions = {{"BROKEN_FACTOR", "2"}};
  request.config = "BROKEN_FACTOR=2";
  Compiler compiler;
  CompileResult result = compiler.compile(request);
  ASSERT_FALSE(result.ok());
  const CompileFailure& failure = result.failure();
  EXPECT_NE(failure.log.find("error: expected an expression"), std::string::npos) << failure.log;
  EXPECT_NE(failure.log.find("broken.cu(4)"), std::string::npos) << failure.log;
  EXPECT_NE(failure.message.find("config BROKEN_FACTOR=2"), std::string::npos) << failure.message;
  EXPECT_NE(failure.message.find("--gpu-architecture=sm_90"), std::string::npos);
  EXPECT_NE(failure.message.find("-DBROKEN_FACTOR=2"), std::string::npos);
  EXPECT_NE(failure.message.find(failure.log), std::string::npos);
  EXPECT_TRUE(contains(failure.options, "-DBROKEN_FACTOR=2"));
  EXPECT_GT(result.cpu_seconds(), 0.0);  // the front end ran before it failed
  EXPECT_THROW(result.binary(), std::logic_error);
}

TEST(Compiler, MissingDefinitionIsACompileFailure) {
  CompileRequest request = small_request();
  request.definitions.clear();
  CompileResult result = Compiler().compile(request);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.log().find("SCALE must be defined"), std::string::npos) << result.log();
}

TEST(Compiler, EntryNotInTheCodeIsAFailure) {
  CompileRequest request = small_request();
  request.entry = "no_such_kernel";
  CompileResult result = Compiler().compile(request);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.failure().message.find("'no_such_kernel' not found"), std::string::npos);
  EXPECT_NE(result.failure().message.find("scale_vector"), std::string::npos);
}

TEST(Compiler, UnknownOptionIsAFailureNotACrash) {
  CompileRequest request = small_request();
  request.extra_options = {"--no-such-option"};
  CompileResult result = Compiler().compile(request);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.failure().message.find("--no-such-option"), std::string::npos);
}

TEST(Compiler, KeyIgnoresOptionOrderButNotContent) {
  Compiler compiler;
  CompileRequest a = small_request();
  a.definitions = {{"SCALE", "3"}, {"OTHER", "1"}};
  CompileRequest b = a;
  b.definitions = {{"OTHER", "1"}, {"SCALE", "3"}};
  b.config = "written differently";  // messages only
  EXPECT_EQ(compiler.key(a), compiler.key(b));

  CompileRequest changed_text = a;
  changed_text.source += "\n// an edit\n";
  EXPECT_NE(compiler.key(a), compiler.key(changed_text));

  CompileRequest changed_value = a;
  changed_value.definitions[0].second = "4";
  EXPECT_NE(compiler.key(a), compiler.key(changed_value));

  CompileRequest changed_arch = a;
  changed_arch.arch = "sm_80";
  EXPECT_NE(compiler.key(a), compiler.key(changed_arch));
}

TEST(Compiler, AKeyWithTheSourceHashedAheadIsTheSameKey) {
  // The flagship's configs at two shapes and two architectures: keyed from a
  // hasher that took the template once, and from requests that carry it.
  const SearchSpace space = SearchSpace::load(std::filesystem::path(MLATUNE_TEST_DATA_DIR).parent_path() /
                                              "search_spaces" / "fused_mla_attention.yaml");
  Compiler compiler;
  const ContentHasher after_template = Compiler::source_hasher(space.template_text());
  std::mt19937_64 rng(3);
  std::set<std::string> keys;
  for (const char* text : {"B=2,T=32,H=4,D=16,R=24", "B=1,T=777,H=20,D=56,R=201"}) {
    const Shape shape = space.parse_shape(text);
    for (int i = 0; i < 6; ++i) {
      std::optional<Config> config = space.sample(shape, rng);
      ASSERT_TRUE(config);
      for (const char* arch : {"sm_90", "sm_80"}) {
        const CompileRequest full = compile_request(space, *config, shape, arch);
        const CompileRequest bare = compile_request_without_source(space, *config, shape, arch);
        EXPECT_TRUE(bare.source.empty());
        EXPECT_EQ(bare.definitions, full.definitions);
        EXPECT_EQ(compiler.key(after_template, bare), compiler.key(full)) << space.config_string(*config);
        keys.insert(compiler.key(full).hash);
      }
    }
  }
  EXPECT_GT(keys.size(), 12u) << "sampled configs should give distinct binaries";
  // The hasher is the source's: another text gives other keys, and the
  // original is left as it was by a copy that went on.
  const CompileRequest bare = compile_request_without_source(space, space.default_config(),
                                                             space.parse_shape("B=2,T=32,H=4,D=16,R=24"), "sm_90");
  ContentHasher edited = after_template;
  edited.add("// an edit");
  EXPECT_NE(compiler.key(Compiler::source_hasher(space.template_text() + " "), bare),
            compiler.key(after_template, bare));
  EXPECT_EQ(after_template.digest(), content_hash({space.template_text()}));
  EXPECT_NE(edited.digest(), after_template.digest());
}

// Line tables are opt-in: with them NVRTC embeds the PTX text in the cubin,
// which every first call then reads from the store and loads.
TEST(Compiler, LineTablesOnlyWhenAskedForAndTheyMakeAnotherBinary) {
  ASSERT_EQ(std::getenv("MLATUNE_LINEINFO"), nullptr) << "this test sets MLATUNE_LINEINFO itself";
  const CompileRequest request = small_request();
  const Compiler plain;
  ASSERT_EQ(::setenv("MLATUNE_LINEINFO", "1", 1), 0);
  const Compiler profiling;
  ASSERT_EQ(::setenv("MLATUNE_LINEINFO", "0", 1), 0);
  const Compiler zero;  // only "1" asks for them
  ASSERT_EQ(::unsetenv("MLATUNE_LINEINFO"), 0);

  EXPECT_FALSE(contains(plain.options(request), "-lineinfo"));
  EXPECT_FALSE(contains(zero.options(request), "-lineinfo"));
  EXPECT_TRUE(contains(profiling.options(request), "-lineinfo"));
  EXPECT_NE(plain.key(request), profiling.key(request));
  EXPECT_EQ(plain.key(request), zero.key(request));

  CompileResult without = plain.compile(request);
  CompileResult with = profiling.compile(request);
  ASSERT_TRUE(without.ok()) << without.failure().message;
  ASSERT_TRUE(with.ok()) << with.failure().message;
  const std::string section = std::string(".nv_debug_ptx_txt") + '\0';
  EXPECT_EQ(without.binary().cubin.find(section), std::string::npos);
  EXPECT_NE(with.binary().cubin.find(section), std::string::npos);
  EXPECT_LT(without.binary().cubin.size(), with.binary().cubin.size());
  EXPECT_EQ(without.binary().usage.registers, with.binary().usage.registers);
}

TEST(Compiler, ArchitecturesAreCheckedAgainstNvrtc) {
  EXPECT_EQ(parse_architecture("sm_90"), "sm_90");
  EXPECT_EQ(parse_architecture("90"), "sm_90");
  EXPECT_EQ(parse_architecture("sm_90a"), "sm_90a");
  EXPECT_THROW(parse_architecture("sm_9x"), InputError);
  EXPECT_THROW(parse_architecture("hopper"), InputError);
  EXPECT_THROW(parse_architecture("sm_10"), InputError);  // no such GPU
  EXPECT_TRUE(contains(supported_architectures(), "sm_90"));
}

TEST(Compiler, ReportsItsNvrtcVersion) {
  EXPECT_TRUE(std::regex_match(nvrtc_version(), std::regex("[0-9]+\\.[0-9]+")));
  EXPECT_EQ(Compiler().version(), nvrtc_version());
}

}  // namespace
}  // namespace mlatune

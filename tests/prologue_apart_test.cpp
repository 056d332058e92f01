// The prologue compiled apart (prologue.apart in a space; core/compiler.h,
// core/binary_image.h): which configs share a prologue part, that a compiler
// compiles a shared part once, what the binary holds, and that the code of
// each part is what sharing and the code identity claim it is.  Real NVRTC
// compilations, no GPU: the tiny family of tests/spaces/apart.yaml, then the
// flagship at S1, S2 and S4.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/binary_image.h"
#include "core/compiler.h"
#include "core/error.h"
#include "core/launch_plan.h"
#include "core/space.h"
#include "tests/flagship_apart.h"
#include "tuner/code_identity.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

const fs::path tests_dir = MLATUNE_TEST_DATA_DIR;

// ---- the image format ---------------------------------------------------------

TEST(BinaryImage, ACubinIsItsOwnImageAndAPackGivesBackItsCubins) {
  const std::string elf = std::string("\x7f" "ELF", 4) + std::string(100, 'a');
  EXPECT_EQ(pack_images({elf}), elf);
  EXPECT_FALSE(is_image_pack(elf));
  ASSERT_EQ(unpack_images(elf).size(), 1u);
  EXPECT_EQ(unpack_images(elf)[0], elf);

  const std::string other = std::string("\x7f" "ELF", 4) + std::string(7, '\0') + "tail";
  const std::string pack = pack_images({elf, other});
  EXPECT_TRUE(is_image_pack(pack));
  EXPECT_EQ(pack.size(), 8 + 4 + 8 + elf.size() + 8 + other.size());
  const std::vector<std::string_view> parts = unpack_images(pack);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0], elf);
  EXPECT_EQ(parts[1], other);  // bytes, zeros included
}

TEST(BinaryImage, ADamagedPackIsRefusedWithWhatIsWrong) {
  const std::string pack = pack_images({std::string(40, 'x'), std::string(30, 'y')});
  auto refusal = [](const std::string& image) {
    try {
      unpack_images(image);
    } catch (const EnvironmentError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refusal(pack.substr(0, 10)).find("ends inside its header"), std::string::npos);
  EXPECT_NE(refusal(pack.substr(0, pack.size() - 1)).find("cubin 2 of 2 says it has 30 bytes, 29 are left"),
            std::string::npos)
      << refusal(pack.substr(0, pack.size() - 1));
  EXPECT_NE(refusal(pack + "z").find("1 bytes follow its last cubin"), std::string::npos);
  std::string none = pack;
  none[8] = none[9] = none[10] = none[11] = '\0';
  EXPECT_NE(refusal(none).find("holds 0 cubins"), std::string::npos);
  std::string huge = pack;
  huge[8 + 4 + 7] = '\x7f';  // the first cubin's size: far past the end
  EXPECT_NE(refusal(huge).find("cubin 1 of 2 says it has"), std::string::npos);
  EXPECT_NE(refusal(pack.substr(0, 8 + 4 + 8 + 40 + 3)).find("ends before the size of cubin 2 of 2"),
            std::string::npos);
}

// ---- the tiny family ------------------------------------------------------------

class TinyApart : public ::testing::Test {
 protected:
  const SearchSpace space_ = SearchSpace::load(tests_dir / "spaces" / "apart.yaml");
  const Shape shape_ = space_.parse_shape("N=1000");
  Config config(const std::string& text) const { return space_.parse_config(text); }
};

TEST_F(TinyApart, ConfigsWithTheSamePrologueValuesShareOnePart) {
  const Config wide = config("EXPAND=true,THREADS=256,PROLOGUE_THREADS=128");
  const Config narrow = config("EXPAND=true,THREADS=64,PROLOGUE_THREADS=128");
  ASSERT_TRUE(space_.check(wide, shape_));
  EXPECT_EQ(space_.prologue_apart_config(wide, shape_), narrow);
  EXPECT_EQ(space_.prologue_apart_config(narrow, shape_), narrow);  // its own part
  // No prologue, no part.
  EXPECT_EQ(space_.prologue_apart_config(config("EXPAND=false,THREADS=256,PROLOGUE_THREADS=128"), shape_),
            std::nullopt);
  // The section is in the definition: the same file without it is another kernel version.
  const SearchSpace together = SearchSpace::load(tests_dir / "spaces" / "prologue.yaml");
  EXPECT_NE(space_.definition_hash(), together.definition_hash());
}

TEST_F(TinyApart, APartIsCompiledOncePerCompilerAndTheBinaryHoldsBothCubins) {
  const Compiler compiler;
  const CompileRequest wide =
      compile_request(space_, config("EXPAND=true,THREADS=256,PROLOGUE_THREADS=128"), shape_, "sm_90");
  const CompileRequest narrow =
      compile_request(space_, config("EXPAND=true,THREADS=64,PROLOGUE_THREADS=128"), shape_, "sm_90");
  ASSERT_TRUE(wide.prologue_part);
  EXPECT_EQ(wide.prologue_part, narrow.prologue_part);
  EXPECT_EQ(wide.prologue_part->entry, "double_into");

  const CompileResult a = compiler.compile(wide);
  ASSERT_TRUE(a.ok()) << a.failure().message;
  EXPECT_EQ(compiler.prologue_parts().compiled, 1u);
  const Compiler copy = compiler;  // copies share what was compiled
  const CompileResult b = copy.compile(narrow);
  ASSERT_TRUE(b.ok()) << b.failure().message;
  EXPECT_EQ(compiler.prologue_parts().compiled, 1u);
  EXPECT_EQ(compiler.prologue_parts().reused, 1u);
  EXPECT_NE(b.log().find("compiled before, kept"), std::string::npos) << b.log();

  const std::vector<std::string_view> pa = unpack_images(a.binary().cubin);
  const std::vector<std::string_view> pb = unpack_images(b.binary().cubin);
  ASSERT_EQ(pa.size(), 2u);
  ASSERT_EQ(pb.size(), 2u);
  EXPECT_EQ(pa[1], pb[1]);  // one prologue part
  EXPECT_NE(pa[0], pb[0]);  // two main parts
  // The main part is what compiling it alone gives, and holds no prologue.
  const CompileResult main_alone = compiler.compile(main_part_request(wide));
  ASSERT_TRUE(main_alone.ok());
  EXPECT_EQ(pa[0], main_alone.binary().cubin);
  EXPECT_NE(a.log().find("plus_one"), std::string::npos);
  EXPECT_EQ(a.binary().usage.registers, main_alone.binary().usage.registers);

  // Keys: each binary its own, neither the whole compile's.
  CompileRequest whole = wide;
  whole.prologue_part.reset();
  EXPECT_NE(a.key(), b.key());
  EXPECT_NE(a.key(), compiler.key(whole));
  EXPECT_EQ(a.key(), compiler.key(wide));
  EXPECT_EQ(compiler.key(Compiler::source_hasher(wide.source), wide), a.key());
}

TEST_F(TinyApart, APartThatDoesNotCompileFailsItsConfigsAndSaysSo) {
  const Compiler compiler;
  CompileRequest request =
      compile_request(space_, config("EXPAND=true,THREADS=256,PROLOGUE_THREADS=128"), shape_, "sm_90");
  request.prologue_part->definitions.emplace_back("MLATUNE_BROKEN", "(");
  request.source += "\n#ifdef MLATUNE_BROKEN\nint broken = MLATUNE_BROKEN;\n#endif\n";
  const CompileResult result = compiler.compile(request);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.failure().message.find("the prologue part, compiled apart"), std::string::npos)
      << result.failure().message;
  EXPECT_EQ(result.key(), compiler.key(request));
  // A failed part is not kept: the next request sharing it compiles it again
  // (what failed may have been a compile process dying, not the code).
  const CompileResult again = compiler.compile(request);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(compiler.prologue_parts().compiled, 2u);
  EXPECT_EQ(compiler.prologue_parts().reused, 0u);
}

TEST_F(TinyApart, TheIdentityIsTheWholeCompilesWhereThePartsHaveItsCode) {
  const Compiler compiler;
  const Config wide = config("EXPAND=true,THREADS=256,PROLOGUE_THREADS=128");
  CompileRequest apart = compile_request(space_, wide, shape_, "sm_90");
  apart.keep_ptx = true;
  CompileRequest whole = apart;
  whole.prologue_part.reset();
  const CompileResult a = compiler.compile(apart), w = compiler.compile(whole);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE(a.binary().prologue_ptx.empty());
  EXPECT_TRUE(same_code_apart(w.binary(), a.binary(), "plus_one", "double_into"));
  const LaunchPlan plan = plan_launch(space_, wide, shape_);
  ASSERT_TRUE(plan.ok());
  EXPECT_NE(code_identity(a.binary(), plan), code_identity(w.binary(), plan));

  CompilePool pool(compiler, 2);
  const std::vector<CodeIdentity> ids =
      code_identities(space_, {{space_.shape_string(shape_), space_.config_string(wide), "sm_90"}}, pool);
  ASSERT_TRUE(ids[0].ok()) << ids[0].refusal;
  EXPECT_EQ(ids[0].hash, code_identity(w.binary(), plan));

  // A function of the part's module that its entry does not call is no part
  // of the entry's code.
  CompileRequest changed = apart;
  changed.prologue_part->definitions.emplace_back("MLATUNE_CHANGED", "1");
  changed.source += "\n#if defined(MLATUNE_CHANGED)\n__device__ int changed_marker = 7;\n"
                    "extern \"C\" __global__ void unrelated(int* p) { *p = changed_marker; }\n#endif\n";
  const CompileResult c = compiler.compile(changed);
  ASSERT_TRUE(c.ok()) << c.failure().message;
  EXPECT_TRUE(same_code_apart(w.binary(), c.binary(), "plus_one", "double_into"))
      << "an unreferenced function is no part of an entry's code";
}

TEST(EntryPtx, AnEntrysCodeIsItsOwnWhateverElseTheModuleHolds) {
  const std::string one =
      ".version 9.0\n.target sm_90\n.address_size 64\n"
      ".global .align 4 .u32 used = 3;\n.global .align 4 .u32 unused = 4;\n"
      "// .globl a\n.visible .entry a(\n.param .u64 p\n)\n{\n$L__BB0_1:\nld.global.u32 %r1, [used];\nbra $L__BB0_1;\n}\n";
  const std::string two =
      ".version 9.0\n.target sm_90\n.address_size 64\n"
      ".global .align 4 .u32 used = 3;\n.global .align 4 .u32 other = 5;\n"
      "// .globl b\n.visible .entry b(\n.param .u64 p\n)\n{\nld.global.u32 %r1, [other];\n}\n"
      "// .globl a\n.visible .entry a(\n.param .u64 p\n)\n{\n$L__BB1_1:\nld.global.u32 %r1, [used];\nbra $L__BB1_1;\n}\n";
  EXPECT_EQ(entry_ptx(one, "a"), entry_ptx(two, "a"));
  EXPECT_EQ(entry_ptx(two, "a").find("other"), std::string::npos);
  EXPECT_NE(entry_ptx(two, "b").find("other"), std::string::npos);
  std::string changed = two;
  changed.replace(changed.find("used = 3"), 8, "used = 9");  // a referenced initializer is code
  EXPECT_NE(entry_ptx(one, "a"), entry_ptx(changed, "a"));
  EXPECT_THROW(entry_ptx(one, "b"), InternalError);
}

// ---- the flagship ---------------------------------------------------------------

// What sharing and the code identity rest on, on the flagship as shipped
// (its prologue apart for tf32x3_kvgemm, tf32x3_wgmma_ws and f16x3_wgmma_ws): for fixed
// configs and configs drawn at random among those compiled apart at S1, S2
// and S4:
//   - the prologue part compiled as the config itself and as the config
//     `as` makes of it have the same code (so sharing one is sound);
//   - the code identity is the whole compile's exactly where both parts have
//     its code, else the parts' own.
// How many parts keep the whole compile's code is printed, not asserted:
// NVVM optimizes a kernel a little differently (an add for an or, operands
// in another order) when the module holds the other kernel too, so many do
// not, and results measured with whole binaries do not carry over to them.
TEST(FlagshipApart, EachPartHasTheCodeSharingAndTheIdentityClaim) {
  const SearchSpace space = test_support::flagship_with_prologue_apart();
  const Compiler compiler;
  struct Case {
    std::string shape, config;
  };
  // Fixed cases first: one per thing `as` replaces beyond the attention's
  // tiling (the algorithm, FLOAT4 outside the mma_sync tiles), on every
  // expansion, exact and bucketed (fma and fma_cluster only run few latent
  // rows: S0).
  const auto fixed = [](std::string algorithm, int qpb, int hpb, int key_tile, bool float4, std::string buckets,
                        std::string gemm) {
    return fmt::format("ALGORITHM={},THREADS_PER_QUERY=2,QUERIES_PER_BLOCK={},HEADS_PER_BLOCK={},STAGE_LATENT=true,"
                       "KEY_TILE={},FLOAT4={},UNROLL=1,STAGE_WEIGHTS=false,SHAPE_BUCKETS={},EXPAND_GEMM={},KEY_SPLITS=1",
                       algorithm, qpb, hpb, key_tile, float4, buckets, gemm);
  };
  std::vector<Case> cases = {
      {"B=4,T=1024,H=16,D=64,R=128", fixed("tf32x3_kvgemm", 64, 1, 64, false, "exact", "wgmma_m128")},
      {"B=4,T=1024,H=16,D=64,R=128", fixed("tf32x3_wgmma_ws", 128, 1, 32, true, "exact", "wgmma_m128")},
      {"B=2,T=2048,H=32,D=64,R=256", fixed("tf32x3_kvgemm", 32, 2, 32, true, "bucketed", "wgmma_m64")},
      {"B=2,T=32,H=4,D=16,R=24", fixed("tf32x3_wgmma_ws", 64, 1, 32, true, "exact", "fma")},
      {"B=2,T=32,H=4,D=16,R=24", fixed("tf32x3_kvgemm", 32, 1, 32, true, "exact", "fma_cluster")},
      {"B=4,T=256,H=8,D=32,R=64", fixed("tf32x3_wgmma_ws", 128, 1, 32, true, "exact", "mma_sync")},
      {"B=4,T=1024,H=16,D=64,R=128", fixed("f16x3_wgmma_ws", 128, 1, 64, false, "exact", "wgmma_m128")}};
  const std::size_t fixed_cases = cases.size();
  {
    // What the mapping is for: configs of two algorithms, FLOAT4 on and off,
    // other key tiles, one wgmma expansion: one part.
    const Shape s2 = space.parse_shape(cases[0].shape);
    const std::optional<Config> a = space.prologue_apart_config(space.parse_config(cases[0].config), s2);
    ASSERT_TRUE(a);
    EXPECT_EQ(a, space.prologue_apart_config(space.parse_config(cases[1].config), s2));
    EXPECT_EQ(a, space.prologue_apart_config(space.parse_config(cases[6].config), s2));  // f16x3_wgmma_ws
    // tf32x3_wgmma is compiled whole (the space says why).
    const Config wgmma = space.parse_config(fixed("tf32x3_wgmma", 128, 1, 64, false, "exact", "wgmma_m128"));
    ASSERT_TRUE(space.check(wgmma, s2));
    EXPECT_FALSE(space.prologue_apart_config(wgmma, s2));
  }
  std::mt19937_64 rng(20261205);
  for (const char* shape : {"B=4,T=256,H=8,D=32,R=64", "B=4,T=1024,H=16,D=64,R=128", "B=1,T=4096,H=16,D=128,R=512"}) {
    const Shape s = space.parse_shape(shape);
    for (int drawn = 0, tries = 0; drawn < 2 && tries < 10000; ++tries) {
      const std::optional<Config> c = space.sample(s, rng);
      ASSERT_TRUE(c);
      if (!space.prologue_apart_config(*c, s)) continue;
      cases.push_back({shape, space.config_string(*c)});
      ++drawn;
    }
  }
  ASSERT_EQ(cases.size(), fixed_cases + 6);
  int prologue_same = 0, main_same = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.shape + " " + c.config);
    const Shape shape = space.parse_shape(c.shape);
    const Config config = space.parse_config(c.config);
    const std::optional<Config> as = space.prologue_apart_config(config, shape);
    ASSERT_TRUE(as);
    const std::string arch = space.target_architecture(config, shape, "sm_90");
    CompileRequest apart = compile_request(space, config, shape, arch);
    apart.keep_ptx = true;
    CompileRequest whole = apart;
    whole.prologue_part.reset();
    CompileRequest own = apart;  // the prologue part compiled as the config itself
    own.prologue_part->definitions = space.definitions(config, shape);
    const CompileResult a = compiler.compile(apart), w = compiler.compile(whole),
                        o = compiler.compile(prologue_part_request(own));
    ASSERT_TRUE(a.ok()) << a.failure().message;
    ASSERT_TRUE(w.ok()) << w.failure().message;
    ASSERT_TRUE(o.ok()) << o.failure().message;
    const std::string& prologue = space.prologue()->kernel.entry;
    EXPECT_EQ(entry_ptx(o.binary().ptx, prologue), entry_ptx(a.binary().prologue_ptx, prologue))
        << "the prologue part depends on a value `as` replaces";
    main_same += entry_ptx(w.binary().ptx, space.kernel().entry) == entry_ptx(a.binary().ptx, space.kernel().entry);
    const bool same = same_code_apart(w.binary(), a.binary(), space.kernel().entry, prologue);
    prologue_same += same;
    CompilePool pool(compiler, 1);
    const std::vector<CodeIdentity> ids = code_identities(space, {{c.shape, c.config, "sm_90"}}, pool);
    ASSERT_TRUE(ids[0].ok()) << ids[0].refusal;
    const LaunchPlan plan = plan_launch(space, config, shape);
    EXPECT_EQ(ids[0].hash, code_identity(same ? w.binary() : a.binary(), plan));
  }
  std::printf("configs whose main part has the whole compile's code: %d of %zu; both parts: %d\n", main_same,
              cases.size(), prologue_same);
}

}  // namespace
}  // namespace mlatune

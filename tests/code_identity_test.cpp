// Code identities (tuner/code_identity.h) and carrying tuned entries over to a
// new kernel version (`mlatune cache export-best --space`, `cache import`):
// with real NVRTC compilations of a small kernel, no GPU.  A comment, new
// constants, a new parameter value or an unrelated constraint leave a
// config's identity as it was; a change of its code, of its launch, of the shape it runs or of the
// architecture changes it.  Import keeps exactly the entries whose identity
// is unchanged, refuses the rest by name, and leaves no database behind when
// it refuses.
#include "tuner/code_identity.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cache/portable_configs.h"
#include "cache/store.h"
#include "core/compiler.h"
#include "core/launch_plan.h"
#include "core/space.h"
#include "tests/run_program.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;
using test_support::read_file;
using test_support::ProgramResult;
using test_support::run_program;

const fs::path spaces = fs::path(MLATUNE_TEST_DATA_DIR) / "spaces";
const char* const config_text = "ALGORITHM=plain,THREADS=128,ITEMS=1,VECTOR=false";
const char* const shape_text = "N=1000,M=16";

fs::path cli() {
  if (const char* path = std::getenv("MLATUNE_CLI"); path && *path) return path;
  return fs::path(MLATUNE_BINARY_DIR) / "mlatune";
}

void write(const fs::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << file;
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const std::size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

class CodeIdentity_ : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mlatune_code_identity_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // tiny.cu made to use its compiled shape variable and a parameter, so
    // that they reach the code.
    kernel_ = replaced(read_file(spaces / "tiny.cu"), "y[i] = scale * x[i];", "y[i] = scale * x[i] * (SHAPE_M + ITEMS + VECTOR);");
    space_ = read_file(spaces / "small.yaml");
    ASSERT_FALSE(kernel_.empty());
    ASSERT_FALSE(space_.empty());
  }
  void TearDown() override { fs::remove_all(dir_); }

  /// A version of the small space in its own folder: `kernel` is tiny.cu's
  /// text, `space` small.yaml's.
  fs::path version(const std::string& name, const std::string& kernel, const std::string& space) {
    const fs::path folder = dir_ / name;
    fs::create_directories(folder);
    write(folder / "tiny.cu", kernel);
    fs::copy_file(spaces / "tiny_reference.cu", folder / "tiny_reference.cu");
    write(folder / "small.yaml", space);
    return folder / "small.yaml";
  }

  std::vector<CodeIdentity> identities(const fs::path& space_file, const std::vector<CodeSubject>& subjects) {
    const SearchSpace space = SearchSpace::load(space_file);
    CompilePool pool(compiler_, 2);
    return code_identities(space, subjects, pool);
  }
  std::string identity(const fs::path& space_file, const std::string& config = config_text,
                       const std::string& shape = shape_text, const std::string& arch = "sm_90") {
    const std::vector<CodeIdentity> out = identities(space_file, {{shape, config, arch}});
    EXPECT_EQ(out.size(), 1u);
    EXPECT_TRUE(out.at(0).ok()) << out.at(0).refusal;
    EXPECT_EQ(out.at(0).hash.size(), 32u);
    return out.at(0).hash;
  }

  /// A best entry of `space_file`'s version measured on an H200, with
  /// `code` as given.
  PortableEntry entry(const fs::path& space_file, const std::string& config, std::optional<std::string> code,
                      double relative_l2 = 2e-7) {
    const SearchSpace space = SearchSpace::load(space_file);
    PortableEntry e;
    e.kernel = {space.kernel_name(), space.template_hash(), space.definition_hash()};
    e.device = h200_;
    e.toolchain = ToolchainInfo::current();
    e.shape = shape_text;
    e.config = config;
    e.timing = Timing{3.5, 3.4, 3.7, 41, 0.05, "events, L2 flushed"};
    e.error = ErrorFigures{relative_l2, 1e-6};
    e.measured_at = "2026-12-04T12:00:00.000Z";
    e.code = std::move(code);
    return e;
  }

  /// A database whose best entry at shape_text is `config` under
  /// `space_file`'s version.
  void record(const fs::path& db, const fs::path& space_file, const std::string& config) {
    const SearchSpace space = SearchSpace::load(space_file);
    Store store = Store::open(db);
    DeviceInfo h200;
    static_cast<DeviceIdentity&>(h200) = h200_;
    const std::int64_t run = store.begin_run(
        RunInfo{store.ensure_kernel({space.kernel_name(), space.template_hash(), space.definition_hash()}),
                store.ensure_device(h200), store.ensure_toolchain(ToolchainInfo::current()), space_file.string(),
                space.text(), "random", "{}"});
    Measurement m;
    m.run_id = run;
    m.shape = shape_text;
    m.config = config;
    m.timing = Timing{3.5, 3.4, 3.7, 41, 0.05, "events, L2 flushed"};
    m.error = ErrorFigures{2e-7, 1e-6};
    store.record(m);
    store.finish_run(run, RunStatus::finished);
  }

  fs::path dir_;
  std::string kernel_, space_;
  const Compiler compiler_;
  const DeviceIdentity h200_{"NVIDIA H200", "sm_90", 132, std::int64_t{141} << 30, "13.0"};
};

TEST_F(CodeIdentity_, ACommentANewValueAndAnUnrelatedConstraintKeepTheIdentity) {
  const fs::path a = version("a", kernel_, space_);
  // A comment, and two new namespace-scope constants (NVRTC emits each as a
  // device global: the cubin's symbols and data change, the code does not).
  const fs::path b = version("b",
                             "// a comment that moves every line down\n\nconstexpr int kNewTile = 64;\n"
                             "constexpr float kNewScale = 0.5f;\n" +
                                 kernel_,
                             replaced(replaced(space_, "ITEMS: [1, 2, 4, 8]", "ITEMS: [1, 2, 4, 8, 16]"),
                                      "  - ALGORITHM != unrolled || ITEMS >= 2",
                                      "  - ALGORITHM != unrolled || ITEMS >= 2\n  - ITEMS < 16 || THREADS <= 32"));
  // Another version by both hashes...
  const SearchSpace sa = SearchSpace::load(a), sb = SearchSpace::load(b);
  EXPECT_NE(sa.template_hash(), sb.template_hash());
  EXPECT_NE(sa.definition_hash(), sb.definition_hash());
  // ...and other cubins...
  const Compiler& compiler = compiler_;
  auto cubin = [&](const fs::path& file) {
    const SearchSpace space = SearchSpace::load(file);
    return compiler.compile(compile_request(space, space.parse_config(config_text), space.parse_shape(shape_text), "sm_90"))
        .binary()
        .cubin;
  };
  EXPECT_NE(cubin(a), cubin(b));
  // ...but the same code, launched the same way.
  EXPECT_EQ(identity(a), identity(b));
  EXPECT_EQ(identity(a, "ALGORITHM=tiled,THREADS=64,ITEMS=4,VECTOR=true"),
            identity(b, "ALGORITHM=tiled,THREADS=64,ITEMS=4,VECTOR=true"));
}

TEST_F(CodeIdentity_, TheCodeTheLaunchTheShapeAndTheArchitectureEachChangeIt) {
  const fs::path a = version("a", kernel_, space_);
  const std::string base = identity(a);
  // The kernel's instructions.
  const fs::path code = version("code", replaced(kernel_, "scale * x[i]", "scale * x[i] * x[i]"), space_);
  EXPECT_NE(identity(code), base);
  // The launch: one more block, same code.
  const fs::path launch = version(
      "launch", kernel_,
      replaced(space_, "grid: [ceil(N / (THREADS * ITEMS)), 1, 1]", "grid: [ceil(N / (THREADS * ITEMS)) + 1, 1, 1]"));
  EXPECT_NE(identity(launch), base);
  // Another shape with the same compiled M (the scalar n and the grid differ),
  // another compiled M, another architecture, another config (launched
  // alike; the code differs), another config (compiled alike; the block
  // differs).
  EXPECT_NE(identity(a, config_text, "N=999,M=16"), base);
  EXPECT_NE(identity(a, config_text, "N=1000,M=8"), base);
  EXPECT_NE(identity(a, config_text, shape_text, "sm_80"), base);
  EXPECT_NE(identity(a, "ALGORITHM=plain,THREADS=128,ITEMS=1,VECTOR=true"), base);
  EXPECT_NE(identity(a, "ALGORITHM=tiled,THREADS=128,ITEMS=1,VECTOR=false"), base);
  // And it is a function of its inputs: the same request twice, the same hash.
  EXPECT_EQ(identity(a), base);
  const SearchSpace space = SearchSpace::load(a);
  const LaunchPlan plan = plan_launch(space, space.parse_config(config_text), space.parse_shape(shape_text));
  CompiledBinary binary;
  binary.ptx = ".version 9.0\n.target sm_90\n";
  binary.options = {"--gpu-architecture=sm_90", "-DITEMS=1"};
  const std::string one = code_identity(binary, plan);
  binary.options = {"--gpu-architecture=sm_90", "-DITEMS=2"};  // the definitions act through the PTX only
  EXPECT_EQ(code_identity(binary, plan), one);
  binary.options.push_back("--ptxas-options=-O1");
  EXPECT_NE(code_identity(binary, plan), one);
  binary.ptx.clear();
  EXPECT_THROW(code_identity(binary, plan), InternalError);
}

TEST(ReferencedPtx, DropsOnlyTheVariablesNothingUses) {
  const std::string ptx =
      "//\n// Generated by NVIDIA NVVM Compiler\n//\n\n.version 9.0\n.target sm_90\n.address_size 64\n\n"
      "\t// .globl\tk\n"
      ".global .align 4 .u32 _ZN3mla7kUnusedE = 384;\n"
      ".global .align 4 .b8 _ZN3mla5tableE[8] = {1, 0, 0, 0, 2, 0, 0, 0};\n"
      ".global .align 8 .u64 _ZN3mla9table_ptrE = generic(_ZN3mla5tableE);\n"
      ".const .align 4 .f32 _ZN3mla6kScaleE = 0f3F000000;\n"
      ".extern .shared .align 16 .b8 smem[];\n"
      "\n.visible .entry k(\n\t.param .u64 k_param_0\n)\n.maxntid 128, 1, 1\n{\n"
      "\t.reg .f32 \t%f<3>;\n\tld.const.f32 \t%f1, [_ZN3mla6kScaleE];\n"
      "\t// _ZN3mla5tableE is named in a comment only\n\tret;\n\n}\n";
  const std::string kept = referenced_ptx(ptx);
  // Unused, and used only by a dropped variable's initializer: both gone.
  EXPECT_EQ(kept.find("kUnused"), std::string::npos) << kept;
  EXPECT_EQ(kept.find("table_ptr"), std::string::npos) << kept;
  EXPECT_EQ(kept.find(".b8 _ZN3mla5tableE[8]"), std::string::npos) << kept;
  // Read by the kernel, its value included; the rest verbatim.
  EXPECT_NE(kept.find(".const .align 4 .f32 _ZN3mla6kScaleE = 0f3F000000;"), std::string::npos) << kept;
  EXPECT_NE(kept.find(".extern .shared .align 16 .b8 smem[];"), std::string::npos) << kept;
  EXPECT_NE(kept.find("// Generated by NVIDIA NVVM Compiler"), std::string::npos) << kept;
  EXPECT_NE(kept.find(ptx.substr(ptx.find("\n.visible .entry k("))), std::string::npos) << kept;
  // A changed value of a used variable is a changed text.
  std::string other = ptx;
  other.replace(other.find("0f3F000000"), 10, "0f3F800000");
  EXPECT_NE(referenced_ptx(other), kept);
  // A variable the kernel takes the address of stays, with its initializer's braces.
  std::string addressed = ptx;
  addressed.replace(addressed.find("\tret;"), 5, "\tmov.u64 \t%rd1, _ZN3mla5tableE;\n\tret;");
  EXPECT_NE(referenced_ptx(addressed).find(".b8 _ZN3mla5tableE[8] = {1, 0, 0, 0, 2, 0, 0, 0};"), std::string::npos);
  EXPECT_EQ(referenced_ptx(addressed).find("table_ptr"), std::string::npos);
}

TEST_F(CodeIdentity_, WhatCannotBeIdentifiedSaysWhy) {
  const fs::path a = version("a", kernel_, space_);
  const std::vector<CodeIdentity> out =
      identities(a, {{shape_text, "ALGORITHM=unrolled,THREADS=128,ITEMS=1,VECTOR=false", "sm_90"},
                     {shape_text, "ALGORITHM=plain,THREADS=128,ITEMS=1,VECTOR=false,COLOR=red", "sm_90"},
                     {"N=1000,M=3", "ALGORITHM=plain,THREADS=128,ITEMS=1,VECTOR=true", "sm_90"},
                     {shape_text, config_text, "sm_999"}});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_NE(out[3].refusal.find("cannot compile for sm_999"), std::string::npos) << out[3].refusal;
  EXPECT_NE(out[0].refusal.find("not a valid config at its shape under this version: ALGORITHM != unrolled"),
            std::string::npos)
      << out[0].refusal;
  EXPECT_NE(out[1].refusal.find("its config or shape does not parse under this version"), std::string::npos)
      << out[1].refusal;
  EXPECT_NE(out[2].refusal.find("VECTOR == 0 || M % 4 == 0"), std::string::npos) << out[2].refusal;
  const fs::path broken = version("broken", replaced(kernel_, "if (i < n)", "if (i < n) undeclared();"), space_);
  const std::vector<CodeIdentity> failed = identities(broken, {{shape_text, config_text, "sm_90"}});
  EXPECT_NE(failed.at(0).refusal.find("does not compile under this version"), std::string::npos)
      << failed.at(0).refusal;
  EXPECT_NE(failed.at(0).refusal.find("undeclared"), std::string::npos) << failed.at(0).refusal;
}

TEST_F(CodeIdentity_, CarryOverKeepsExactlyTheEntriesWhoseCodeIsTheSame) {
  const fs::path a = version("a", kernel_, space_);
  const fs::path b = version("b", "// moved\n" + kernel_,
                             replaced(space_, "  - THREADS * ITEMS <= 512", "  - THREADS * ITEMS <= 512\n  - THREADS >= 64"));
  const char* const other = "ALGORITHM=tiled,THREADS=256,ITEMS=2,VECTOR=true";
  const char* const narrow = "ALGORITHM=plain,THREADS=32,ITEMS=1,VECTOR=false";
  std::vector<PortableEntry> entries = {
      entry(a, config_text, identity(a)),                           // carried
      entry(a, other, std::nullopt),                                // no identity in the file
      entry(a, other, identity(a, other), /*relative_l2=*/2e-6),    // over b's tolerance (1e-6)
      entry(a, other, identity(a, config_text)),                    // another config's identity: code differs
      entry(a, narrow, identity(a, narrow)),                        // invalid under b (THREADS >= 64)
  };
  const SearchSpace sb = SearchSpace::load(b);
  CompilePool pool(compiler_, 2);
  const CarryOver carry = carry_over(sb, entries, pool);
  ASSERT_EQ(carry.carried.size(), 1u);
  PortableEntry expected = entries[0];
  expected.kernel = {sb.kernel_name(), sb.template_hash(), sb.definition_hash()};
  EXPECT_EQ(carry.carried[0], expected) << "only the kernel version changes";
  ASSERT_EQ(carry.refused.size(), 4u);
  const char* const reasons[] = {"no code identity", "relative L2 error 2e-06 is over this version's tolerance 1e-06",
                                 "its code changed", "THREADS >= 64"};
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(carry.refused[i].first, entries[i + 1]);
    EXPECT_NE(carry.refused[i].second.find(reasons[i]), std::string::npos) << carry.refused[i].second;
  }
}

// A parameter added to the space after an entry was measured (the flagship's
// KEY_SPLITS): the entry's config, which does not name it, is compiled with
// the default value, carried over where that gives the measured code, and
// written in the new version's form; where the default gives other code, the
// entry is refused as changed.
TEST_F(CodeIdentity_, AParameterAddedSinceTheEntryTakesItsDefault) {
  const fs::path a = version("a", kernel_, space_);
  const std::string wide_kernel =
      replaced(kernel_, "y[i] = scale * x[i]", "y[i] = (WIDE ? 2.0f : 1.0f) * scale * x[i]");
  auto with_wide = [&](const std::string& default_value) {
    return replaced(replaced(space_, "  VECTOR: [false, true]\n", "  VECTOR: [false, true]\n  WIDE: [false, true]\n"),
                    "VECTOR: false}", "VECTOR: false, WIDE: " + default_value + "}");
  };
  const fs::path b = version("b", wide_kernel, with_wide("false"));
  const fs::path c = version("c", wide_kernel, with_wide("true"));
  const SearchSpace sb = SearchSpace::load(b), sc = SearchSpace::load(c);
  ASSERT_EQ(sb.parameters().size(), 5u);
  // The strict parse still refuses the old text; the carry-over's fills it in.
  EXPECT_THROW(sb.parse_config(config_text), InputError);
  EXPECT_EQ(sb.config_string(sb.parse_config_or_default(config_text)), std::string(config_text) + ",WIDE=false");
  EXPECT_EQ(sc.config_string(sc.parse_config_or_default(config_text)), std::string(config_text) + ",WIDE=true");
  EXPECT_THROW(sb.parse_config_or_default("ALGORITHM=plain,THREADS=128,ITEMS=1,VECTOR=false,WIDE=maybe"), InputError);

  const std::vector<PortableEntry> entries = {entry(a, config_text, identity(a))};
  CompilePool pool(compiler_, 2);
  const CarryOver kept = carry_over(sb, entries, pool);
  ASSERT_EQ(kept.carried.size(), 1u) << (kept.refused.empty() ? "" : kept.refused[0].second);
  EXPECT_EQ(kept.carried[0].config, std::string(config_text) + ",WIDE=false");
  EXPECT_EQ(kept.carried[0].kernel.template_hash, sb.template_hash());
  EXPECT_EQ(sb.parse_config(kept.carried[0].config), sb.parse_config_or_default(config_text));
  // The default that doubles every output is other code: refused.
  const CarryOver refused = carry_over(sc, entries, pool);
  EXPECT_TRUE(refused.carried.empty());
  ASSERT_EQ(refused.refused.size(), 1u);
  EXPECT_NE(refused.refused[0].second.find("its code changed"), std::string::npos) << refused.refused[0].second;
}

TEST_F(CodeIdentity_, ExportWritesIdentitiesAndImportCarriesOnlyUnchangedCode) {
  const fs::path a = version("a", kernel_, space_);
  const fs::path b = version("b", "// moved\n" + kernel_, space_);
  const fs::path c = version("c", replaced(kernel_, "scale * x[i]", "scale * x[i] * x[i]"), space_);
  record(dir_ / "tuned.db", a, config_text);

  // Without --space: no identities, as before.
  ProgramResult plain = run_program(cli(), {"cache", "--db", (dir_ / "tuned.db").string(), "export-best", "--out",
                                            (dir_ / "plain.json").string()},
                                    dir_);
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_FALSE(read_portable_file(dir_ / "plain.json").entries.at(0).code.has_value());

  ProgramResult exported =
      run_program(cli(), {"cache", "--db", (dir_ / "tuned.db").string(), "export-best", "--space", a.string(), "--out",
                          (dir_ / "f.json").string(), "-j", "1"},
                  dir_);
  ASSERT_EQ(exported.code, 0) << exported.err;
  EXPECT_NE(exported.out.find("code identities of 1 of 1 entr(ies) of tiny"), std::string::npos) << exported.out;
  const PortableConfigs file = read_portable_file(dir_ / "f.json");
  ASSERT_EQ(file.entries.size(), 1u);
  EXPECT_EQ(file.entries[0].code, identity(a));

  // A comment later: carried over, stored under the new version.
  ProgramResult carried = run_program(
      cli(), {"cache", "--db", (dir_ / "b.db").string(), "import", (dir_ / "f.json").string(), "--space", b.string()},
      dir_);
  ASSERT_EQ(carried.code, 0) << carried.err;
  EXPECT_NE(carried.out.find("carried over 1 of 1 entr(ies) of other versions of tiny"), std::string::npos)
      << carried.out;
  const SearchSpace sb = SearchSpace::load(b);
  const std::vector<BestRecord> best = Store::open(dir_ / "b.db", StoreMode::read_only).all_best();
  ASSERT_EQ(best.size(), 1u);
  EXPECT_EQ(best[0].kernel.template_hash, sb.template_hash());
  EXPECT_EQ(best[0].entry.config, config_text);
  EXPECT_DOUBLE_EQ(best[0].entry.median_us, 3.5);

  // The file written without identities is refused by name, as before.
  ProgramResult old = run_program(
      cli(), {"cache", "--db", (dir_ / "old.db").string(), "import", (dir_ / "plain.json").string(), "--space",
              b.string()},
      dir_);
  EXPECT_EQ(old.code, 2);
  EXPECT_NE(old.err.find("no code identity"), std::string::npos) << old.err;

  // Changed code: refused, with or without --skip-other-versions (nothing
  // of this version is left), and no database is made.
  for (const bool skip : {false, true}) {
    std::vector<std::string> args = {"cache", "--db", (dir_ / "c.db").string(), "import",
                                     (dir_ / "f.json").string(), "--space", c.string()};
    if (skip) args.push_back("--skip-other-versions");
    ProgramResult refused = run_program(cli(), args, dir_);
    EXPECT_EQ(refused.code, 2) << refused.out;
    EXPECT_NE(refused.err.find("1 of 1 entr(ies) of other versions of tiny do not carry over"), std::string::npos)
        << refused.err;
    EXPECT_NE(refused.err.find("its code changed"), std::string::npos) << refused.err;
    EXPECT_FALSE(fs::exists(dir_ / "c.db"));
  }
}

TEST_F(CodeIdentity_, TheFileKeepsTheIdentityAndRefusesAMalformedOne) {
  const fs::path a = version("a", kernel_, space_);
  PortableConfigs configs;
  configs.entries = {entry(a, config_text, std::string(32, 'a')), entry(a, config_text, std::nullopt)};
  write_portable_file(dir_ / "f.json", configs);
  const PortableConfigs back = read_portable_file(dir_ / "f.json");
  ASSERT_EQ(back.entries.size(), 2u);
  EXPECT_EQ(back.entries[0], configs.entries[0]);
  EXPECT_EQ(back.entries[1], configs.entries[1]);
  EXPECT_FALSE(back.entries[1].code.has_value());

  std::string text = read_file(dir_ / "f.json");
  // Files written before identities existed have no "code" field at all.
  std::string without = replaced(text, "\"code\": null", "\"unused\": null");
  EXPECT_FALSE(parse_portable_json(without, "old.json").entries[1].code.has_value());
  std::string upper = replaced(text, std::string(32, 'a'), std::string(32, 'A'));
  try {
    parse_portable_json(upper, "bad.json");
    FAIL() << "an upper-case identity was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json: entries[0].code: expected 32 lowercase hex digits"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mlatune

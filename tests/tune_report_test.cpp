// `mlatune tune`'s summary of validation errors per input kind
// (cli/tune_report.h): worst over a shape's ok configs, optionally per value
// of one parameter (--errors-by), from the per-kind errors the worker sends.
#include <gtest/gtest.h>

#include <string>

#include "cli/tune_report.h"

namespace mlatune::cli {
namespace {

CandidateReport candidate(std::string config, Outcome outcome, std::vector<KindErrors> per_kind) {
  CandidateReport c;
  c.config = std::move(config);
  c.outcome = outcome;
  ValidationStats v;
  v.passed = outcome == Outcome::ok;
  v.per_kind = std::move(per_kind);
  c.validation = v;
  return c;
}

ShapeReport sample_shape() {
  ShapeReport s;
  s.shape = "B=2,T=32,H=4,D=16,R=24";
  s.results = {
      candidate("ALGORITHM=tf32x3,KEY_TILE=16", Outcome::ok,
                {{InputKind::normal, 1e-6, 1e-5}, {InputKind::row_scaled, 4e-6, 2e-5}}),
      candidate("ALGORITHM=tf32x3_wgmma,KEY_TILE=32", Outcome::ok,
                {{InputKind::normal, 2e-6, 3e-6}, {InputKind::row_scaled, 3e-6, 9e-5}}),
      candidate("ALGORITHM=tf32x3,KEY_TILE=32", Outcome::ok,
                {{InputKind::normal, 3e-6, 1e-6}, {InputKind::row_scaled, 1e-6, 1e-6}}),
      // Not ok: its errors are not an ok config's.
      candidate("ALGORITHM=tf32x3,KEY_TILE=64", Outcome::wrong_result,
                {{InputKind::normal, 5e-3, 1.0}, {InputKind::row_scaled, 5e-3, 1.0}}),
      // Ok but without per-kind errors (a replay): not counted.
      candidate("ALGORITHM=absorbed,KEY_TILE=16", Outcome::ok, {}),
  };
  return s;
}

TEST(TuneReport, KindErrorsAreTheWorstOverTheOkConfigs) {
  const std::vector<KindErrorRow> rows = kind_error_rows(sample_shape(), "");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].group, "all");
  EXPECT_EQ(rows[0].configs, 3);
  ASSERT_EQ(rows[0].worst.size(), 2u);
  EXPECT_EQ(rows[0].worst[0].kind, InputKind::normal);
  EXPECT_EQ(rows[0].worst[0].relative_l2, 3e-6);
  EXPECT_EQ(rows[0].worst[0].max_abs, 1e-5);
  EXPECT_EQ(rows[0].worst[1].kind, InputKind::row_scaled);
  EXPECT_EQ(rows[0].worst[1].relative_l2, 4e-6);
  EXPECT_EQ(rows[0].worst[1].max_abs, 9e-5);
}

TEST(TuneReport, KindErrorsByAParameterKeepOneRowPerValue) {
  const std::vector<KindErrorRow> rows = kind_error_rows(sample_shape(), "ALGORITHM");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].group, "tf32x3");
  EXPECT_EQ(rows[0].configs, 2);
  EXPECT_EQ(rows[0].worst[0].relative_l2, 3e-6);
  EXPECT_EQ(rows[0].worst[1].relative_l2, 4e-6);
  EXPECT_EQ(rows[1].group, "tf32x3_wgmma");
  EXPECT_EQ(rows[1].configs, 1);
  EXPECT_EQ(rows[1].worst[1].max_abs, 9e-5);
  // A prefix of a parameter's name is not that parameter.
  const std::vector<KindErrorRow> tiles = kind_error_rows(sample_shape(), "KEY");
  ASSERT_EQ(tiles.size(), 1u);
  EXPECT_EQ(tiles[0].group, "");
}

TEST(TuneReport, NoPerKindErrorsNoRows) {
  ShapeReport s = sample_shape();
  for (CandidateReport& c : s.results) c.validation->per_kind.clear();
  EXPECT_TRUE(kind_error_rows(s, "").empty());
  EXPECT_TRUE(kind_error_rows(s, "ALGORITHM").empty());
}

TEST(TuneReport, TheSummarySaysThemPerShape) {
  SweepReport report;
  report.shapes.push_back(sample_shape());
  report.shapes.back().outcomes = {{Outcome::ok, 4}, {Outcome::wrong_result, 1}};
  SweepSummary summary;
  summary.kernel = "fused_mla_attention";
  summary.device.name = "NVIDIA H200";
  summary.errors_by = "ALGORITHM";
  testing::internal::CaptureStdout();
  print_sweep_text(report, summary);
  std::fflush(stdout);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("worst rel-L2 per input kind over the ok configs, by ALGORITHM:"), std::string::npos) << out;
  EXPECT_NE(out.find("tf32x3 (2 configs): normal 3.00e-06, row_scaled 4.00e-06"), std::string::npos) << out;
  EXPECT_NE(out.find("tf32x3_wgmma (1 config): normal 2.00e-06, row_scaled 3.00e-06"), std::string::npos) << out;
  summary.errors_by.clear();
  testing::internal::CaptureStdout();
  print_sweep_text(report, summary);
  std::fflush(stdout);
  const std::string plain = testing::internal::GetCapturedStdout();
  EXPECT_NE(plain.find("worst rel-L2 per input kind over the 3 ok configs: normal 3.00e-06, row_scaled 4.00e-06"),
            std::string::npos)
      << plain;
}

}  // namespace
}  // namespace mlatune::cli

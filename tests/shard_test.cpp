// Shards of a sweep (tuner/shard.h): "I/N" and the Slurm variables parsed
// with clear errors, and the arithmetic that splits a candidate sequence (every
// position owned by exactly one shard, the counts the progress expects).
#include "tuner/shard.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/error.h"

namespace mlatune {
namespace {

std::string input_error_of(std::string_view text) {
  try {
    parse_shard(text);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InputError for '" << text << "'";
  return {};
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(Shard, ParsesIOfNFromZero) {
  EXPECT_EQ(parse_shard("0/1"), (Shard{0, 1}));
  EXPECT_EQ(parse_shard("3/4"), (Shard{3, 4}));
  EXPECT_EQ(parse_shard("7/8"), (Shard{7, 8}));
  EXPECT_EQ(to_string(Shard{2, 8}), "2/8");
}

TEST(Shard, RefusesWhatIsNotOneShardOfN) {
  EXPECT_TRUE(has(input_error_of("4/4"), "--shard '4/4': shard 4 is not below the shard count 4 (shards are "
                                         "numbered from 0: 0/4 .. 3/4)"));
  EXPECT_TRUE(has(input_error_of("1/0"), "the shard count must be at least 1"));
  EXPECT_TRUE(has(input_error_of("2"), "expected I/N, e.g. 0/4"));
  EXPECT_TRUE(has(input_error_of("-1/4"), "the shard index '-1' is not a whole number"));
  EXPECT_TRUE(has(input_error_of("1/+4"), "the shard count '+4' is not a whole number"));
  EXPECT_TRUE(has(input_error_of("1/4/2"), "the shard count '4/2' is not a whole number"));
  EXPECT_TRUE(has(input_error_of(" 1/4"), "is not a whole number"));
  EXPECT_TRUE(has(input_error_of("0/99999999999999999999"), "is not a whole number"));
  EXPECT_TRUE(has(input_error_of("0/2000000"), "more than the 1000000 allowed"));
}

/// A fake environment.
Environment environment(std::map<std::string, std::string> variables) {
  return [variables = std::move(variables)](const char* name) -> const char* {
    auto found = variables.find(name);
    return found == variables.end() ? nullptr : found->second.c_str();
  };
}

TEST(Shard, FromASlurmJobArray) {
  EXPECT_FALSE(shard_from_slurm(environment({})).has_value());
  EXPECT_FALSE(shard_from_slurm(environment({{"SLURM_ARRAY_TASK_ID", "3"}})).has_value());

  auto plain = shard_from_slurm(environment({{"SLURM_ARRAY_TASK_ID", "3"}, {"SLURM_ARRAY_TASK_COUNT", "8"}}));
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(plain->shard, (Shard{3, 8}));
  EXPECT_EQ(plain->source, "from SLURM_ARRAY_TASK_ID=3, SLURM_ARRAY_TASK_COUNT=8, SLURM_ARRAY_TASK_MIN=0");

  // --array=1-8: task ids from 1.
  auto from_one = shard_from_slurm(environment(
      {{"SLURM_ARRAY_TASK_ID", "8"}, {"SLURM_ARRAY_TASK_COUNT", "8"}, {"SLURM_ARRAY_TASK_MIN", "1"}}));
  ASSERT_TRUE(from_one.has_value());
  EXPECT_EQ(from_one->shard, (Shard{7, 8}));

  // --array=0-14:2: eight tasks, ids 0, 2, .., 14.
  auto stepped = shard_from_slurm(environment({{"SLURM_ARRAY_TASK_ID", "14"},
                                               {"SLURM_ARRAY_TASK_COUNT", "8"},
                                               {"SLURM_ARRAY_TASK_MIN", "0"},
                                               {"SLURM_ARRAY_TASK_STEP", "2"}}));
  ASSERT_TRUE(stepped.has_value());
  EXPECT_EQ(stepped->shard, (Shard{7, 8}));
}

TEST(Shard, SlurmValuesThatAreNotOneShardOfNAreInputErrors) {
  // --array=1,4,9: three tasks, but id 9 is not the third of a range.
  EXPECT_THROW(shard_from_slurm(environment(
                   {{"SLURM_ARRAY_TASK_ID", "9"}, {"SLURM_ARRAY_TASK_COUNT", "3"}, {"SLURM_ARRAY_TASK_MIN", "1"}})),
               InputError);
  EXPECT_THROW(shard_from_slurm(environment({{"SLURM_ARRAY_TASK_ID", "x"}, {"SLURM_ARRAY_TASK_COUNT", "3"}})),
               InputError);
  EXPECT_THROW(shard_from_slurm(environment({{"SLURM_ARRAY_TASK_ID", "0"}, {"SLURM_ARRAY_TASK_COUNT", "0"}})),
               InputError);
  EXPECT_THROW(shard_from_slurm(environment(
                   {{"SLURM_ARRAY_TASK_ID", "2"}, {"SLURM_ARRAY_TASK_COUNT", "4"}, {"SLURM_ARRAY_TASK_MIN", "3"}})),
               InputError);
  try {
    shard_from_slurm(environment({{"SLURM_ARRAY_TASK_ID", "5"}, {"SLURM_ARRAY_TASK_COUNT", "4"}}));
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "shard 5 is not below the shard count 4")) << e.what();
    EXPECT_TRUE(has(e.what(), "--array=0-3")) << e.what();
  }
}

TEST(Shard, EveryPositionHasExactlyOneShardAndTheCountsAgree) {
  for (std::uint64_t count : {1u, 2u, 3u, 4u, 7u}) {
    for (std::size_t shape = 0; shape < 9; ++shape) {
      for (std::uint64_t positions : {0u, 1u, 2u, 5u, 13u, 64u}) {
        std::map<std::uint64_t, std::uint64_t> owned;  // shard -> positions it owns
        for (std::uint64_t p = 0; p < positions; ++p) {
          int owners = 0;
          for (std::uint64_t index = 0; index < count; ++index) {
            if (shard_owns_candidate({index, count}, shape, p)) {
              ++owners;
              ++owned[index];
            }
          }
          ASSERT_EQ(owners, 1) << "position " << p << " of shape " << shape << " with " << count << " shards";
        }
        for (std::uint64_t index = 0; index < count; ++index) {
          EXPECT_EQ(shard_candidate_count({index, count}, shape, positions), owned[index])
              << index << "/" << count << " at shape " << shape << ", " << positions << " positions";
          // Balanced: no shard has more than one candidate more than another.
          EXPECT_LE(owned[index], (positions + count - 1) / count);
          EXPECT_GE(owned[index], positions / count);
        }
      }
    }
  }
}

TEST(Shard, ShapesAreDealtRoundRobin) {
  EXPECT_TRUE(shard_owns_shape({1, 3}, 1));
  EXPECT_TRUE(shard_owns_shape({1, 3}, 4));
  EXPECT_FALSE(shard_owns_shape({1, 3}, 2));
  EXPECT_TRUE(shard_owns_shape({0, 1}, 5));
}

TEST(Shard, AdaptiveStrategiesSplitShapes) {
  EXPECT_EQ(shard_split(parse_strategy_kind("brute_force")), ShardSplit::configs);
  EXPECT_EQ(shard_split(parse_strategy_kind("random")), ShardSplit::configs);
  EXPECT_EQ(shard_split(parse_strategy_kind("annealing")), ShardSplit::shapes);
  EXPECT_EQ(shard_split(parse_strategy_kind("model")), ShardSplit::shapes);
  EXPECT_FALSE(shard_needs_seed(parse_strategy_kind("brute_force")));
  EXPECT_TRUE(shard_needs_seed(parse_strategy_kind("random")));
}

}  // namespace
}  // namespace mlatune

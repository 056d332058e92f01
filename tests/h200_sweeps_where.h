// What tests/data/h200_sweeps.csv measured: its "# where:" line, which the
// tests that replay the file give the flagship by hand (--where, restrict)
// or expect in a message.  ReplayData reads the same line from the file, and
// replay_test checks that the two agree, so a change to the file's line is a
// change here, once.
#pragma once

namespace mlatune {

inline constexpr const char* kH200SweepsWhere =
    "SHAPE_BUCKETS == exact && ALGORITHM <= tf32x3_2k && KEY_SPLITS == 1 && (UNROLL == 1 || ALGORITHM < tf32x3)";

}  // namespace mlatune

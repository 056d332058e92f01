// main() of every GoogleTest program: NVRTC's compute cache off (which may
// re-execute the program once, see core/compiler.h), then the tests.
#include <gtest/gtest.h>

#include "core/compiler.h"

int main(int argc, char** argv) {
  mlatune::ensure_compute_cache_disabled(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

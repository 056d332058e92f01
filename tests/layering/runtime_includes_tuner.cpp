// Must NOT compile: runtime code (cache/) may not see the tuner.
// tests/layering.cmake builds this with mlatune_runtime's include root and
// expects the build to fail.
#include "tuner/sweep.h"
int mlatune_layering_probe() { return 0; }

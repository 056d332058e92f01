// Must NOT compile: the core may not see the runtime (cache/) above it.
#include "cache/store.h"
int mlatune_layering_probe() { return 0; }

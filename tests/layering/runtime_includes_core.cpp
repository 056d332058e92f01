// Must compile: the control for the two failing probes, so that they fail
// because of the forbidden include and not because probes cannot build.
#include "cache/dispatcher.h"
#include "core/space.h"
int mlatune_layering_probe() { return 0; }

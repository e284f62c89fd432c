// estimate_load is defined inline in load_estimate.h (it is on every decision's per-endpoint path);
// this file keeps the header compiled on its own.
#include "core/picker/scorers/load_estimate.h"

// The variant string, alone in its file: it is the one define that differs
// between builds of the same controllers, so context.cpp and gpu_loader.cpp
// compile alike for every target and ccache keeps one object of each.
#include "common.h"

#ifndef HVD_BUILD_STRING
#define HVD_BUILD_STRING "unknown"
#endif

namespace hvd {

const char* variant_string() { return HVD_BUILD_STRING; }

}  // namespace hvd

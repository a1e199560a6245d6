// The core's Status is the public one (include/nereid/status.h), shared with backends.
#pragma once

#include "nereid/status.h"

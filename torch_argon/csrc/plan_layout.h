// The plan's fixed-size layout (the meta slots) lives with the plan's Metal params, which every
// backend includes: torch_argon/metal/plan_params.h. This header only forwards to it, for the
// CUDA plan's include.
#pragma once

#include "plan_params.h"

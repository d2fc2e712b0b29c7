// moe_plan's params (plan.metal) and the plan's fixed-size layout, which every backend shares
// (the CPU and CUDA plans include this header too).
#pragma once

#include "shared/argon_params.h"

// Slots of the plan's `meta` vector (int32). Backends write every slot on every call.
enum ArgonMetaSlot {
  ARGON_META_N_ROWS = 0,      // offsets[E]: padded rows in use
  ARGON_META_N_TILES = 1,     // n_rows / tile_m
  ARGON_META_N_VALID = 2,     // entries with an id in [0, E)
  ARGON_META_N_BAD_IDS = 3,   // ids >= E or < -1 (GPU backends treat them as -1 and count them here)
  ARGON_META_SIZE = 4,
};

// Plan limits. plan_hist holds one threadgroup histogram of E counters; plan_place holds, per
// expert, one 8-bit count per 32-entry sub-block of its block (4 per 32-bit word, exact for any K
// and repeated ids: a sub-block holds at most 32 entries of one expert), so a block is a multiple
// of 128 entries. The host picks the largest block (<= ARGON_PLAN_MAX_BLOCK) whose packed counters
// fit ARGON_PLAN_PACKED_WORDS: E <= 512: 1024, E <= 1024: 512, E <= 2048: 256, E <= 4096: 128
// (ARGON_PLAN_MIN_BLOCK, which fits ARGON_PLAN_MAX_EXPERTS: asserted below).
#define ARGON_PLAN_MAX_EXPERTS 4096
#define ARGON_PLAN_MAX_BLOCK 1024
#define ARGON_PLAN_MIN_BLOCK 128
#define ARGON_PLAN_PACKED_WORDS 4096
#define ARGON_PLAN_SCAN_THREADS 1024
// The value load_plan_id gives an id outside [0, E) other than -1.
#define ARGON_BAD_ID (-2)

static_assert(ARGON_PLAN_MAX_EXPERTS * (ARGON_PLAN_MIN_BLOCK / 128) <= ARGON_PLAN_PACKED_WORDS,
              "the smallest block must fit the packed counters of the most experts");

struct ArgonPlanParams {
  argon_u32 n_entries;     // T * K
  argon_u32 top_k;         // K: entry i belongs to token i / K
  argon_u32 n_expert;      // E
  argon_u32 tile_m;        // rows per tile, a power of two
  argon_u32 block;         // entries per threadgroup of plan_hist and plan_place
  argon_u32 n_blocks;      // ceil(n_entries / block)
  argon_u32 r_max;         // rows of sorted_token / sorted_weight
  argon_u32 n_tiles;       // r_max / tile_m
  argon_u32 ids_64bit;     // ids are int64: read the low word, check the high word
  argon_u32 weight_dtype;  // ArgonDtype of topk_weights
  argon_u32 scan_threads;  // threads of plan_scan's one threadgroup (a multiple of 32, <= 1024)
};
static_assert(sizeof(ArgonPlanParams) == 44, "ArgonPlanParams: 11 x u32");

// The plan's fixed-size layout, shared by every backend (C++, CUDA, and the .metal files).
// Kept free of torch and of std:: so Metal's compiler can include it.
#pragma once

// Slots of the plan's `meta` vector (int32). Backends write every slot on every call.
enum ArgonMetaSlot {
  ARGON_META_N_ROWS = 0,      // offsets[E]: padded rows in use
  ARGON_META_N_TILES = 1,     // n_rows / tile_m
  ARGON_META_N_VALID = 2,     // entries with an id in [0, E)
  ARGON_META_N_BAD_IDS = 3,   // ids >= E or < -1 (GPU backends treat them as -1 and count them here)
  ARGON_META_SIZE = 4,
};

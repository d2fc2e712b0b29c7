// The host emulation of a CUDA launch for the gpuq kernels: every thread of a block is a fiber
// (ucontext) on the calling thread, run one at a time in ascending lane order until it reaches a
// warp exchange (each mma.sync), a block barrier or returns. A warp exchange
// completes when all 32 lanes of the warp have reached it; a lane that returns while others of
// its warp wait (a divergent mma, undefined on a GPU) makes the launch fail with an error
// instead of hanging. Blocks run one after another.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

namespace gpuq::host {

int lane_id();
int warp_id();
int thread_id();  // in the block
int block_x();
int block_y();

// Publishes `bytes` (at most 64) of this lane's data and waits until every lane of the warp has;
// then copies all 32 lanes' data into `all` (lane-major, `bytes` apart) and returns.
void warp_exchange(const void* mine, size_t bytes, void* all);

// Waits until every lane of the block has arrived (__syncthreads). A lane that returns while
// others wait here leaves them waiting: the launch fails with an error (a divergent barrier).
void block_barrier();

// cp.async in the emulation: a 16-byte copy this lane has issued (src null: 16 zero bytes),
// carried out by complete_async_copies (cp.async.wait_all). A lane that returns with copies it
// never waited for makes the launch fail with an error.
void issue_async_copy(void* dst, const void* src);
void complete_async_copies();

// Runs grid_x * grid_y blocks of `threads` lanes (a multiple of 32) of `kernel`. Returns "" or
// the error (a divergent exchange, an exception thrown by a lane).
std::string launch(int grid_x, int grid_y, int threads, const std::function<void()>& kernel);

}  // namespace gpuq::host

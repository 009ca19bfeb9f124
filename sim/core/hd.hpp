// BITLAB_HD marks a function that is compiled for the host and, under nvcc,
// also for the device, so that a CUDA kernel and the simulator run literally
// the same code (the Philox rounds, the optimizers' element updates). For the
// host compiler it is empty.
#pragma once

#if defined(__CUDACC__)
#define BITLAB_HD __host__ __device__
#else
#define BITLAB_HD
#endif

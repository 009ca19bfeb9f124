// The OpenMP thread set-up every entry point shares: the machine's cores, the
// wait policy, the division of cores among a sweep's jobs and the warning for
// more threads than cores (docs/building.md, "A busy machine").
//
// Why a wait policy at all: libgomp's default lets a thread that reaches the
// end of a parallel region spin for about 300 000 iterations (a few ms,
// GOMP_SPINCOUNT's default) before it sleeps. On a machine whose cores other
// processes also use, the spinning threads take the cores the thread still
// working needs, and every region ends late: 1000 steps of 1-bit Adam took
// 1.9 s with 1 thread and 42.8 s with 2 on a loaded 2-core machine, 2.0 s with
// 2 under OMP_WAIT_POLICY=passive. Passive waiting costs a futex
// wake per region, which the steps' regions (tens of µs and up) absorb.
#pragma once

#include <string>

namespace bitlab {

// The cores this process may run on (its CPU affinity mask; at least 1).
int machine_cores();

// Makes OMP_WAIT_POLICY=passive the policy of this process unless the user
// chose one (OMP_WAIT_POLICY or GOMP_SPINCOUNT set). libgomp reads both once,
// when it is loaded — before main() — so setting the variable here is too late
// for this process: the program is started again (execv of /proc/self/exe,
// same arguments) with the variable set. Call it first thing in main(), before
// any thread exists. Returns (without re-starting) when the policy is already
// in force or the re-start fails; BITLAB_NO_REEXEC=1 turns the re-start off.
void ensure_passive_omp_wait(char** argv);

// What the process's wait policy is, in words, for the manifest and Python:
// "passive (set by bitlab)", "OMP_WAIT_POLICY=<v> (set by the user)",
// "GOMP_SPINCOUNT=<v> (set by the user)" or "spin (libgomp's default)".
std::string omp_wait_policy_text();

// Threads for each of a sweep's `jobs` children: `requested` when > 0, else
// the cores divided among the jobs (at least 1), so that `jobs` children of
// `threads` threads never ask for more threads than the machine has cores.
int threads_per_job(int jobs, int requested, int cores);

// "" when `threads` fits the machine's cores (or is 0: all cores), else a
// warning naming both and what it costs.
std::string thread_count_warning(int threads, int cores);

}  // namespace bitlab

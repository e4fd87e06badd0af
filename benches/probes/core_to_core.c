/*
 * One-way latency of a cache line between CPU 0 and CPU 1 (two processes, one line written by
 * each side, the shape of a message ping-pong), for the benchmark scripts to record before
 * every launch. On a VM the figure is not a constant: the host moves the vCPUs between its
 * cores, and the same two vCPUs were seen at ~25, ~60 and ~250 ns one way from one launch to
 * the next (SMT siblings, one core complex, two). Every library's small-message figures move
 * with it, so each launch's figure is read next to this one.
 *
 *   cc -O2 -o target/core_to_core benches/probes/core_to_core.c && target/core_to_core [ROUNDS]
 *
 * Prints the one-way latency in ns (median of 5 slices of ROUNDS round trips, default 20000).
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void bind_to(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (sched_setaffinity(0, sizeof s, &s) != 0) {
        perror("core_to_core: sched_setaffinity (needs CPUs 0 and 1)");
        exit(1);
    }
}

int main(int argc, char **argv)
{
    long rounds = argc > 1 ? atol(argv[1]) : 20000;
    if (rounds <= 0) {
        fprintf(stderr, "core_to_core: ROUNDS must be a positive number\n");
        return 2;
    }
    /* Two lines 256 bytes apart (no adjacent-line prefetch between them). */
    volatile uint64_t *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("core_to_core: mmap");
        return 1;
    }
    volatile uint64_t *ping = m, *pong = m + 32;
    const uint64_t stop = ~(uint64_t)0;
    pid_t child = fork();
    if (child < 0) {
        perror("core_to_core: fork");
        return 1;
    }
    if (child == 0) {
        bind_to(1);
        for (uint64_t i = 1;; i++) {
            uint64_t v;
            while ((v = *ping) != i)
                if (v == stop)
                    _exit(0);
            *pong = i;
        }
    }
    bind_to(0);
    double slice[5];
    uint64_t i = 1;
    for (int k = 0; k < 5; k++) {
        double t0 = now();
        for (long j = 0; j < rounds; j++, i++) {
            *ping = i;
            while (*pong != i)
                ;
        }
        slice[k] = (now() - t0) / rounds / 2 * 1e9;
    }
    *ping = stop;
    waitpid(child, NULL, 0);
    qsort(slice, 5, sizeof slice[0], cmp);
    printf("%.0f\n", slice[2]);
    return 0;
}

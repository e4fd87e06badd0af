/*
 * machine_limits: the hardware floors that point-to-point figures are judged against, measured
 * on this machine (docs/performance.md quotes them).
 *
 *   cc -O2 -pthread -o target/machine_limits benches/probes/machine_limits.c && target/machine_limits
 *
 * 1. cache-line ping-pong between CPU 0 and CPU 1: one shared line, and two lines (each side
 *    writes its own, the shape of a message ping-pong); half round trip in ns;
 * 2. single-thread memcpy bandwidth at message sizes (GB/s = 10^9 B/s), source and destination
 *    reused (they stay in cache when they fit);
 * 3. single copy: process_vm_readv from a parent process into a child on the other CPU.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (sched_setaffinity(0, sizeof s, &s)) perror("sched_setaffinity");
}

#define ROUNDS 1000000L

struct lines {
    _Alignas(128) volatile uint64_t a;
    _Alignas(128) volatile uint64_t b;
};
static struct lines L;
static int two_lines;

static void *pong(void *arg)
{
    (void)arg;
    pin(1);
    for (uint64_t i = 1; i <= ROUNDS; i++) {
        if (two_lines) {
            while (L.a != i) __builtin_ia32_pause();
            L.b = i;
        } else {
            while (L.a != 2 * i - 1) __builtin_ia32_pause();
            L.a = 2 * i;
        }
    }
    return NULL;
}

static double pingpong(int two)
{
    pthread_t t;
    L.a = L.b = 0;
    two_lines = two;
    pthread_create(&t, NULL, pong, NULL);
    pin(0);
    double t0 = now();
    for (uint64_t i = 1; i <= ROUNDS; i++) {
        if (two) {
            L.a = i;
            while (L.b != i) __builtin_ia32_pause();
        } else {
            L.a = 2 * i - 1;
            while (L.a != 2 * i) __builtin_ia32_pause();
        }
    }
    double dt = now() - t0;
    pthread_join(t, NULL);
    return dt / ROUNDS / 2 * 1e9;
}

static const size_t sizes[] = {4096, 65536, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static long reps_for(size_t n)
{
    long r = (long)((4UL << 30) / n);
    return r < 8 ? 8 : r;
}

int main(void)
{
    printf("cache-line ping-pong CPU0<->CPU1, one shared line: %.0f ns one way\n", pingpong(0));
    printf("cache-line ping-pong CPU0<->CPU1, one line per side: %.0f ns one way\n", pingpong(1));

    size_t max = sizes[NSIZES - 1];
    unsigned char *src = aligned_alloc(4096, max), *dst = aligned_alloc(4096, max);
    memset(src, 1, max);
    memset(dst, 2, max);
    pin(0);
    printf("%-10s %14s %22s\n", "size", "memcpy GB/s", "process_vm_readv GB/s");
    double mc[NSIZES];
    for (size_t k = 0; k < NSIZES; k++) {
        size_t n = sizes[k];
        long reps = reps_for(n);
        memcpy(dst, src, n);
        double t0 = now();
        for (long r = 0; r < reps; r++) {
            memcpy(dst, src, n);
            __asm__ volatile("" ::: "memory");
        }
        mc[k] = (double)n * reps / (now() - t0) / 1e9;
    }
    fflush(stdout);
    int pfd[2];
    if (pipe(pfd)) return 1;
    pid_t parent = getpid();
    pid_t child = fork();
    if (child == 0) {
        pin(1);
        close(pfd[0]);
        unsigned char *local = aligned_alloc(4096, max);
        memset(local, 3, max);
        double res[NSIZES];
        for (size_t k = 0; k < NSIZES; k++) {
            size_t n = sizes[k];
            long reps = reps_for(n) / 4 + 1;
            struct iovec l = {local, n}, r = {src, n};
            double t0 = now();
            for (long i = 0; i < reps; i++)
                if (process_vm_readv(parent, &l, 1, &r, 1, 0) != (ssize_t)n) {
                    perror("process_vm_readv");
                    _exit(1);
                }
            res[k] = (double)n * reps / (now() - t0) / 1e9;
        }
        if (write(pfd[1], res, sizeof res) != sizeof res) _exit(1);
        _exit(0);
    }
    close(pfd[1]);
    double cma[NSIZES];
    ssize_t got = read(pfd[0], cma, sizeof cma);
    waitpid(child, NULL, 0);
    for (size_t k = 0; k < NSIZES; k++) {
        if (got == sizeof cma)
            printf("%-10zu %14.1f %22.1f\n", sizes[k], mc[k], cma[k]);
        else
            printf("%-10zu %14.1f %22s\n", sizes[k], mc[k], "failed");
    }
    return 0;
}

/*
 * osu_like: the point-to-point tests of rcomm-bench (benches/src/bin/rcomm-bench.rs) for an
 * installed MPI, with the methodology of the OSU micro-benchmarks 7.2 (osu_latency, osu_bw,
 * osu_bibw), so that rcomm and MPI are measured by the same loop. Written for rcomm; it is not
 * OSU's code.
 *
 *   mpirun -np 2 osu_like latency|bw|bibw [-m [MIN:]MAX] [-i ITERS] [-x WARMUP] [-W WINDOW]
 *                                         [-b single|multiple] [--json]
 *   osu_like --selftest      (no MPI launch needed: prints the pattern words rcomm-bench checks)
 *
 * Methodology (see benches/src/osu.rs, which documents the same):
 *  - sizes: powers of two from MIN to MAX (default 1:4194304), K/M/G suffixes;
 *  - per size: skip warm-up + iterations timed; "large" = size > 8192. Latency: 10000+100 small,
 *    1000+10 large. bw/bibw: 100+10 windows small, 20+2 large. -i / -x set both classes (OSU);
 *  - every timed iteration is timed on its own with MPI_Wtime and the times summed (OSU 7);
 *  - latency = half the round trip: MPI_Send from s_buf, MPI_Recv into r_buf;
 *  - bw: rank 0 posts a window of W MPI_Isend (tag 100), MPI_Waitall, then receives a 4-byte
 *    ack (tag 101); rank 1 posts W MPI_Irecv, MPI_Waitall, sends the ack;
 *  - bibw: both ranks post W MPI_Irecv then W MPI_Isend, wait for the sends then the receives;
 *    bytes are counted both ways;
 *  - buffers are page-aligned and reused; -b single (OSU's default) sends every message of a
 *    window from one buffer and receives all into one buffer, -b multiple gives every window
 *    slot its own send and receive buffer (allocated per size, as OSU does);
 *  - MPI_Barrier before each size;
 *  - checks, outside the timed loop: send buffers are filled with a pattern that depends on
 *    (size, rank, slot), receive buffers with poison; after the timed loop the receiver
 *    compares the last received buffers with the sender's pattern and both ranks agree on the
 *    result. A mismatch is reported and the program exits with status 1.
 *
 * Output on rank 0: an OSU-style table ("# Size  Latency (us)" / "# Size  Bandwidth (MB/s)"), or
 * with --json one object per size: {"size":N,"latency_us":X} / {"size":N,"bandwidth_MBps":X}
 * (headers then go to stderr).
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LARGE_MESSAGE_SIZE 8192UL
#define MAX_SIZE (1UL << 30)
#define MEM_LIMIT (4UL << 30)
#define MAX_WINDOW 1000

#define TAG_LAT 1
#define TAG_DATA 100
#define TAG_DATA_BACK 10
#define TAG_ACK 101
#define TAG_CHECK 102

enum test { LATENCY, BW, BIBW };

static const char *test_name[] = {"latency", "bw", "bibw"};

struct opts {
    enum test test;
    size_t min, max;
    long iterations, warmup; /* -1: OSU defaults */
    int window;
    int multiple;
    int json;
};

/* ---- data pattern: identical to rcomm_benches::osu::{seed, poison_seed, fill} ---- */

static uint64_t seed_of(size_t size, unsigned rank, size_t slot)
{
    return ((uint64_t)size * 0x9E3779B97F4A7C15ULL) ^ ((uint64_t)rank << 48) ^ ((uint64_t)slot << 32) ^
           0x0005DEECE66DULL;
}

static uint64_t poison_of(size_t size, unsigned rank, size_t slot)
{
    return seed_of(size, rank, slot) ^ 0xA5A5A5A5A5A5A5A5ULL;
}

static inline uint64_t word(uint64_t seed, uint64_t k)
{
    uint64_t x = seed ^ (k * 0xBF58476D1CE4E5B9ULL);
    x ^= x >> 31;
    x *= 0x94D049BB133111EBULL;
    return x ^ (x >> 29);
}

/* Words are stored little-endian (x86: memcpy of the native word). */
static void fill(unsigned char *buf, size_t n, uint64_t seed)
{
    size_t k = 0;
    for (; (k + 1) * 8 <= n; k++) {
        uint64_t w = word(seed, k);
        memcpy(buf + k * 8, &w, 8);
    }
    if (k * 8 < n) {
        uint64_t w = word(seed, k);
        memcpy(buf + k * 8, &w, n - k * 8);
    }
}

/* Offset of the first wrong byte, or -1. */
static long first_mismatch(const unsigned char *buf, size_t n, uint64_t seed)
{
    size_t k = 0;
    for (; k * 8 < n; k++) {
        uint64_t w = word(seed, k);
        unsigned char e[8];
        memcpy(e, &w, 8);
        size_t m = n - k * 8 < 8 ? n - k * 8 : 8;
        if (memcmp(buf + k * 8, e, m) != 0) {
            for (size_t i = 0; i < m; i++)
                if (buf[k * 8 + i] != e[i]) return (long)(k * 8 + i);
        }
    }
    return -1;
}

/* ---- options ---- */

static int parse_size(const char *s, size_t *out)
{
    char *end;
    if (*s == '\0') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s) return -1;
    unsigned long long mult = 1;
    if (*end == 'k' || *end == 'K') mult = 1ULL << 10, end++;
    else if (*end == 'm' || *end == 'M') mult = 1ULL << 20, end++;
    else if (*end == 'g' || *end == 'G') mult = 1ULL << 30, end++;
    if (*end != '\0') return -1;
    if (v > (unsigned long long)MAX_SIZE * 4 / mult) return -1;
    *out = (size_t)(v * mult);
    return 0;
}

static int parse_range(const char *s, size_t *min, size_t *max)
{
    char buf[128];
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    char *colon = strchr(buf, ':');
    *min = 1;
    *max = 4UL << 20;
    if (!colon) return parse_size(buf, max);
    *colon = '\0';
    if (buf[0] && parse_size(buf, min)) return -1;
    if (colon[1]) {
        if (parse_size(colon + 1, max)) return -1;
    } else if (*max < *min) {
        *max = *min;
    }
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: osu_like latency|bw|bibw [-m [MIN:]MAX] [-i ITERS] [-x WARMUP] [-W WINDOW] "
               "[-b single|multiple] [--json]\n       osu_like --selftest\n");
}

/* 0: ok, 1: help, 2: bad usage (message in err). */
static int parse_args(int argc, char **argv, struct opts *o, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    o->min = 1;
    o->max = 4UL << 20;
    o->iterations = -1;
    o->warmup = -1;
    o->window = 64;
    int have_test = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 1;
        if (!strcmp(a, "--json")) { o->json = 1; continue; }
        if (!strcmp(a, "latency") || !strcmp(a, "bw") || !strcmp(a, "bibw")) {
            o->test = !strcmp(a, "latency") ? LATENCY : !strcmp(a, "bw") ? BW : BIBW;
            have_test = 1;
            continue;
        }
        if (a[0] == '-' && strchr("mixWb", a[1]) && a[1] && a[2] == '\0') {
            if (!v) { snprintf(err, errlen, "%s needs a value", a); return 2; }
            i++;
            char *end;
            switch (a[1]) {
            case 'm':
                if (parse_range(v, &o->min, &o->max) || o->min > o->max) {
                    snprintf(err, errlen, "bad size range '%s'", v);
                    return 2;
                }
                if (o->max > MAX_SIZE) {
                    snprintf(err, errlen, "sizes above 1 GiB are not supported ('%s')", v);
                    return 2;
                }
                break;
            case 'i':
                o->iterations = strtol(v, &end, 10);
                if (*end || o->iterations < 1) { snprintf(err, errlen, "bad -i '%s'", v); return 2; }
                break;
            case 'x':
                o->warmup = strtol(v, &end, 10);
                if (*end || o->warmup < 0) { snprintf(err, errlen, "bad -x '%s'", v); return 2; }
                break;
            case 'W':
                o->window = (int)strtol(v, &end, 10);
                if (*end || o->window < 1 || o->window > MAX_WINDOW) {
                    snprintf(err, errlen, "bad -W '%s' (1..%d)", v, MAX_WINDOW);
                    return 2;
                }
                break;
            case 'b':
                if (!strcmp(v, "single")) o->multiple = 0;
                else if (!strcmp(v, "multiple")) o->multiple = 1;
                else { snprintf(err, errlen, "bad -b '%s' (single|multiple)", v); return 2; }
                break;
            }
            continue;
        }
        snprintf(err, errlen, "unknown argument '%s'", a);
        return 2;
    }
    if (!have_test) { snprintf(err, errlen, "which test? latency, bw or bibw"); return 2; }
    return 0;
}

/* ---- buffers ---- */

static unsigned char *alloc_buf(size_t n)
{
    void *p = NULL;
    long page = sysconf(_SC_PAGESIZE);
    if (posix_memalign(&p, (size_t)page, n ? n : 1)) {
        fprintf(stderr, "osu_like: cannot allocate %zu bytes\n", n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}

/* ---- the tests ---- */

static int rank, peer;

/* Both ranks learn both check results; returns nonzero (after printing on rank 0) on error. */
static int agree(enum test t, size_t size, long slot, long off)
{
    long mine[3] = {off >= 0, slot, off}, theirs[3];
    MPI_Sendrecv(mine, 3, MPI_LONG, peer, TAG_CHECK, theirs, 3, MPI_LONG, peer, TAG_CHECK, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    long *bad = mine[0] ? mine : theirs[0] ? theirs : NULL;
    int who = mine[0] ? rank : peer;
    if (mine[0] && theirs[0] && peer < rank) bad = theirs, who = peer;
    if (!bad) return 0;
    if (rank == 0)
        fprintf(stderr,
                "osu_like: %s, size %zu: rank %d received wrong data in receive buffer %ld at byte %ld (the check "
                "pass after the timed loop compares the last message with the sender's pattern)\n",
                test_name[t], size, who, bad[1], bad[2]);
    return 1;
}

static double latency(size_t n, long iters, long skip, unsigned char *s, unsigned char *r, int *failed)
{
    double total = 0.0;
    fill(s, n, seed_of(n, (unsigned)rank, 0));
    fill(r, n, poison_of(n, (unsigned)rank, 0));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        for (long i = 0; i < iters + skip; i++) {
            double t0 = 0.0;
            if (i >= skip) t0 = MPI_Wtime();
            MPI_Send(s, (int)n, MPI_CHAR, peer, TAG_LAT, MPI_COMM_WORLD);
            MPI_Recv(r, (int)n, MPI_CHAR, peer, TAG_LAT, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (i >= skip) total += MPI_Wtime() - t0;
        }
    } else {
        for (long i = 0; i < iters + skip; i++) {
            MPI_Recv(r, (int)n, MPI_CHAR, peer, TAG_LAT, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(s, (int)n, MPI_CHAR, peer, TAG_LAT, MPI_COMM_WORLD);
        }
    }
    long off = first_mismatch(r, n, seed_of(n, (unsigned)peer, 0));
    *failed = agree(LATENCY, n, 0, off);
    return total;
}

static double bandwidth(enum test t, size_t n, long iters, long skip, int window, int multiple, unsigned char **s,
                        unsigned char **r, int *failed)
{
    static MPI_Request sreq[MAX_WINDOW], rreq[MAX_WINDOW];
    static MPI_Status sstat[MAX_WINDOW], rstat[MAX_WINDOW]; /* as OSU's reqstat */
    int nbufs = multiple ? window : 1;
    int sender = t == BIBW || rank == 0, receiver = t == BIBW || rank == 1;
    int stag = rank == 0 ? TAG_DATA : TAG_DATA_BACK, rtag = rank == 0 ? TAG_DATA_BACK : TAG_DATA;
    char ack[4] = {0};
    double total = 0.0;
    for (int j = 0; j < nbufs; j++) {
        fill(s[j], n, seed_of(n, (unsigned)rank, (size_t)j));
        fill(r[j], n, poison_of(n, (unsigned)rank, (size_t)j));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (long i = 0; i < iters + skip; i++) {
        double t0 = 0.0;
        if (rank == 0 && i >= skip) t0 = MPI_Wtime();
        if (receiver)
            for (int j = 0; j < window; j++)
                MPI_Irecv(r[multiple ? j : 0], (int)n, MPI_CHAR, peer, rtag, MPI_COMM_WORLD, &rreq[j]);
        if (sender)
            for (int j = 0; j < window; j++)
                MPI_Isend(s[multiple ? j : 0], (int)n, MPI_CHAR, peer, stag, MPI_COMM_WORLD, &sreq[j]);
        if (sender) MPI_Waitall(window, sreq, sstat);
        if (receiver) MPI_Waitall(window, rreq, rstat);
        if (t == BW) {
            if (rank == 0) MPI_Recv(ack, 4, MPI_CHAR, peer, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            else MPI_Send(ack, 4, MPI_CHAR, peer, TAG_ACK, MPI_COMM_WORLD);
        }
        if (rank == 0 && i >= skip) total += MPI_Wtime() - t0;
    }
    long slot = 0, off = -1;
    if (receiver)
        for (int j = 0; j < nbufs && off < 0; j++) {
            off = first_mismatch(r[j], n, seed_of(n, (unsigned)peer, (size_t)j));
            slot = j;
        }
    *failed = agree(t, n, slot, off);
    return total;
}

static void selftest(void)
{
    /* The first two pattern words of size 8, rank 1, slot 0 (rcomm_benches::osu has the same). */
    uint64_t sd = seed_of(8, 1, 0);
    printf("seed %016llx words %016llx %016llx poison %016llx\n", (unsigned long long)sd,
           (unsigned long long)word(sd, 0), (unsigned long long)word(sd, 1),
           (unsigned long long)word(poison_of(8, 1, 0), 0));
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--selftest")) {
        selftest();
        return 0;
    }
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    struct opts o;
    char err[256] = "";
    int pr = parse_args(argc, argv, &o, err, sizeof err);
    if (pr) {
        if (rank == 0) {
            if (pr == 2) fprintf(stderr, "osu_like: %s\n", err);
            usage(pr == 2 ? stderr : stdout);
        }
        MPI_Finalize();
        return pr == 2 ? 2 : 0;
    }
    if (size != 2) {
        if (rank == 0)
            fprintf(stderr, "osu_like: needs exactly 2 processes; this job has %d (mpirun -np 2 osu_like ...)\n",
                    size);
        MPI_Finalize();
        return 1;
    }
    peer = 1 - rank;
    int bwtest = o.test != LATENCY;
    size_t bufs = bwtest && o.multiple ? (size_t)o.window : 1;
    if (2 * bufs * o.max > MEM_LIMIT) {
        if (rank == 0)
            fprintf(stderr, "osu_like: %s up to %zu bytes needs %zu MiB per rank (limit %lu MiB); lower -m or -W\n",
                    test_name[o.test], o.max, (2 * bufs * o.max) >> 20, MEM_LIMIT >> 20);
        MPI_Finalize();
        return 2;
    }
    long it_small = o.test == LATENCY ? 10000 : 100, sk_small = o.test == LATENCY ? 100 : 10;
    long it_large = o.test == LATENCY ? 1000 : 20, sk_large = o.test == LATENCY ? 10 : 2;
    if (o.iterations > 0) it_small = it_large = o.iterations;
    if (o.warmup >= 0) sk_small = sk_large = o.warmup;

    if (rank == 0) {
        char lib[MPI_MAX_LIBRARY_VERSION_STRING];
        int len;
        MPI_Get_library_version(lib, &len);
        lib[strcspn(lib, "\n,")] = '\0';
        for (char *c = lib; *c; c++)
            if (*c == '\t') *c = ' ';
        FILE *h = o.json ? stderr : stdout;
        fprintf(h, "# OSU-style %s Test (osu_%s methodology)\n",
                o.test == LATENCY ? "Latency" : o.test == BW ? "Bandwidth" : "Bi-Directional Bandwidth",
                test_name[o.test]);
        if (bwtest)
            fprintf(h, "# %s | buffers: %s | window: %d\n", lib, o.multiple ? "multiple" : "single", o.window);
        else
            fprintf(h, "# %s | buffers: %s | window: -\n", lib, o.multiple ? "multiple" : "single");
        fprintf(h, "%-10s%20s\n", "# Size", o.test == LATENCY ? "Latency (us)" : "Bandwidth (MB/s)");
        fflush(h);
    }

    /* Single buffers: one pair for the largest size, allocated once (OSU). */
    unsigned char *single_s = NULL, *single_r = NULL;
    if (!o.multiple) {
        single_s = alloc_buf(o.max);
        single_r = alloc_buf(o.max);
    }
    int status = 0;
    for (size_t n = o.min; n <= o.max; n = n ? n * 2 : 1) {
        if (bwtest && n == 0) continue;
        long iters = n > LARGE_MESSAGE_SIZE ? it_large : it_small;
        long skip = n > LARGE_MESSAGE_SIZE ? sk_large : sk_small;
        double total;
        int failed = 0;
        if (!bwtest) {
            unsigned char *s = single_s, *r = single_r;
            if (o.multiple) s = alloc_buf(n), r = alloc_buf(n);
            total = latency(n, iters, skip, s, r, &failed);
            if (o.multiple) free(s), free(r);
        } else {
            unsigned char *s[MAX_WINDOW], *r[MAX_WINDOW];
            int nb = o.multiple ? o.window : 1;
            for (int j = 0; j < nb; j++) {
                s[j] = o.multiple ? alloc_buf(n) : single_s;
                r[j] = o.multiple ? alloc_buf(n) : single_r;
            }
            total = bandwidth(o.test, n, iters, skip, o.window, o.multiple, s, r, &failed);
            if (o.multiple)
                for (int j = 0; j < nb; j++) free(s[j]), free(r[j]);
        }
        if (failed) {
            status = 1;
            break;
        }
        if (rank == 0) {
            double v;
            if (o.test == LATENCY) v = total * 1e6 / (2.0 * (double)iters);
            else v = (double)n / 1e6 * (double)iters * o.window * (o.test == BIBW ? 2.0 : 1.0) / total;
            if (o.json) {
                if (o.test == LATENCY) printf("{\"size\":%zu,\"latency_us\":%.3f}\n", n, v);
                else printf("{\"size\":%zu,\"bandwidth_MBps\":%.2f}\n", n, v);
            } else {
                printf("%-10zu%20.2f\n", n, v);
            }
            fflush(stdout);
        }
    }
    free(single_s);
    free(single_r);
    MPI_Finalize();
    return status;
}

/*
 * osu_like: the point-to-point tests of rcomm-bench (benches/src/bin/rcomm-bench.rs) for an
 * installed MPI, with the methodology of the OSU micro-benchmarks 7.2 (osu_latency, osu_bw,
 * osu_bibw), so that rcomm and MPI are measured by the same loop. Written for rcomm; it is not
 * OSU's code.
 *
 *   mpirun -np 2 osu_like latency|bw|bibw [-m [MIN:]MAX] [-i ITERS] [-x WARMUP] [-W WINDOW]
 *                                         [-b single|multiple] [--json]
 *   mpirun -np N osu_like allreduce|bcast|barrier|allgather|reduce_scatter|alltoall|reduce|gather|scatter
 *                        [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-i STEPBYTES]
 *                        [-n ITERS] [-w WARMUP] [-d float|double|int32|int64] [-o sum|prod|min|max]
 *                        [-r ROOT] [-c CHECK] [-a 0|1|2|3] [--json]
 *   osu_like --selftest      (no MPI launch needed: prints the pattern words and check references
 *                             that rcomm-bench uses)
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
 *    (size, rank, slot), receive buffers with poison; before each iteration's sends the sender
 *    stamps the iteration number into at most three 8-byte words of each send buffer (first,
 *    middle, last: 24 bytes whatever the size, rcomm_benches::osu::stamp), so every iteration's
 *    messages differ; after the timed loop the receiver checks that every receive buffer holds
 *    exactly the sender's last message (pattern stamped with the last iteration) and both ranks
 *    agree on the result. A mismatch is reported (size, rank, buffer, byte, and whether it is
 *    poison, an earlier iteration's stamp or wrong data) and the program exits with status 1.
 *    --inject-stale ITER (testing the check): rank 1 receives every message after iteration
 *    ITER into a spare buffer, as a receive that stops writing would.
 *
 * Collective modes (allreduce, bcast, barrier, allgather, reduce_scatter, alltoall, reduce, gather,
 * scatter): the methodology of `rcomm-bench coll` (nccl-tests' all_reduce_perf & co., see
 * benches/src/coll.rs), so that rcomm and MPI are measured by the same loop:
 *  - sizes -b..-e times -f (or plus -i bytes); a size S is S/sizeof(type) elements, cut per
 *    operation as nccl-tests' getCollByteCount (rcomm_benches::coll::Layout): allgather and gather
 *    send count/n and receive n*(count/n), reduce_scatter and scatter the other way round, alltoall
 *    n*(count/n) both ways; the printed size is the larger buffer, the printed count the count
 *    passed to the call (MPI_Allgather's sendcount, MPI_Reduce_scatter_block's recvcount, ...);
 *  - the calls: MPI_Allreduce, MPI_Bcast, MPI_Barrier, MPI_Allgather, MPI_Reduce_scatter_block,
 *    MPI_Alltoall, MPI_Reduce, MPI_Gather, MPI_Scatter. The variants are those rcomm-bench coll
 *    prints for the operation: allreduce out of place (send, recv) and in place (MPI_IN_PLACE);
 *    bcast in place only (one buffer; its out-of-place columns are N/A); the others out of place
 *    only (rcomm has no in-place form of them; their in-place columns are N/A); barrier a time;
 *  - per size and variant -w warm-up calls, MPI_Barrier, -n calls back to back timed as one loop,
 *    successive calls on successive windows of buffers sized for the largest size of the sweep;
 *    per-rank time per call combined with -a (0 rank 0, 1 average, 2 min, 3 max);
 *    algbw = size / time, busbw = algbw x 2(n-1)/n (allreduce), (n-1)/n (allgather,
 *    reduce_scatter, alltoall, gather, scatter), 1 (bcast, reduce);
 *  - then -c check passes: inputs from the same data pattern as rcomm-bench
 *    (rcomm_benches::coll::input), outputs poisoned, one call, every rank compares its output with
 *    the same sequential reference as rcomm_benches::coll::expected (undefined outputs, on the
 *    non-root ranks of reduce and gather, are not compared), wrong elements summed over ranks
 *    (any: exit status 1);
 *  - output: nccl-tests' table, or with --json rcomm-bench coll's JSON objects ("algo":"mpi").
 * `osu_like --selftest` prints pattern words and the check reference of every operation on 3 ranks,
 * which benches/tests/osu_like.rs compares with rcomm_benches (no MPI launch needed).
 *
 * Point-to-point output on rank 0: an OSU-style table ("# Size  Latency (us)" / "# Size  Bandwidth (MB/s)"), or
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
    long inject_stale; /* -1: off */
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

/* Byte p of the pattern of seed. */
static unsigned char pattern_byte(uint64_t seed, size_t p)
{
    return (unsigned char)(word(seed, p / 8) >> (8 * (p % 8)));
}

/* ---- iteration stamps: identical to rcomm_benches::osu::{stamp_ranges, stamp_word, stamp} ---- */

#define STAMP_KEY 0x57A39C0DE1F2B468ULL

struct range {
    size_t lo, hi;
};

/* First word, a word in the middle (on a word boundary), last 8 bytes; disjoint, so short messages
 * get fewer (empty) or shorter ranges. */
static void stamp_ranges(size_t n, struct range r[3])
{
    r[0].lo = 0, r[0].hi = n < 8 ? n : 8;
    if (n > 8) r[2].lo = n - 8 > 8 ? n - 8 : 8, r[2].hi = n;
    else r[2].lo = r[2].hi = n;
    size_t m = (n / 2) & ~(size_t)7;
    if (m >= 8 && m + 8 <= r[2].lo) r[1].lo = m, r[1].hi = m + 8;
    else r[1].lo = r[1].hi = n;
}

static uint64_t stamp_word(uint64_t seed, uint64_t iteration, int which)
{
    return word(seed ^ STAMP_KEY, (uint64_t)which) ^ (iteration + 1);
}

/* Iteration `iteration`'s stamp over a send buffer holding the pattern of seed (at most 24 bytes). */
static void stamp(unsigned char *buf, size_t n, uint64_t seed, uint64_t iteration)
{
    struct range r[3];
    stamp_ranges(n, r);
    for (int k = 0; k < 3; k++) {
        uint64_t w = stamp_word(seed, iteration, k);
        memcpy(buf + r[k].lo, &w, r[k].hi - r[k].lo);
    }
}

/* What a receive buffer holds at its first wrong byte (rcomm_benches::osu::Wrong). */
enum wrong { W_NONE, W_POISON, W_STALE, W_STAMP, W_PATTERN };

struct mismatch {
    long kind, off, found;
};

/* Whether buf holds exactly the sender's last message: the pattern of seed stamped with iteration
 * `last` (rcomm_benches::osu::check_last). */
static struct mismatch check_last(const unsigned char *buf, size_t n, uint64_t seed, uint64_t poison, uint64_t last)
{
    struct mismatch m = {W_NONE, -1, 0};
    unsigned char *want = malloc(n ? n : 1);
    if (!want) {
        fprintf(stderr, "osu_like: cannot allocate %zu bytes for the check\n", n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    fill(want, n, seed);
    stamp(want, n, seed, last);
    if (memcmp(buf, want, n) == 0) {
        free(want);
        return m;
    }
    size_t off = 0;
    while (buf[off] == want[off]) off++;
    free(want);
    m.off = (long)off;
    size_t end = off + 8 < n ? off + 8 : n;
    int poisoned = 1;
    for (size_t p = off; p < end && poisoned; p++) poisoned = buf[p] == pattern_byte(poison, p);
    if (poisoned) {
        m.kind = W_POISON;
        return m;
    }
    struct range r[3];
    stamp_ranges(n, r);
    for (int k = 0; k < 3; k++) {
        if (off < r[k].lo || off >= r[k].hi) continue;
        uint64_t got = 0;
        memcpy(&got, buf + r[k].lo, r[k].hi - r[k].lo);
        /* Undo the base: what is left is iteration + 1. */
        uint64_t found = (got ^ stamp_word(seed, 0, k) ^ 1) - 1;
        if (r[k].hi - r[k].lo == 8 && found < last) m.kind = W_STALE, m.found = (long)found;
        else m.kind = W_STAMP;
        return m;
    }
    m.kind = W_PATTERN;
    return m;
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
               "[-b single|multiple] [--json]\n"
               "       osu_like allreduce|bcast|barrier|allgather|reduce_scatter|alltoall|reduce|gather|scatter\n"
               "                [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-i STEPBYTES] "
               "[-n ITERS] [-w WARMUP]\n"
               "                [-d float|double|int32|int64] [-o sum|prod|min|max] [-r ROOT] [-c CHECK] "
               "[-a 0|1|2|3] [--json]\n"
               "       osu_like --selftest\n");
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
    o->inject_stale = -1;
    int have_test = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 1;
        if (!strcmp(a, "--json")) { o->json = 1; continue; }
        if (!strcmp(a, "--inject-stale")) {
            char *end;
            if (!v) { snprintf(err, errlen, "%s needs a value", a); return 2; }
            o->inject_stale = strtol(v, &end, 10);
            if (*end || o->inject_stale < 0) { snprintf(err, errlen, "bad --inject-stale '%s'", v); return 2; }
            i++;
            continue;
        }
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

/* Both ranks learn both check results (the first wrong receive buffer: slot and mismatch); returns
 * nonzero (after printing on rank 0) on error. */
static int agree(enum test t, size_t size, uint64_t last, long slot, struct mismatch m)
{
    long mine[4] = {m.kind, slot, m.off, m.found}, theirs[4];
    MPI_Sendrecv(mine, 4, MPI_LONG, peer, TAG_CHECK, theirs, 4, MPI_LONG, peer, TAG_CHECK, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    long *bad = mine[0] ? mine : theirs[0] ? theirs : NULL;
    int who = mine[0] ? rank : peer;
    if (mine[0] && theirs[0] && peer < rank) bad = theirs, who = peer;
    if (!bad) return 0;
    if (rank == 0) {
        char what[256];
        long off = bad[2], found = bad[3];
        switch (bad[0]) {
        case W_POISON:
            snprintf(what, sizeof what,
                     "byte %ld still holds the poison written before the timed loop (no message was received there)",
                     off);
            break;
        case W_STALE:
            snprintf(what, sizeof what,
                     "byte %ld holds the stamp of iteration %ld, not of the last iteration %llu (the buffer was not "
                     "written after iteration %ld)",
                     off, found, (unsigned long long)last, found);
            break;
        case W_STAMP:
            snprintf(what, sizeof what, "byte %ld is an iteration stamp that is not the last iteration's (%llu)", off,
                     (unsigned long long)last);
            break;
        default:
            snprintf(what, sizeof what, "byte %ld differs from the sender's data pattern", off);
            break;
        }
        fprintf(stderr,
                "osu_like: check failed: %s, size %zu: rank %d, receive buffer %ld: %s (after the timed loop every "
                "receive buffer must hold the sender's last message: its data pattern stamped with iteration %llu, "
                "the last of %llu counting warm-up)\n",
                test_name[t], size, who, bad[1], what, (unsigned long long)last, (unsigned long long)last + 1);
    }
    return 1;
}

/* --inject-stale: whether rank 1 receives iteration i into a spare buffer. */
static long inject_stale = -1;

static int stale_at(long i)
{
    return rank == 1 && inject_stale >= 0 && i > inject_stale;
}

static double latency(size_t n, long iters, long skip, unsigned char *s, unsigned char *r, int *failed)
{
    double total = 0.0;
    uint64_t mine = seed_of(n, (unsigned)rank, 0), poison = poison_of(n, (unsigned)rank, 0);
    unsigned char *spare = inject_stale >= 0 && rank == 1 ? alloc_buf(n) : NULL;
    fill(s, n, mine);
    fill(r, n, poison);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        for (long i = 0; i < iters + skip; i++) {
            double t0 = 0.0;
            /* This iteration's message differs from every other's: 24 bytes, before the timer starts. */
            stamp(s, n, mine, (uint64_t)i);
            if (i >= skip) t0 = MPI_Wtime();
            MPI_Send(s, (int)n, MPI_CHAR, peer, TAG_LAT, MPI_COMM_WORLD);
            MPI_Recv(r, (int)n, MPI_CHAR, peer, TAG_LAT, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (i >= skip) total += MPI_Wtime() - t0;
        }
    } else {
        for (long i = 0; i < iters + skip; i++) {
            /* Before waiting for the ping. */
            stamp(s, n, mine, (uint64_t)i);
            MPI_Recv(stale_at(i) ? spare : r, (int)n, MPI_CHAR, peer, TAG_LAT, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(s, (int)n, MPI_CHAR, peer, TAG_LAT, MPI_COMM_WORLD);
        }
    }
    free(spare);
    uint64_t last = (uint64_t)(iters + skip - 1);
    struct mismatch m = check_last(r, n, seed_of(n, (unsigned)peer, 0), poison, last);
    *failed = agree(LATENCY, n, last, 0, m);
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
    unsigned char *spare[MAX_WINDOW];
    int nspare = inject_stale >= 0 && rank == 1 ? nbufs : 0;
    for (int j = 0; j < nspare; j++) spare[j] = alloc_buf(n);
    for (int j = 0; j < nbufs; j++) {
        fill(s[j], n, seed_of(n, (unsigned)rank, (size_t)j));
        fill(r[j], n, poison_of(n, (unsigned)rank, (size_t)j));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (long i = 0; i < iters + skip; i++) {
        double t0 = 0.0;
        /* This iteration's messages differ from every other's: 24 bytes per buffer, before the timer
         * starts (the previous window's sends have completed). */
        if (sender)
            for (int j = 0; j < nbufs; j++) stamp(s[j], n, seed_of(n, (unsigned)rank, (size_t)j), (uint64_t)i);
        if (rank == 0 && i >= skip) t0 = MPI_Wtime();
        unsigned char **into = stale_at(i) ? spare : r;
        if (receiver)
            for (int j = 0; j < window; j++)
                MPI_Irecv(into[multiple ? j : 0], (int)n, MPI_CHAR, peer, rtag, MPI_COMM_WORLD, &rreq[j]);
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
    for (int j = 0; j < nspare; j++) free(spare[j]);
    uint64_t last = (uint64_t)(iters + skip - 1);
    long slot = 0;
    struct mismatch m = {W_NONE, -1, 0};
    if (receiver)
        for (int j = 0; j < nbufs && m.kind == W_NONE; j++) {
            m = check_last(r[j], n, seed_of(n, (unsigned)peer, (size_t)j), poison_of(n, (unsigned)rank, (size_t)j),
                           last);
            slot = j;
        }
    *failed = agree(t, n, last, slot, m);
    return total;
}


/* ================= collective modes (nccl-tests methodology, as rcomm-bench coll) ================= */

enum coll_op {
    C_ALLREDUCE,
    C_BCAST,
    C_BARRIER,
    C_ALLGATHER,
    C_REDUCE_SCATTER,
    C_ALLTOALL,
    C_REDUCE,
    C_GATHER,
    C_SCATTER,
    C_NOPS
};
enum coll_type { T_FLOAT, T_DOUBLE, T_INT32, T_INT64 };
enum coll_redop { R_SUM, R_PROD, R_MIN, R_MAX };
/* rcomm_benches::coll::Layout and BusFactor */
enum coll_layout { L_SAME, L_GATHER, L_SCATTER, L_ALLTOALL, L_EMPTY };
enum coll_bus { B_TWO_N1_N, B_N1_N, B_ONE, B_TIME };

/* One row of rcomm_benches::coll::OPS, with the variants rcomm-bench coll prints for the
 * operation (coll_run::variants: out of place, in place). */
struct coll_info {
    const char *name, *perf;
    int reduces, rooted;
    enum coll_layout layout;
    enum coll_bus bus;
    int oop, ip;
};

static const struct coll_info coll_ops[C_NOPS] = {
    [C_ALLREDUCE] = {"allreduce", "all_reduce_perf", 1, 0, L_SAME, B_TWO_N1_N, 1, 1},
    [C_BCAST] = {"bcast", "broadcast_perf", 0, 1, L_SAME, B_ONE, 0, 1},
    [C_BARRIER] = {"barrier", "", 0, 0, L_EMPTY, B_TIME, 1, 0},
    [C_ALLGATHER] = {"allgather", "all_gather_perf", 0, 0, L_GATHER, B_N1_N, 1, 0},
    [C_REDUCE_SCATTER] = {"reduce_scatter", "reduce_scatter_perf", 1, 0, L_SCATTER, B_N1_N, 1, 0},
    [C_ALLTOALL] = {"alltoall", "alltoall_perf", 0, 0, L_ALLTOALL, B_N1_N, 1, 0},
    [C_REDUCE] = {"reduce", "reduce_perf", 1, 1, L_SAME, B_ONE, 1, 0},
    [C_GATHER] = {"gather", "gather_perf", 0, 1, L_GATHER, B_N1_N, 1, 0},
    [C_SCATTER] = {"scatter", "scatter_perf", 0, 1, L_SCATTER, B_N1_N, 1, 0},
};

static const char *coll_type_name[] = {"float", "double", "int32", "int64"};
static const size_t coll_type_size[] = {4, 8, 4, 8};
static const char *coll_redop_name[] = {"sum", "prod", "min", "max"};

/* An operation name (rcomm_benches::coll::parse_op's aliases for the ones osu_like has), or -1. */
static int coll_op_of(const char *s)
{
    if (!strcmp(s, "reduce-scatter") || !strcmp(s, "reducescatter")) return C_REDUCE_SCATTER;
    if (!strcmp(s, "broadcast")) return C_BCAST;
    for (int k = 0; k < C_NOPS; k++)
        if (!strcmp(s, coll_ops[k].name)) return k;
    return -1;
}

struct copts {
    enum coll_op op;
    enum coll_type type;
    enum coll_redop redop;
    size_t min, max, factor, step;
    long iters, warmup, check;
    int average, root, json;
};

/* rcomm_benches::coll::Counts: elements in the send and receive buffers, and the count passed
 * to the call (nccl-tests' getCollByteCount). */
struct ccounts {
    size_t send, recv, param;
};

static struct ccounts ccounts_of(enum coll_op op, size_t count, int n)
{
    size_t nn = (size_t)(n > 0 ? n : 1), per = count / nn;
    struct ccounts c = {0, 0, 0};
    switch (coll_ops[op].layout) {
    case L_SAME: c.send = c.recv = c.param = count; break;
    case L_GATHER: c.send = per, c.recv = per * nn, c.param = per; break;
    case L_SCATTER: c.send = per * nn, c.recv = per, c.param = per; break;
    case L_ALLTOALL: c.send = c.recv = per * nn, c.param = per; break;
    case L_EMPTY: break;
    }
    return c;
}

/* The larger buffer, in elements (the printed size is this times the element size). */
static size_t ctotal(struct ccounts c)
{
    return c.send > c.recv ? c.send : c.recv;
}

static double cbus_factor(enum coll_op op, int n)
{
    switch (coll_ops[op].bus) {
    case B_TWO_N1_N: return 2.0 * (n - 1) / n;
    case B_N1_N: return (double)(n - 1) / n;
    default: return 1.0;
    }
}

/* rcomm_benches::coll::mix */
static uint64_t cmix(uint64_t seed, unsigned rank, uint64_t idx)
{
    uint64_t x = seed ^ ((uint64_t)rank * 0x9E3779B97F4A7C15ULL) ^ (idx * 0xBF58476D1CE4E5B9ULL) ^ 0x0005DEECE66DULL;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBULL;
    x ^= x >> 29;
    return x;
}

/* rcomm_benches::coll::input, as a double (exact for these types and values). */
static double cinput(const struct copts *o, int n, int rank, size_t idx, uint64_t seed)
{
    uint64_t h = cmix(seed, (unsigned)rank, idx);
    int is_float = o->type == T_FLOAT || o->type == T_DOUBLE;
    if (!is_float) {
        if (o->redop == R_PROD) {
            double v = (double)(h % 3) + 1.0;
            return ((h >> 8) & 1) ? -v : v;
        }
        return (double)(h % 201) - 100.0;
    }
    if (o->redop == R_PROD) {
        double sign = ((h >> 8) & 1) ? -1.0 : 1.0;
        double mag = (n > 0 && idx % (size_t)n == (size_t)rank) ? ((h & 1) ? 2.0 : 0.5) : 1.0;
        return sign * mag;
    }
    return ((double)(h % 65) - 32.0) / 4.0;
}

static void cstore(enum coll_type t, void *buf, size_t i, double v)
{
    switch (t) {
    case T_FLOAT: ((float *)buf)[i] = (float)v; break;
    case T_DOUBLE: ((double *)buf)[i] = v; break;
    case T_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case T_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    }
}

static double cload(enum coll_type t, const void *buf, size_t i)
{
    switch (t) {
    case T_FLOAT: return ((const float *)buf)[i];
    case T_DOUBLE: return ((const double *)buf)[i];
    case T_INT32: return ((const int32_t *)buf)[i];
    case T_INT64: return (double)((const int64_t *)buf)[i];
    }
    return 0.0;
}

static void cfill(const struct copts *o, int n, int rank, void *buf, size_t count, uint64_t seed)
{
    for (size_t i = 0; i < count; i++) cstore(o->type, buf, i, cinput(o, n, rank, i, seed));
}

/* The sequential reference (rcomm_benches::coll::reference) of element idx over all ranks'
 * inputs, in rank order. Integers: exact with wrapping (computed in uint64_t and truncated to
 * the type); floats: combined in double and rounded once to the type. */
static double creduce(const struct copts *o, int n, size_t idx, uint64_t seed)
{
    if (o->type == T_FLOAT || o->type == T_DOUBLE) {
        double acc = cinput(o, n, 0, idx, seed);
        for (int q = 1; q < n; q++) {
            double x = cinput(o, n, q, idx, seed);
            acc = o->redop == R_SUM ? acc + x : o->redop == R_PROD ? acc * x : o->redop == R_MIN ? (x < acc ? x : acc) : (x > acc ? x : acc);
        }
        return o->type == T_FLOAT ? (double)(float)acc : acc;
    }
    int64_t first = (int64_t)cinput(o, n, 0, idx, seed);
    uint64_t acc = (uint64_t)first;
    int64_t mm = first;
    for (int q = 1; q < n; q++) {
        int64_t x = (int64_t)cinput(o, n, q, idx, seed);
        if (o->redop == R_SUM) acc += (uint64_t)x;
        else if (o->redop == R_PROD) acc *= (uint64_t)x;
        else if (o->redop == R_MIN) mm = x < mm ? x : mm;
        else mm = x > mm ? x : mm;
    }
    if (o->redop == R_MIN || o->redop == R_MAX) return (double)mm;
    return o->type == T_INT32 ? (double)(int32_t)(uint32_t)acc : (double)(int64_t)acc;
}

/* rcomm_benches::coll::expected: what element j of this rank's output must be (per: the count
 * passed to the call); 0 where the operation leaves it undefined (non-root ranks of reduce and
 * gather). */
static int cexpect(const struct copts *o, int n, int rank, size_t j, size_t per, uint64_t seed, double *want)
{
    size_t mine = (size_t)rank * per;
    switch (o->op) {
    case C_ALLREDUCE: *want = creduce(o, n, j, seed); return 1;
    case C_REDUCE:
        if (rank != o->root) return 0;
        *want = creduce(o, n, j, seed);
        return 1;
    case C_BCAST: *want = cinput(o, n, o->root, j, seed); return 1;
    case C_ALLGATHER: *want = cinput(o, n, (int)(j / per), j % per, seed); return 1;
    case C_GATHER:
        if (rank != o->root) return 0;
        *want = cinput(o, n, (int)(j / per), j % per, seed);
        return 1;
    case C_REDUCE_SCATTER: *want = creduce(o, n, mine + j, seed); return 1;
    case C_SCATTER: *want = cinput(o, n, o->root, mine + j, seed); return 1;
    case C_ALLTOALL: *want = cinput(o, n, (int)(j / per), mine + j % per, seed); return 1;
    default: return 0;
    }
}

/* Wrong elements of this rank's output (recv elements; per: the call's count). Floats: the
 * data keeps every partial result exact up to 64 ranks; allowed 2 eps |want|. */
static long ccheck(const struct copts *o, int n, int rank, const void *out, size_t recv, size_t per, size_t size,
                   uint64_t seed)
{
    long wrong = 0;
    int is_float = o->type == T_FLOAT || o->type == T_DOUBLE;
    double eps = o->type == T_FLOAT ? 1.1920929e-07 : 2.220446049250313e-16;
    for (size_t j = 0; j < recv; j++) {
        double want;
        if (!cexpect(o, n, rank, j, per, seed, &want)) continue;
        double got = cload(o->type, out, j);
        double tol = is_float ? 2.0 * eps * (want < 0 ? -want : want) : 0.0;
        double d = got - want;
        if (!(got == want || (d < 0 ? -d : d) <= tol)) {
            if (wrong == 0)
                fprintf(stderr, "osu_like: rank %d: %s size %zu: first wrong element %zu: got %g, expected %g\n", rank,
                        coll_ops[o->op].name, size, j, got, want);
            wrong++;
        }
    }
    return wrong;
}

/* The call under test (coll_run::call). s and r are this iteration's windows; in place, r only. */
static void ccall(const struct copts *o, MPI_Datatype mt, MPI_Op mo, struct ccounts c, void *s, void *r, int ip)
{
    int p = (int)c.param;
    MPI_Comm w = MPI_COMM_WORLD;
    switch (o->op) {
    case C_ALLREDUCE: MPI_Allreduce(ip ? MPI_IN_PLACE : s, r, p, mt, mo, w); break;
    case C_BCAST: MPI_Bcast(r, p, mt, o->root, w); break;
    case C_BARRIER: MPI_Barrier(w); break;
    case C_ALLGATHER: MPI_Allgather(s, p, mt, r, p, mt, w); break;
    case C_REDUCE_SCATTER: MPI_Reduce_scatter_block(s, r, p, mt, mo, w); break;
    case C_ALLTOALL: MPI_Alltoall(s, p, mt, r, p, mt, w); break;
    case C_REDUCE: MPI_Reduce(s, r, p, mt, mo, o->root, w); break;
    case C_GATHER: MPI_Gather(s, p, mt, r, p, mt, o->root, w); break;
    case C_SCATTER: MPI_Scatter(s, p, mt, r, p, mt, o->root, w); break;
    case C_NOPS: break;
    }
}

/* The largest size of the sweep (rcomm_benches::coll::sizes). */
static size_t clast_size(const struct copts *o)
{
    size_t last = 0;
    for (size_t s = o->min; s <= o->max;) {
        last = s;
        size_t next = o->factor > 1 ? (s ? s * o->factor : 1) : s + (o->step ? o->step : 1);
        if (next <= s) break;
        s = next;
    }
    return last;
}

/* nccl-tests' getFloatStr */
static void float_str(double value, int width, char *str)
{
    int power = 0;
    for (double val = 1.0; value >= val && power < 400; val *= 10.0) power++;
    if (power < width - 2) sprintf(str, "%*.2f", width, value);
    else if (power < width - 1) sprintf(str, "%*.1f", width, value);
    else if (power < width + 1) sprintf(str, "%*.0f", width, value);
    else sprintf(str, "%*.1e", width, value);
}

struct cres {
    int present;
    double time_us, algbw, busbw;
    long wrong; /* -1: not checked */
};

static void print_body(const struct cres *r, int timeonly)
{
    if (!r->present) {
        printf("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
        return;
    }
    char t[64], a[64], b[64];
    float_str(r->time_us, 7, t);
    if (timeonly) strcpy(a, "   N/A"), strcpy(b, "   N/A");
    else float_str(r->algbw, 6, a), float_str(r->busbw, 6, b);
    if (r->wrong < 0) printf("  %s  %s  %s     N/A", t, a, b);
    else printf("  %s  %s  %s  %6ld", t, a, b, r->wrong);
}

static void json_body(const struct cres *r, int timeonly)
{
    printf("\"time_us\":%.3f,", r->time_us);
    if (timeonly) printf("\"algbw\":null,\"busbw\":null,");
    else printf("\"algbw\":%.4f,\"busbw\":%.4f,", r->algbw, r->busbw);
    if (r->wrong < 0) printf("\"wrong\":null");
    else printf("\"wrong\":%ld", r->wrong);
}

static int parse_long(const char *v, long lo, long *out)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < lo) return -1;
    *out = x;
    return 0;
}

/* 0 ok, 1 help, 2 bad usage */
static int parse_coll(int argc, char **argv, struct copts *o, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    o->min = o->max = 32UL << 20;
    o->factor = 1;
    o->step = 1UL << 20;
    o->iters = 20;
    o->warmup = 5;
    o->check = 1;
    o->average = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 1;
        if (!strcmp(a, "--json")) { o->json = 1; continue; }
        if (coll_op_of(a) >= 0) { o->op = (enum coll_op)coll_op_of(a); continue; }
        if (a[0] != '-' || !a[1] || a[2] || !strchr("befinwdorca", a[1])) {
            snprintf(err, errlen, "unknown argument '%s'", a);
            return 2;
        }
        if (!v) { snprintf(err, errlen, "%s needs a value", a); return 2; }
        i++;
        long x;
        switch (a[1]) {
        case 'b': if (parse_size(v, &o->min)) goto bad; break;
        case 'e': if (parse_size(v, &o->max)) goto bad; break;
        case 'i': if (parse_size(v, &o->step)) goto bad; break;
        case 'f': if (parse_long(v, 1, &x)) goto bad; o->factor = (size_t)x; break;
        case 'n': if (parse_long(v, 1, &o->iters)) goto bad; break;
        case 'w': if (parse_long(v, 0, &o->warmup)) goto bad; break;
        case 'c': if (parse_long(v, 0, &o->check)) goto bad; break;
        case 'r': if (parse_long(v, 0, &x)) goto bad; o->root = (int)x; break;
        case 'a': if (parse_long(v, 0, &x) || x > 3) goto bad; o->average = (int)x; break;
        case 'd': {
            int k = -1;
            for (int t = 0; t < 4; t++) if (!strcmp(v, coll_type_name[t])) k = t;
            if (k < 0) goto bad;
            o->type = (enum coll_type)k;
            break;
        }
        case 'o': {
            int k = -1;
            for (int t = 0; t < 4; t++) if (!strcmp(v, coll_redop_name[t])) k = t;
            if (k < 0) goto bad;
            o->redop = (enum coll_redop)k;
            break;
        }
        }
        continue;
    bad:
        snprintf(err, errlen, "bad value '%s' for %s", v, a);
        return 2;
    }
    if (o->min > o->max) { snprintf(err, errlen, "-b is above -e"); return 2; }
    if (o->max > MAX_SIZE) { snprintf(err, errlen, "sizes above 1 GiB are not supported"); return 2; }
    return 0;
}

static int coll_main(int argc, char **argv)
{
    int n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    struct copts o;
    char err[256] = "";
    int pr = parse_coll(argc, argv, &o, err, sizeof err);
    if (!pr && coll_ops[o.op].rooted && o.root >= n) snprintf(err, sizeof err, "-r %d: the job has %d ranks", o.root, n), pr = 2;
    if (pr) {
        if (rank == 0) {
            if (pr == 2) fprintf(stderr, "osu_like: %s\n", err);
            usage(pr == 2 ? stderr : stdout);
        }
        return pr == 2 ? 2 : 0;
    }
    MPI_Datatype mt = o.type == T_FLOAT ? MPI_FLOAT : o.type == T_DOUBLE ? MPI_DOUBLE : o.type == T_INT32 ? MPI_INT32_T : MPI_INT64_T;
    MPI_Op mo = o.redop == R_SUM ? MPI_SUM : o.redop == R_PROD ? MPI_PROD : o.redop == R_MIN ? MPI_MIN : MPI_MAX;
    size_t es = coll_type_size[o.type];
    const struct coll_info *info = &coll_ops[o.op];
    int timeonly = info->bus == B_TIME;
    FILE *h = o.json ? stderr : stdout;
    if (rank == 0) {
        char lib[MPI_MAX_LIBRARY_VERSION_STRING];
        int len;
        MPI_Get_library_version(lib, &len);
        lib[strcspn(lib, "\n,")] = '\0';
        for (char *c = lib; *c; c++)
            if (*c == '\t') *c = ' ';
        fprintf(h, "# osu_like %s: nccl-tests layout (%s) | %s\n", info->name, *info->perf ? info->perf : "time only",
                lib);
        fprintf(h, "# nRanks %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %ld iters: %ld validation: %ld average: %d\n",
                n, o.min, o.max, o.factor > 1 ? o.factor : o.step, o.factor > 1 ? "factor" : "bytes", o.warmup, o.iters,
                o.check, o.average);
        if (!o.json) {
            printf("#\n# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place\n", "", "", "", "", "");
            printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type", "redop",
                   "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
            printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s\n", "(B)", "(elements)", "", "", "", "(us)",
                   "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)");
        }
        fflush(h);
    }
    /* Buffers for the largest size of the sweep (rcomm-bench: Bufs, in elements). */
    size_t cap = timeonly ? 1 : ctotal(ccounts_of(o.op, clast_size(&o) / es, n));
    if (cap == 0) cap = 1;
    unsigned char *sbuf = alloc_buf(cap * es), *rbuf = alloc_buf(cap * es);
    cfill(&o, n, rank, sbuf, cap, 99);
    cfill(&o, n, rank, rbuf, cap, 99);
    double bw_sum = 0.0;
    int bw_count = 0, failed = 0, status = 0;
    long rep = 0;
    for (size_t size = timeonly ? 0 : o.min; size <= (timeonly ? 0 : o.max);) {
        struct ccounts cc = ccounts_of(o.op, size / es, n);
        size_t total = ctotal(cc);
        struct cres res[2];
        memset(res, 0, sizeof res);
        for (int ip = 0; ip < 2; ip++) {
            if (ip ? !info->ip : !info->oop) continue;
            size_t steps = total ? cap / total : 1;
            if (steps == 0) steps = 1;
            double t = 0.0;
            for (long it = -o.warmup; it < o.iters; it++) {
                if (it == 0) {
                    MPI_Barrier(MPI_COMM_WORLD);
                    t = MPI_Wtime();
                }
                size_t at = total * es * ((size_t)(it < 0 ? it + o.warmup : it) % steps);
                ccall(&o, mt, mo, cc, sbuf + at, rbuf + at, ip);
            }
            t = (MPI_Wtime() - t) / (double)o.iters;
            double comb = t;
            if (o.average == 0) MPI_Bcast(&comb, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
            else {
                MPI_Allreduce(&t, &comb, 1, MPI_DOUBLE, o.average == 1 ? MPI_SUM : o.average == 2 ? MPI_MIN : MPI_MAX,
                              MPI_COMM_WORLD);
                if (o.average == 1) comb /= n;
            }
            long wrong = timeonly || !o.check ? -1 : 0;
            for (long c = 0; c < (timeonly ? 0 : o.check); c++) {
                rep++;
                uint64_t seed = 0x00C0FFEEULL ^ ((uint64_t)rep << 8) ^ (uint64_t)ip;
                /* Outputs poisoned, inputs from (rank, index, pass); in place the input lies at the
                 * start of the receive buffer, and only the root's matters for bcast and scatter. */
                cfill(&o, n, rank, rbuf, ip ? total : cc.recv, seed ^ 0xA5A5A5A5A5A5A5A5ULL);
                if (ip) {
                    if ((o.op != C_BCAST && o.op != C_SCATTER) || rank == o.root) cfill(&o, n, rank, rbuf, cc.send, seed);
                } else {
                    cfill(&o, n, rank, sbuf, cc.send, seed);
                }
                ccall(&o, mt, mo, cc, sbuf, rbuf, ip);
                long mine = ccheck(&o, n, rank, rbuf, cc.recv, cc.param, total * es, seed), sum = 0;
                MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
                wrong += sum;
                if (sum) break;
            }
            cfill(&o, n, rank, sbuf, cap, 99);
            cfill(&o, n, rank, rbuf, cap, 99);
            double factor = cbus_factor(o.op, n);
            res[ip].present = 1;
            res[ip].time_us = comb * 1e6;
            res[ip].algbw = comb > 0 ? (double)(total * es) / 1e9 / comb : 0.0;
            res[ip].busbw = res[ip].algbw * factor;
            res[ip].wrong = wrong;
            if (!timeonly) bw_sum += res[ip].busbw, bw_count++;
            if (wrong > 0) failed++, status = 1;
        }
        if (rank == 0) {
            const char *tn = timeonly ? "none" : coll_type_name[o.type];
            const char *rn = info->reduces ? coll_redop_name[o.redop] : "none";
            int root = info->rooted ? o.root : -1;
            if (o.json) {
                printf("{\"op\":\"%s\",\"algo\":\"mpi\",\"size\":%zu,\"count\":%zu,\"type\":\"%s\",\"redop\":\"%s\",\"root\":%d,",
                       info->name, total * es, cc.param, tn, rn, root);
                if (res[0].present) json_body(&res[0], timeonly);
                else printf("\"time_us\":null,\"algbw\":null,\"busbw\":null,\"wrong\":null");
                if (res[1].present) printf(",\"inplace\":{"), json_body(&res[1], timeonly), printf("}}\n");
                else printf(",\"inplace\":null}\n");
            } else {
                printf("%12zu  %12zu  %8s  %6s  %6d", total * es, cc.param, tn, rn, root);
                print_body(&res[0], timeonly);
                print_body(&res[1], timeonly);
                printf("\n");
            }
            fflush(stdout);
        }
        if (timeonly) break;
        size_t next = o.factor > 1 ? (size ? size * o.factor : 1) : size + (o.step ? o.step : 1);
        if (next <= size) break;
        size = next;
    }
    if (rank == 0) {
        fprintf(h, "# %-20s : %d %s\n", "Out of bounds values", failed, failed ? "FAILED" : "OK");
        if (bw_count) fprintf(h, "# %-20s : %g\n", "Avg bus bandwidth", bw_sum / bw_count);
        else fprintf(h, "# %-20s : N/A\n", "Avg bus bandwidth");
        fprintf(h, "#\n");
    }
    free(sbuf);
    free(rbuf);
    return status;
}

static void selftest(void)
{
    /* The first two pattern words of size 8, rank 1, slot 0 (rcomm_benches::osu has the same). */
    uint64_t sd = seed_of(8, 1, 0);
    printf("seed %016llx words %016llx %016llx poison %016llx\n", (unsigned long long)sd,
           (unsigned long long)word(sd, 0), (unsigned long long)word(sd, 1),
           (unsigned long long)word(poison_of(8, 1, 0), 0));
    /* rcomm_benches::coll::mix(99, 1, 7) */
    printf("coll mix %016llx\n", (unsigned long long)cmix(99, 1, 7));
    /* Messages of size n, rank 1, slot 2, stamped with iteration 5 (rcomm_benches::osu::stamp). */
    static const size_t stamp_sizes[] = {1, 7, 8, 9, 16, 17, 24, 33};
    for (size_t k = 0; k < sizeof stamp_sizes / sizeof stamp_sizes[0]; k++) {
        size_t sn = stamp_sizes[k];
        unsigned char b[64];
        uint64_t ss = seed_of(sn, 1, 2);
        fill(b, sn, ss);
        stamp(b, sn, ss, 5);
        printf("stamp n %zu iteration 5:", sn);
        for (size_t i = 0; i < sn; i++) printf(" %02x", b[i]);
        printf("\n");
    }
    /* The check pass's reference on 3 ranks, 13 elements (blocks of 4: one left over), root 2,
     * the seed of pass 1 out of place: every output element of every rank ("-": undefined).
     * benches/tests/osu_like.rs compares these with rcomm_benches::coll::expected. */
    const int n = 3, count = 13;
    const uint64_t seed = 0x00C0FFEEULL ^ (1ULL << 8);
    for (int op = 0; op < C_NOPS; op++) {
        if (coll_ops[op].bus == B_TIME) continue;
        for (int t = 0; t < 4; t++) {
            for (int ro = 0; ro < (coll_ops[op].reduces ? 4 : 1); ro++) {
                struct copts o;
                memset(&o, 0, sizeof o);
                o.op = (enum coll_op)op, o.type = (enum coll_type)t, o.redop = (enum coll_redop)ro, o.root = n - 1;
                struct ccounts c = ccounts_of(o.op, (size_t)count, n);
                for (int r = 0; r < n; r++) {
                    printf("expect %s %s %s n %d root %d count %d rank %d seed %llu:", coll_ops[op].name,
                           coll_type_name[t], coll_redop_name[ro], n, o.root, count, r, (unsigned long long)seed);
                    for (size_t j = 0; j < c.recv; j++) {
                        double want;
                        if (cexpect(&o, n, r, j, c.param, seed, &want)) printf(" %.17g", want);
                        else printf(" -");
                    }
                    printf("\n");
                }
            }
        }
    }
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--selftest")) {
        selftest();
        return 0;
    }
    MPI_Init(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        if (coll_op_of(argv[i]) >= 0) {
            int st = coll_main(argc, argv);
            MPI_Finalize();
            return st;
        }
    }
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
    inject_stale = o.inject_stale;
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

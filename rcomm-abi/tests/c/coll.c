/* Every collective of the C binding, blocking and non-blocking, in place where the standard
 * allows it, against references computed here. */
#include "check.h"
#include <string.h>

static int n, me;

/* M_r = [[r+1, 1], [1, 0]]: products of these depend on the order. */
static void mat_of(int r, int *m) {
    m[0] = r + 1; m[1] = 1; m[2] = 1; m[3] = 0;
}

static void matmul(const int *a, const int *b, int *out) {
    int t[4] = {a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3],
                a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3]};
    memcpy(out, t, sizeof t);
}

/* inout = in * inout, element by element (an element is one 2x2 matrix). */
static void matmul_op(void *in, void *inout, int *len, MPI_Datatype *dt) {
    int *a = in, *b = inout;
    for (int i = 0; i < *len; i++) matmul(a + 4 * i, b + 4 * i, b + 4 * i);
}

static void isum_op(void *in, void *inout, int *len, MPI_Datatype *dt) {
    int *a = in, *b = inout;
    CHECK(*dt == MPI_INT);
    for (int i = 0; i < *len; i++) b[i] += a[i];
}

/* The product M_lo * ... * M_{hi-1}. */
static void mat_prod(int lo, int hi, int *out) {
    int id[4] = {1, 0, 0, 1};
    memcpy(out, id, sizeof id);
    for (int r = lo; r < hi; r++) {
        int m[4];
        mat_of(r, m);
        matmul(out, m, out);
    }
}

static void test_moves(void) {
    MPI_Request q;
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Ibarrier(MPI_COMM_WORLD, &q));
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    CHECK(q == MPI_REQUEST_NULL);

    /* bcast, blocking, non-blocking, large-count */
    int root = n - 1, b[5];
    for (int i = 0; i < 5; i++) b[i] = me == root ? 100 + i : -1;
    OK(MPI_Bcast(b, 5, MPI_INT, root, MPI_COMM_WORLD));
    for (int i = 0; i < 5; i++) CHECK(b[i] == 100 + i);
    double d[3];
    for (int i = 0; i < 3; i++) d[i] = me == 0 ? 0.5 * i : 0;
    OK(MPI_Ibcast(d, 3, MPI_DOUBLE, 0, MPI_COMM_WORLD, &q));
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    for (int i = 0; i < 3; i++) CHECK(d[i] == 0.5 * i);
    for (int i = 0; i < 5; i++) b[i] = me == root ? 7 * i : 0;
    OK(MPI_Bcast_c(b, (MPI_Count)5, MPI_INT, root, MPI_COMM_WORLD));
    for (int i = 0; i < 5; i++) CHECK(b[i] == 7 * i);

    /* gather, in place, non-blocking */
    int s2[2] = {me * 10, me * 10 + 1}, g[64];
    memset(g, -1, sizeof g);
    OK(MPI_Gather(s2, 2, MPI_INT, g, 2, MPI_INT, 0, MPI_COMM_WORLD));
    if (me == 0)
        for (int i = 0; i < n; i++) CHECK(g[2 * i] == i * 10 && g[2 * i + 1] == i * 10 + 1);
    memset(g, -1, sizeof g);
    if (me == root) {
        g[2 * me] = me * 10; g[2 * me + 1] = me * 10 + 1;
        OK(MPI_Gather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, g, 2, MPI_INT, root, MPI_COMM_WORLD));
        for (int i = 0; i < n; i++) CHECK(g[2 * i] == i * 10 && g[2 * i + 1] == i * 10 + 1);
    } else {
        OK(MPI_Gather(s2, 2, MPI_INT, NULL, 0, MPI_DATATYPE_NULL, root, MPI_COMM_WORLD));
    }
    memset(g, -1, sizeof g);
    OK(MPI_Igather(s2, 2, MPI_INT, g, 2, MPI_INT, 0, MPI_COMM_WORLD, &q));
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    if (me == 0)
        for (int i = 0; i < n; i++) CHECK(g[2 * i] == i * 10 && g[2 * i + 1] == i * 10 + 1);

    /* gatherv: rank i sends i+1 ints; the root places them in reverse rank order, a gap
     * between blocks */
    int sv[8], rc[8], ds[8], off = 0;
    for (int k = 0; k <= me; k++) sv[k] = me * 100 + k;
    for (int i = n - 1; i >= 0; i--) { rc[i] = i + 1; ds[i] = off; off += i + 2; }
    for (int pass = 0; pass < 2; pass++) {
        memset(g, -1, sizeof g);
        if (pass == 0) {
            OK(MPI_Gatherv(sv, me + 1, MPI_INT, g, rc, ds, MPI_INT, 0, MPI_COMM_WORLD));
        } else {
            OK(MPI_Igatherv(sv, me + 1, MPI_INT, g, rc, ds, MPI_INT, 0, MPI_COMM_WORLD, &q));
            OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        }
        if (me == 0)
            for (int i = 0; i < n; i++) {
                for (int k = 0; k <= i; k++) CHECK(g[ds[i] + k] == i * 100 + k);
                CHECK(g[ds[i] + i + 1] == -1);
            }
    }

    /* scatter, in place, non-blocking */
    int all[64], r3[3];
    for (int i = 0; i < 3 * n; i++) all[i] = i;
    OK(MPI_Scatter(all, 3, MPI_INT, r3, 3, MPI_INT, 0, MPI_COMM_WORLD));
    for (int k = 0; k < 3; k++) CHECK(r3[k] == me * 3 + k);
    if (me == root) {
        OK(MPI_Scatter(all, 3, MPI_INT, MPI_IN_PLACE, 3, MPI_INT, root, MPI_COMM_WORLD));
        for (int i = 0; i < 3 * n; i++) CHECK(all[i] == i);
    } else {
        OK(MPI_Scatter(NULL, 0, MPI_DATATYPE_NULL, r3, 3, MPI_INT, root, MPI_COMM_WORLD));
        for (int k = 0; k < 3; k++) CHECK(r3[k] == me * 3 + k);
    }
    memset(r3, -1, sizeof r3);
    OK(MPI_Iscatter(all, 3, MPI_INT, r3, 3, MPI_INT, 0, MPI_COMM_WORLD, &q));
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    for (int k = 0; k < 3; k++) CHECK(r3[k] == me * 3 + k);

    /* scatterv with the gatherv layout */
    for (int i = 0; i < n; i++)
        for (int k = 0; k <= i; k++) all[ds[i] + k] = i * 100 + k;
    for (int pass = 0; pass < 2; pass++) {
        memset(sv, -1, sizeof sv);
        if (pass == 0) {
            OK(MPI_Scatterv(all, rc, ds, MPI_INT, sv, me + 1, MPI_INT, 0, MPI_COMM_WORLD));
        } else {
            OK(MPI_Iscatterv(all, rc, ds, MPI_INT, sv, me + 1, MPI_INT, 0, MPI_COMM_WORLD, &q));
            OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        }
        for (int k = 0; k <= me; k++) CHECK(sv[k] == me * 100 + k);
        CHECK(sv[me + 1] == -1);
    }

    /* allgather, in place, non-blocking; allgatherv */
    memset(g, -1, sizeof g);
    OK(MPI_Allgather(s2, 2, MPI_INT, g, 2, MPI_INT, MPI_COMM_WORLD));
    for (int i = 0; i < n; i++) CHECK(g[2 * i] == i * 10 && g[2 * i + 1] == i * 10 + 1);
    memset(g, -1, sizeof g);
    g[2 * me] = me * 10; g[2 * me + 1] = me * 10 + 1;
    OK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, g, 2, MPI_INT, MPI_COMM_WORLD));
    for (int i = 0; i < n; i++) CHECK(g[2 * i] == i * 10 && g[2 * i + 1] == i * 10 + 1);
    memset(g, -1, sizeof g);
    OK(MPI_Iallgather(s2, 2, MPI_INT, g, 2, MPI_INT, MPI_COMM_WORLD, &q));
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    for (int i = 0; i < n; i++) CHECK(g[2 * i] == i * 10 && g[2 * i + 1] == i * 10 + 1);
    for (int k = 0; k <= me; k++) sv[k] = me * 100 + k;
    for (int pass = 0; pass < 2; pass++) {
        memset(g, -1, sizeof g);
        if (pass == 0) {
            OK(MPI_Allgatherv(sv, me + 1, MPI_INT, g, rc, ds, MPI_INT, MPI_COMM_WORLD));
        } else {
            OK(MPI_Iallgatherv(sv, me + 1, MPI_INT, g, rc, ds, MPI_INT, MPI_COMM_WORLD, &q));
            OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        }
        for (int i = 0; i < n; i++)
            for (int k = 0; k <= i; k++) CHECK(g[ds[i] + k] == i * 100 + k);
    }

    /* alltoall, in place, non-blocking */
    int at[64], ar[64];
    for (int j = 0; j < n; j++)
        for (int k = 0; k < 2; k++) at[2 * j + k] = me * 100 + j * 10 + k;
    for (int pass = 0; pass < 3; pass++) {
        memset(ar, -1, sizeof ar);
        if (pass == 0) {
            OK(MPI_Alltoall(at, 2, MPI_INT, ar, 2, MPI_INT, MPI_COMM_WORLD));
        } else if (pass == 1) {
            memcpy(ar, at, sizeof at);
            OK(MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, ar, 2, MPI_INT, MPI_COMM_WORLD));
        } else {
            OK(MPI_Ialltoall(at, 2, MPI_INT, ar, 2, MPI_INT, MPI_COMM_WORLD, &q));
            OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        }
        for (int i = 0; i < n; i++)
            for (int k = 0; k < 2; k++) CHECK(ar[2 * i + k] == i * 100 + me * 10 + k);
    }

    /* alltoallv: j+1 ints to rank j, rank i's block at a gap */
    int sc[8], sd[8], rcv[8], rd[8], so = 0, ro = 0;
    for (int j = 0; j < n; j++) {
        sc[j] = j + 1; sd[j] = so; so += j + 1;
        rcv[j] = me + 1; rd[j] = ro; ro += me + 2;
        for (int k = 0; k <= j; k++) at[sd[j] + k] = me * 1000 + j * 10 + k;
    }
    for (int pass = 0; pass < 2; pass++) {
        memset(ar, -1, sizeof ar);
        if (pass == 0) {
            OK(MPI_Alltoallv(at, sc, sd, MPI_INT, ar, rcv, rd, MPI_INT, MPI_COMM_WORLD));
        } else {
            OK(MPI_Ialltoallv(at, sc, sd, MPI_INT, ar, rcv, rd, MPI_INT, MPI_COMM_WORLD, &q));
            OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        }
        for (int i = 0; i < n; i++) {
            for (int k = 0; k <= me; k++) CHECK(ar[rd[i] + k] == i * 1000 + me * 10 + k);
            CHECK(ar[rd[i] + me + 1] == -1);
        }
    }

    /* alltoallw: one int to each rank, received as doubles' worth of bytes? No: as ints at
     * byte displacements, the blocks stored from the end backwards. */
    int wc[8], wsd[8], wrd[8];
    MPI_Datatype wt[8];
    for (int j = 0; j < n; j++) {
        wc[j] = 1; wt[j] = MPI_INT;
        wsd[j] = (int)(j * sizeof(int));
        wrd[j] = (int)((n - 1 - j) * sizeof(int));
        at[j] = me * 10 + j;
    }
    for (int pass = 0; pass < 2; pass++) {
        memset(ar, -1, sizeof ar);
        if (pass == 0) {
            OK(MPI_Alltoallw(at, wc, wsd, wt, ar, wc, wrd, wt, MPI_COMM_WORLD));
        } else {
            OK(MPI_Ialltoallw(at, wc, wsd, wt, ar, wc, wrd, wt, MPI_COMM_WORLD, &q));
            OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        }
        for (int i = 0; i < n; i++) CHECK(ar[n - 1 - i] == i * 10 + me);
    }
}

static void test_reductions(void) {
    MPI_Request q;
    int x[3] = {me + 1, -me, me * me}, y[3], sum[3] = {0, 0, 0};
    for (int r = 0; r < n; r++) { sum[0] += r + 1; sum[1] -= r; sum[2] += r * r; }
    int root = 1 % n;

    memset(y, -1, sizeof y);
    OK(MPI_Reduce(x, y, 3, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD));
    if (me == root) for (int i = 0; i < 3; i++) CHECK(y[i] == sum[i]);
    if (me == root) {
        memcpy(y, x, sizeof x);
        OK(MPI_Reduce(MPI_IN_PLACE, y, 3, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD));
        for (int i = 0; i < 3; i++) CHECK(y[i] == sum[i]);
    } else {
        OK(MPI_Reduce(x, NULL, 3, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD));
    }
    memset(y, -1, sizeof y);
    OK(MPI_Ireduce(x, y, 3, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD, &q));
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    if (me == 0) for (int i = 0; i < 3; i++) CHECK(y[i] == sum[i]);

    OK(MPI_Allreduce(x, y, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    for (int i = 0; i < 3; i++) CHECK(y[i] == sum[i]);
    memcpy(y, x, sizeof x);
    OK(MPI_Allreduce(MPI_IN_PLACE, y, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    for (int i = 0; i < 3; i++) CHECK(y[i] == sum[i]);
    memset(y, -1, sizeof y);
    OK(MPI_Iallreduce(x, y, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q));
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    for (int i = 0; i < 3; i++) CHECK(y[i] == sum[i]);
    memset(y, -1, sizeof y);
    OK(MPI_Allreduce_c(x, y, (MPI_Count)3, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    for (int i = 0; i < 3; i++) CHECK(y[i] == sum[i]);

    /* every arithmetic/logical/bitwise op on ints, against a sequential fold */
    MPI_Op ops[] = {MPI_PROD, MPI_MIN, MPI_MAX, MPI_LAND, MPI_LOR, MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR};
    for (unsigned o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        int v = (me % 3) + (me == 2 ? 4 : 1), want = 0, got = -99;
        for (int r = 0; r < n; r++) {
            int w = (r % 3) + (r == 2 ? 4 : 1);
            if (r == 0) { want = w; if (ops[o] >= MPI_LAND && ops[o] <= MPI_LXOR) want = w != 0; continue; }
            if (ops[o] == MPI_PROD) want *= w;
            else if (ops[o] == MPI_MIN) want = w < want ? w : want;
            else if (ops[o] == MPI_MAX) want = w > want ? w : want;
            else if (ops[o] == MPI_LAND) want = want && w;
            else if (ops[o] == MPI_LOR) want = want || w;
            else if (ops[o] == MPI_LXOR) want = (!want) != (!w);
            else if (ops[o] == MPI_BAND) want &= w;
            else if (ops[o] == MPI_BOR) want |= w;
            else want ^= w;
        }
        if (n == 1 && ops[o] >= MPI_LAND && ops[o] <= MPI_LXOR) want = v != 0;
        OK(MPI_Allreduce(&v, &got, 1, MPI_INT, ops[o], MPI_COMM_WORLD));
        if (got != want) fprintf(stderr, "op %p: got %d want %d\n", (void *)ops[o], got, want);
        CHECK(got == want);
    }

    /* doubles, unsigned chars, MINLOC/MAXLOC */
    double dv = 1.5 * me - 2, dmax;
    OK(MPI_Allreduce(&dv, &dmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    CHECK(dmax == 1.5 * (n - 1) - 2);
    unsigned char uc = 200, ucs;
    OK(MPI_Allreduce(&uc, &ucs, 1, MPI_UNSIGNED_CHAR, MPI_SUM, MPI_COMM_WORLD));
    CHECK(ucs == (unsigned char)(200 * n));
    struct { double v; int i; } p = {(double)((me * 3) % n), me}, pmin, pmax;
    OK(MPI_Allreduce(&p, &pmin, 1, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD));
    OK(MPI_Allreduce(&p, &pmax, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD));
    {
        double lo = 1e9, hi = -1e9; int li = -1, hi_i = -1;
        for (int r = 0; r < n; r++) {
            double v = (double)((r * 3) % n);
            if (v < lo) { lo = v; li = r; }
            if (v > hi) { hi = v; hi_i = r; }
        }
        CHECK(pmin.v == lo && pmin.i == li);
        CHECK(pmax.v == hi && pmax.i == hi_i);
    }

    /* reduce_scatter_block and reduce_scatter, in place too */
    int rs[64], rr[8];
    for (int j = 0; j < 2 * n; j++) rs[j] = me + j;
    memset(rr, -1, sizeof rr);
    OK(MPI_Reduce_scatter_block(rs, rr, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    for (int k = 0; k < 2; k++) CHECK(rr[k] == n * (n - 1) / 2 + n * (2 * me + k));
    OK(MPI_Ireduce_scatter_block(rs, rr, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q));
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    for (int k = 0; k < 2; k++) CHECK(rr[k] == n * (n - 1) / 2 + n * (2 * me + k));
    int cnt[8], start = 0, total = 0;
    for (int i = 0; i < n; i++) { cnt[i] = i + 1; total += i + 1; }
    for (int i = 0; i < me; i++) start += cnt[i];
    for (int j = 0; j < total; j++) rs[j] = me * j;
    for (int pass = 0; pass < 3; pass++) {
        memset(rr, -1, sizeof rr);
        if (pass == 0) {
            OK(MPI_Reduce_scatter(rs, rr, cnt, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        } else if (pass == 1) {
            int inplace[64];
            memcpy(inplace, rs, sizeof(int) * total);
            OK(MPI_Reduce_scatter(MPI_IN_PLACE, inplace, cnt, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
            memcpy(rr, inplace, sizeof(int) * cnt[me]);
        } else {
            OK(MPI_Ireduce_scatter(rs, rr, cnt, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q));
            OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        }
        for (int k = 0; k < cnt[me]; k++) CHECK(rr[k] == (start + k) * n * (n - 1) / 2);
        CHECK(rr[cnt[me]] == -1 || pass == 1);
    }

    /* scan, exscan, in place, non-blocking */
    int sv = me + 1, sr = -1, pre = (me + 1) * (me + 2) / 2;
    OK(MPI_Scan(&sv, &sr, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sr == pre);
    sr = sv;
    OK(MPI_Scan(MPI_IN_PLACE, &sr, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sr == pre);
    OK(MPI_Iscan(&sv, &sr, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q));
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    CHECK(sr == pre);
    sr = -7;
    OK(MPI_Exscan(&sv, &sr, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(me == 0 ? sr == -7 : sr == pre - (me + 1));
    sr = -7;
    OK(MPI_Iexscan(&sv, &sr, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q));
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    CHECK(me == 0 ? sr == -7 : sr == pre - (me + 1));
}

static void test_user_ops(void) {
    MPI_Op mat, isum;
    MPI_Datatype m2;
    int flag;
    OK(MPI_Op_create(matmul_op, 0, &mat));
    OK(MPI_Op_create(isum_op, 1, &isum));
    OK(MPI_Op_commutative(mat, &flag));
    CHECK(flag == 0);
    OK(MPI_Op_commutative(isum, &flag));
    CHECK(flag == 1);
    OK(MPI_Op_commutative(MPI_SUM, &flag));
    CHECK(flag == 1);
    OK(MPI_Type_contiguous(4, MPI_INT, &m2));
    OK(MPI_Type_commit(&m2));

    int m[4], got[4], want[4];
    mat_of(me, m);
    mat_prod(0, n, want);
    OK(MPI_Allreduce(m, got, 1, m2, mat, MPI_COMM_WORLD));
    CHECK(memcmp(got, want, sizeof want) == 0);
    memset(got, 0, sizeof got);
    OK(MPI_Reduce(m, got, 1, m2, mat, n - 1, MPI_COMM_WORLD));
    if (me == n - 1) CHECK(memcmp(got, want, sizeof want) == 0);
    MPI_Request q;
    OK(MPI_Iallreduce(m, got, 1, m2, mat, MPI_COMM_WORLD, &q));
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    CHECK(memcmp(got, want, sizeof want) == 0);
    OK(MPI_Scan(m, got, 1, m2, mat, MPI_COMM_WORLD));
    mat_prod(0, me + 1, want);
    CHECK(memcmp(got, want, sizeof want) == 0);
    if (n > 1) {
        OK(MPI_Exscan(m, got, 1, m2, mat, MPI_COMM_WORLD));
        mat_prod(0, me, want);
        if (me > 0) CHECK(memcmp(got, want, sizeof want) == 0);
    }

    int v[2] = {me, 2 * me}, s[2];
    OK(MPI_Allreduce(v, s, 2, MPI_INT, isum, MPI_COMM_WORLD));
    CHECK(s[0] == n * (n - 1) / 2 && s[1] == n * (n - 1));

    /* reduce_local: predefined and user */
    int a[2] = {1, 2}, bb[2] = {10, 20};
    OK(MPI_Reduce_local(a, bb, 2, MPI_INT, MPI_SUM));
    CHECK(bb[0] == 11 && bb[1] == 22);
    int ma[4], mb[4], mw[4];
    mat_of(2, ma); mat_of(5, mb);
    matmul(ma, mb, mw);
    OK(MPI_Reduce_local(ma, mb, 1, m2, mat));
    CHECK(memcmp(mb, mw, sizeof mw) == 0);

    OK(MPI_Op_free(&mat));
    CHECK(mat == MPI_OP_NULL);
    OK(MPI_Op_free(&isum));
    OK(MPI_Type_free(&m2));
}

int main(int argc, char **argv) {
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &n));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    CHECK(n <= 8);
    test_moves();
    test_reductions();
    test_user_ops();
    OK(MPI_Finalize());
    printf("PASS coll rank %d of %d\n", me, n);
    return 0;
}

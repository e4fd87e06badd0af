/* The large-count (_c) forms: non-blocking collectives, the reductions, neighbour collectives
 * on a ring, datatype constructors with their envelopes and contents, pack and unpack, each
 * against values computed here; a negative MPI_Count is MPI_ERR_COUNT. */
#include "check.h"

static int n, me;

static void wait1(MPI_Request *q) { OK(MPI_Wait(q, MPI_STATUS_IGNORE)); }

static void test_moves(void) {
    int root = n - 1;
    MPI_Request q;
    int s2[2] = {me * 10, me * 10 + 1};
    int *all = malloc(sizeof(int) * 4 * n * n + 16);
    int *cnt = malloc(sizeof(int) * n);
    MPI_Count *cc = malloc(sizeof(MPI_Count) * n), *cc2 = malloc(sizeof(MPI_Count) * n);
    MPI_Aint *dd = malloc(sizeof(MPI_Aint) * n), *dd2 = malloc(sizeof(MPI_Aint) * n);
    MPI_Datatype *tt = malloc(sizeof(MPI_Datatype) * n);

    /* Igather_c */
    for (int i = 0; i < 2 * n; i++) all[i] = -1;
    OK(MPI_Igather_c(s2, 2, MPI_INT, all, 2, MPI_INT, root, MPI_COMM_WORLD, &q));
    wait1(&q);
    if (me == root)
        for (int r = 0; r < n; r++) CHECK(all[2 * r] == r * 10 && all[2 * r + 1] == r * 10 + 1);

    /* Igatherv_c: rank r sends r+1 copies of r, stored back to front */
    int sv[8];
    for (int i = 0; i <= me; i++) sv[i] = me;
    MPI_Aint at = 0;
    for (int r = n - 1; r >= 0; r--) {
        cc[r] = r + 1;
        dd[r] = at;
        at += r + 1;
    }
    for (int i = 0; i < at; i++) all[i] = -1;
    OK(MPI_Igatherv_c(sv, me + 1, MPI_INT, all, cc, dd, MPI_INT, root, MPI_COMM_WORLD, &q));
    wait1(&q);
    if (me == root)
        for (int r = 0; r < n; r++)
            for (int i = 0; i <= r; i++) CHECK(all[dd[r] + i] == r, "gatherv r=%d", r);

    /* Iscatter_c: the root's block r is {r*7, r*7+1} */
    for (int r = 0; r < n; r++) {
        all[2 * r] = r * 7;
        all[2 * r + 1] = r * 7 + 1;
    }
    int got2[2] = {-1, -1};
    OK(MPI_Iscatter_c(all, 2, MPI_INT, got2, 2, MPI_INT, root, MPI_COMM_WORLD, &q));
    wait1(&q);
    CHECK(got2[0] == me * 7 && got2[1] == me * 7 + 1);

    /* Iscatterv_c: the layout of the gatherv above, block r holds r+1 copies of 100+r */
    for (int r = 0; r < n; r++)
        for (int i = 0; i <= r; i++) all[dd[r] + i] = 100 + r;
    for (int i = 0; i < 8; i++) sv[i] = -1;
    OK(MPI_Iscatterv_c(all, cc, dd, MPI_INT, sv, me + 1, MPI_INT, root, MPI_COMM_WORLD, &q));
    wait1(&q);
    for (int i = 0; i <= me; i++) CHECK(sv[i] == 100 + me);
    CHECK(sv[me + 1] == -1);

    /* Iallgather_c, Iallgatherv_c */
    for (int i = 0; i < 2 * n; i++) all[i] = -1;
    OK(MPI_Iallgather_c(s2, 2, MPI_INT, all, 2, MPI_INT, MPI_COMM_WORLD, &q));
    wait1(&q);
    for (int r = 0; r < n; r++) CHECK(all[2 * r] == r * 10 && all[2 * r + 1] == r * 10 + 1);
    for (int i = 0; i <= me; i++) sv[i] = me;
    for (int i = 0; i < at; i++) all[i] = -1;
    OK(MPI_Iallgatherv_c(sv, me + 1, MPI_INT, all, cc, dd, MPI_INT, MPI_COMM_WORLD, &q));
    wait1(&q);
    for (int r = 0; r < n; r++)
        for (int i = 0; i <= r; i++) CHECK(all[dd[r] + i] == r);

    /* Ialltoall_c: block j of rank i is i*100+j */
    int *snd = malloc(sizeof(int) * 4 * n * n + 16), *rcv = malloc(sizeof(int) * 4 * n * n + 16);
    for (int j = 0; j < n; j++) snd[j] = me * 100 + j;
    OK(MPI_Ialltoall_c(snd, 1, MPI_INT, rcv, 1, MPI_INT, MPI_COMM_WORLD, &q));
    wait1(&q);
    for (int j = 0; j < n; j++) CHECK(rcv[j] == j * 100 + me);

    /* Ialltoallv_c: me sends j+1 copies of me*100+j to j, packed front to back */
    MPI_Aint sat = 0, rat = 0;
    for (int j = 0; j < n; j++) {
        cc[j] = j + 1;
        dd[j] = sat;
        for (int i = 0; i <= j; i++) snd[sat + i] = me * 100 + j;
        sat += j + 1;
        cc2[j] = me + 1;
        dd2[j] = rat;
        rat += me + 1;
    }
    for (int i = 0; i < rat; i++) rcv[i] = -1;
    OK(MPI_Ialltoallv_c(snd, cc, dd, MPI_INT, rcv, cc2, dd2, MPI_INT, MPI_COMM_WORLD, &q));
    wait1(&q);
    for (int j = 0; j < n; j++)
        for (int i = 0; i <= me; i++) CHECK(rcv[dd2[j] + i] == j * 100 + me);

    /* Ialltoallw_c: the same exchange with byte displacements */
    for (int j = 0; j < n; j++) {
        dd[j] *= sizeof(int);
        dd2[j] *= sizeof(int);
        tt[j] = MPI_INT;
    }
    for (int i = 0; i < rat; i++) rcv[i] = -1;
    OK(MPI_Ialltoallw_c(snd, cc, dd, tt, rcv, cc2, dd2, tt, MPI_COMM_WORLD, &q));
    wait1(&q);
    for (int j = 0; j < n; j++)
        for (int i = 0; i <= me; i++) CHECK(rcv[dd2[j] / sizeof(int) + i] == j * 100 + me);

    free(all);
    free(cnt);
    free(cc);
    free(cc2);
    free(dd);
    free(dd2);
    free(tt);
    free(snd);
    free(rcv);
}

static void test_reductions(void) {
    MPI_Request q;
    int v[2] = {me + 1, 2 * me}, r[2];
    int sum1 = n * (n + 1) / 2, sum2 = n * (n - 1);

    r[0] = r[1] = -1;
    OK(MPI_Ireduce_c(v, r, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD, &q));
    wait1(&q);
    if (me == 0) CHECK(r[0] == sum1 && r[1] == sum2);
    r[0] = r[1] = -1;
    OK(MPI_Iallreduce_c(v, r, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &q));
    wait1(&q);
    CHECK(r[0] == n && r[1] == 2 * (n - 1));

    /* scans: inclusive prefix of me+1 is (me+1)(me+2)/2, exclusive me(me+1)/2 */
    for (int pass = 0; pass < 2; pass++) {
        r[0] = r[1] = -1;
        if (pass == 0) {
            OK(MPI_Scan_c(v, r, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        } else {
            OK(MPI_Iscan_c(v, r, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q));
            wait1(&q);
        }
        CHECK(r[0] == (me + 1) * (me + 2) / 2 && r[1] == me * (me + 1));
        r[0] = r[1] = -1;
        if (pass == 0) {
            OK(MPI_Exscan_c(v, r, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        } else {
            OK(MPI_Iexscan_c(v, r, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q));
            wait1(&q);
        }
        if (me > 0) CHECK(r[0] == me * (me + 1) / 2 && r[1] == me * (me - 1));
    }

    /* reduce-scatter: element i of rank k's vector is k*1000+i; block j has j+1 elements */
    int total = n * (n + 1) / 2;
    int *s = malloc(sizeof(int) * (total + 2 * n)), *g = malloc(sizeof(int) * (n + 2));
    MPI_Count *rc = malloc(sizeof(MPI_Count) * n);
    for (int j = 0; j < n; j++) rc[j] = j + 1;
    int first = me * (me + 1) / 2; /* where my block starts */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < total; i++) s[i] = me * 1000 + i;
        for (int i = 0; i < n + 2; i++) g[i] = -1;
        if (pass == 0) {
            OK(MPI_Reduce_scatter_c(s, g, rc, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        } else {
            OK(MPI_Ireduce_scatter_c(s, g, rc, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q));
            wait1(&q);
        }
        for (int i = 0; i <= me; i++)
            CHECK(g[i] == 1000 * n * (n - 1) / 2 + n * (first + i), "rs pass %d i %d", pass, i);
        CHECK(g[me + 1] == -1);

        /* block form: 2 elements each */
        for (int i = 0; i < 2 * n; i++) s[i] = me * 1000 + i;
        for (int i = 0; i < 3; i++) g[i] = -1;
        if (pass == 0) {
            OK(MPI_Reduce_scatter_block_c(s, g, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        } else {
            OK(MPI_Ireduce_scatter_block_c(s, g, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q));
            wait1(&q);
        }
        for (int i = 0; i < 2; i++) CHECK(g[i] == 1000 * n * (n - 1) / 2 + n * (2 * me + i));
        CHECK(g[2] == -1);
    }
    free(s);
    free(g);
    free(rc);
}

/* A periodic ring: in-neighbour 0 is the left one, 1 the right one. */
static void test_neighbours(void) {
    MPI_Comm ring;
    int dims[1] = {n}, periods[1] = {1};
    OK(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring));
    int left = (me - 1 + n) % n, right = (me + 1) % n;
    MPI_Request q;
    MPI_Count c1[2] = {1, 1};
    MPI_Aint d[2] = {0, 1}, db[2] = {0, sizeof(int)};
    MPI_Datatype t[2] = {MPI_INT, MPI_INT};
    for (int pass = 0; pass < 2; pass++) {
        int got[2] = {-1, -1};
        if (pass == 0) {
            OK(MPI_Neighbor_allgather_c(&me, 1, MPI_INT, got, 1, MPI_INT, ring));
        } else {
            OK(MPI_Ineighbor_allgather_c(&me, 1, MPI_INT, got, 1, MPI_INT, ring, &q));
            wait1(&q);
        }
        CHECK(got[0] == left && got[1] == right);

        got[0] = got[1] = -1;
        if (pass == 0) {
            OK(MPI_Neighbor_allgatherv_c(&me, 1, MPI_INT, got, c1, d, MPI_INT, ring));
        } else {
            OK(MPI_Ineighbor_allgatherv_c(&me, 1, MPI_INT, got, c1, d, MPI_INT, ring, &q));
            wait1(&q);
        }
        CHECK(got[0] == left && got[1] == right, "pass %d got %d %d", pass, got[0], got[1]);

        /* block k goes to neighbour k: my left sent me its block 1, my right its block 0 */
        int snd[2] = {me * 10, me * 10 + 1};
        got[0] = got[1] = -1;
        if (pass == 0) {
            OK(MPI_Neighbor_alltoall_c(snd, 1, MPI_INT, got, 1, MPI_INT, ring));
        } else {
            OK(MPI_Ineighbor_alltoall_c(snd, 1, MPI_INT, got, 1, MPI_INT, ring, &q));
            wait1(&q);
        }
        CHECK(got[0] == left * 10 + 1 && got[1] == right * 10);

        got[0] = got[1] = -1;
        if (pass == 0) {
            OK(MPI_Neighbor_alltoallv_c(snd, c1, d, MPI_INT, got, c1, d, MPI_INT, ring));
        } else {
            OK(MPI_Ineighbor_alltoallv_c(snd, c1, d, MPI_INT, got, c1, d, MPI_INT, ring, &q));
            wait1(&q);
        }
        CHECK(got[0] == left * 10 + 1 && got[1] == right * 10);

        got[0] = got[1] = -1;
        if (pass == 0) {
            OK(MPI_Neighbor_alltoallw_c(snd, c1, db, t, got, c1, db, t, ring));
        } else {
            OK(MPI_Ineighbor_alltoallw_c(snd, c1, db, t, got, c1, db, t, ring, &q));
            wait1(&q);
        }
        CHECK(got[0] == left * 10 + 1 && got[1] == right * 10);
    }
    OK(MPI_Comm_free(&ring));
}

static void test_bad_counts(void) {
    MPI_Request q;
    int x = 0, y = 0, cls;
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int rc = MPI_Iallreduce_c(&x, &y, -1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_COUNT, "class %d", cls);
    rc = MPI_Scan_c(&x, &y, -5, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_COUNT, "class %d", cls);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
}

/* Packs one element of t from a[i] = i and checks the ints it packs to. */
static void packs_to(MPI_Datatype t, const int *want, int nwant) {
    int a[32], out[32], back[32];
    for (int i = 0; i < 32; i++) a[i] = i, back[i] = -1;
    MPI_Count size = -1, pos = 0;
    OK(MPI_Pack_size_c(1, t, MPI_COMM_WORLD, &size));
    CHECK(size == (MPI_Count)(nwant * sizeof(int)), "size %lld", (long long)size);
    OK(MPI_Pack_c(a, 1, t, out, sizeof out, &pos, MPI_COMM_WORLD));
    CHECK(pos == size);
    for (int i = 0; i < nwant; i++) CHECK(out[i] == want[i], "packed[%d] = %d", i, out[i]);
    pos = 0;
    OK(MPI_Unpack_c(out, size, &pos, back, 1, t, MPI_COMM_WORLD));
    CHECK(pos == size);
    for (int i = 0; i < nwant; i++) CHECK(back[want[i]] == want[i]);
}

/* Checks what MPI_Type_get_envelope_c / get_contents_c report for t. */
static void contents_are(MPI_Datatype t, int combiner, int ni, const int *ints, int nc,
                         const MPI_Count *counts, int nd) {
    MPI_Count gi, ga, gc, gd;
    int comb;
    OK(MPI_Type_get_envelope_c(t, &gi, &ga, &gc, &gd, &comb));
    CHECK(comb == combiner && gi == ni && ga == 0 && gc == nc && gd == nd,
          "combiner %d ni %lld na %lld nc %lld nd %lld", comb, (long long)gi, (long long)ga,
          (long long)gc, (long long)gd);
    int i2[8];
    MPI_Aint a2[1];
    MPI_Count c2[16];
    MPI_Datatype d2[4];
    OK(MPI_Type_get_contents_c(t, 8, 1, 16, 4, i2, a2, c2, d2));
    for (int i = 0; i < ni; i++) CHECK(i2[i] == ints[i], "ints[%d] = %d", i, i2[i]);
    for (int i = 0; i < nc; i++) CHECK(c2[i] == counts[i], "counts[%d] = %lld", i, (long long)c2[i]);
    for (int i = 0; i < nd; i++) {
        int ci, ca, cd, cc;
        OK(MPI_Type_get_envelope(d2[i], &ci, &ca, &cd, &cc));
        if (cc != MPI_COMBINER_NAMED) OK(MPI_Type_free(&d2[i]));
    }
    /* the int envelope has no room for large counts */
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int x, cls;
    int rc = MPI_Type_get_envelope(t, &x, &x, &x, &x);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TYPE, "class %d", cls);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
}

static void test_types(void) {
    MPI_Datatype t;
    MPI_Count lb, ext;

    OK(MPI_Type_contiguous_c(5, MPI_INT, &t));
    OK(MPI_Type_commit(&t));
    packs_to(t, (int[]){0, 1, 2, 3, 4}, 5);
    contents_are(t, MPI_COMBINER_CONTIGUOUS, 0, NULL, 1, (MPI_Count[]){5}, 1);
    OK(MPI_Type_free(&t));

    OK(MPI_Type_vector_c(3, 2, 4, MPI_INT, &t));
    OK(MPI_Type_commit(&t));
    packs_to(t, (int[]){0, 1, 4, 5, 8, 9}, 6);
    contents_are(t, MPI_COMBINER_VECTOR, 0, NULL, 3, (MPI_Count[]){3, 2, 4}, 1);
    OK(MPI_Type_get_extent_x(t, &lb, &ext));
    CHECK(lb == 0 && ext == 10 * (MPI_Count)sizeof(int));
    OK(MPI_Type_get_true_extent_x(t, &lb, &ext));
    CHECK(lb == 0 && ext == 10 * (MPI_Count)sizeof(int));
    OK(MPI_Type_free(&t));

    OK(MPI_Type_create_hvector_c(2, 1, 3 * sizeof(int), MPI_INT, &t));
    OK(MPI_Type_commit(&t));
    packs_to(t, (int[]){0, 3}, 2);
    contents_are(t, MPI_COMBINER_HVECTOR, 0, NULL, 3, (MPI_Count[]){2, 1, 3 * sizeof(int)}, 1);
    OK(MPI_Type_free(&t));

    OK(MPI_Type_indexed_c(2, (MPI_Count[]){1, 2}, (MPI_Count[]){0, 3}, MPI_INT, &t));
    OK(MPI_Type_commit(&t));
    packs_to(t, (int[]){0, 3, 4}, 3);
    contents_are(t, MPI_COMBINER_INDEXED, 0, NULL, 5, (MPI_Count[]){2, 1, 2, 0, 3}, 1);
    OK(MPI_Type_free(&t));

    OK(MPI_Type_create_hindexed_c(2, (MPI_Count[]){1, 1}, (MPI_Count[]){4 * sizeof(int), 0},
                                  MPI_INT, &t));
    OK(MPI_Type_commit(&t));
    packs_to(t, (int[]){4, 0}, 2);
    contents_are(t, MPI_COMBINER_HINDEXED, 0, NULL, 5,
                 (MPI_Count[]){2, 1, 1, 4 * sizeof(int), 0}, 1);
    OK(MPI_Type_free(&t));

    OK(MPI_Type_create_indexed_block_c(2, 2, (MPI_Count[]){6, 1}, MPI_INT, &t));
    OK(MPI_Type_commit(&t));
    packs_to(t, (int[]){6, 7, 1, 2}, 4);
    contents_are(t, MPI_COMBINER_INDEXED_BLOCK, 0, NULL, 4, (MPI_Count[]){2, 2, 6, 1}, 1);
    OK(MPI_Type_free(&t));

    OK(MPI_Type_create_hindexed_block_c(2, 1, (MPI_Count[]){0, 2 * sizeof(int)}, MPI_INT, &t));
    OK(MPI_Type_commit(&t));
    packs_to(t, (int[]){0, 2}, 2);
    contents_are(t, MPI_COMBINER_HINDEXED_BLOCK, 0, NULL, 4,
                 (MPI_Count[]){2, 1, 0, 2 * sizeof(int)}, 1);
    OK(MPI_Type_free(&t));

    OK(MPI_Type_create_struct_c(2, (MPI_Count[]){2, 1}, (MPI_Count[]){0, 5 * sizeof(int)},
                                (MPI_Datatype[]){MPI_INT, MPI_INT}, &t));
    OK(MPI_Type_commit(&t));
    packs_to(t, (int[]){0, 1, 5}, 3);
    contents_are(t, MPI_COMBINER_STRUCT, 0, NULL, 5,
                 (MPI_Count[]){2, 2, 1, 0, 5 * sizeof(int)}, 2);
    OK(MPI_Type_free(&t));

    /* a 2x2 block at (1,1) of a 4x4 C array */
    OK(MPI_Type_create_subarray_c(2, (MPI_Count[]){4, 4}, (MPI_Count[]){2, 2},
                                  (MPI_Count[]){1, 1}, MPI_ORDER_C, MPI_INT, &t));
    OK(MPI_Type_commit(&t));
    packs_to(t, (int[]){5, 6, 9, 10}, 4);
    contents_are(t, MPI_COMBINER_SUBARRAY, 2, (int[]){2, MPI_ORDER_C}, 6,
                 (MPI_Count[]){4, 4, 2, 2, 1, 1}, 1);
    OK(MPI_Type_free(&t));

    OK(MPI_Type_create_resized_c(MPI_INT, -4, 16, &t));
    OK(MPI_Type_get_extent_x(t, &lb, &ext));
    CHECK(lb == -4 && ext == 16);
    contents_are(t, MPI_COMBINER_RESIZED, 0, NULL, 2, (MPI_Count[]){-4, 16}, 1);
    OK(MPI_Type_free(&t));

    /* a negative count, and a pack that does not fit */
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int cls, a[4] = {0}, out[4];
    int rc = MPI_Type_contiguous_c(-1, MPI_INT, &t);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_COUNT, "class %d", cls);
    MPI_Count pos = 0;
    rc = MPI_Pack_c(a, 4, MPI_INT, out, 3 * sizeof(int), &pos, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TRUNCATE && pos == 0, "class %d", cls);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
}

int main(int argc, char **argv) {
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &n));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    test_moves();
    test_reductions();
    test_neighbours();
    test_bad_counts();
    test_types();
    printf("PASS large rank %d of %d\n", me, n);
    OK(MPI_Finalize());
    return 0;
}

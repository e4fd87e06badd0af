/* Persistent collectives (MPI_*_init): each started several times with new data in the
 * same buffers, waited for, with MPI_Startall, MPI_Test and MPI_Request_free; results
 * against values computed here. */
#include "check.h"
#include <string.h>

static int n, me;

static void run(MPI_Request *q) {
    OK(MPI_Start(q));
    OK(MPI_Wait(q, MPI_STATUS_IGNORE));
    CHECK(*q != MPI_REQUEST_NULL, "a persistent request stays allocated");
}

static void test_basic(void) {
    MPI_Request q;
    OK(MPI_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, &q));
    for (int it = 0; it < 3; it++) run(&q);
    OK(MPI_Request_free(&q));
    CHECK(q == MPI_REQUEST_NULL);

    int b;
    OK(MPI_Bcast_init(&b, 1, MPI_INT, n - 1, MPI_COMM_WORLD, MPI_INFO_NULL, &q));
    for (int it = 0; it < 3; it++) {
        b = me == n - 1 ? 100 + it : -1;
        run(&q);
        CHECK(b == 100 + it, "it %d b %d", it, b);
    }
    OK(MPI_Request_free(&q));

    int v, s;
    OK(MPI_Allreduce_init(&v, &s, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &q));
    for (int it = 0; it < 3; it++) {
        v = me + it;
        s = -1;
        run(&q);
        CHECK(s == n * (n - 1) / 2 + n * it);
    }
    OK(MPI_Request_free(&q));

    MPI_Count one = 1;
    OK(MPI_Reduce_init_c(&v, &s, one, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &q));
    for (int it = 0; it < 2; it++) {
        v = me * (it + 1);
        s = -1;
        run(&q);
        if (me == 0) CHECK(s == (n - 1) * (it + 1));
    }
    OK(MPI_Request_free(&q));

    MPI_Request sc[2];
    int ex = -7;
    OK(MPI_Scan_init(&v, &s, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &sc[0]));
    OK(MPI_Exscan_init(&v, &ex, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &sc[1]));
    for (int it = 0; it < 2; it++) {
        v = me + 1 + it;
        OK(MPI_Startall(2, sc));
        OK(MPI_Waitall(2, sc, MPI_STATUSES_IGNORE));
        CHECK(s == (me + 1) * (me + 2) / 2 + (me + 1) * it);
        if (me > 0) CHECK(ex == me * (me + 1) / 2 + me * it);
    }
    OK(MPI_Request_free(&sc[0]));
    OK(MPI_Request_free(&sc[1]));
}

static void test_moves(void) {
    MPI_Request q;
    int *all = malloc(sizeof(int) * n * 4), *snd = malloc(sizeof(int) * n * 4);
    int *cnt = malloc(sizeof(int) * n), *dsp = malloc(sizeof(int) * n);
    int v;
    OK(MPI_Gather_init(&v, 1, MPI_INT, all, 1, MPI_INT, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &q));
    for (int it = 0; it < 2; it++) {
        v = me * 10 + it;
        run(&q);
        if (me == 0)
            for (int r = 0; r < n; r++) CHECK(all[r] == r * 10 + it);
    }
    OK(MPI_Request_free(&q));

    OK(MPI_Scatter_init(all, 1, MPI_INT, &v, 1, MPI_INT, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &q));
    for (int it = 0; it < 2; it++) {
        for (int r = 0; r < n; r++) all[r] = r * 3 + it;
        v = -1;
        run(&q);
        CHECK(v == me * 3 + it);
    }
    OK(MPI_Request_free(&q));

    OK(MPI_Allgather_init(&v, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &q));
    for (int it = 0; it < 2; it++) {
        v = me + 50 * it;
        run(&q);
        for (int r = 0; r < n; r++) CHECK(all[r] == r + 50 * it);
    }
    OK(MPI_Request_free(&q));

    /* v-forms: one element from each rank, stored in reverse order */
    for (int r = 0; r < n; r++) cnt[r] = 1, dsp[r] = n - 1 - r;
    OK(MPI_Allgatherv_init(&v, 1, MPI_INT, all, cnt, dsp, MPI_INT, MPI_COMM_WORLD,
                           MPI_INFO_NULL, &q));
    /* The counts and displacements were taken at init: the program may reuse the arrays. */
    int keep_cnt[8], keep_dsp[8];
    CHECK(n <= 8);
    memcpy(keep_cnt, cnt, sizeof(int) * n);
    memcpy(keep_dsp, dsp, sizeof(int) * n);
    for (int r = 0; r < n; r++) cnt[r] = -99, dsp[r] = 1 << 30;
    for (int it = 0; it < 2; it++) {
        v = me + 7 * it;
        run(&q);
        for (int r = 0; r < n; r++) CHECK(all[n - 1 - r] == r + 7 * it);
    }
    OK(MPI_Request_free(&q));
    memcpy(cnt, keep_cnt, sizeof(int) * n);
    memcpy(dsp, keep_dsp, sizeof(int) * n);
    OK(MPI_Gatherv_init(&v, 1, MPI_INT, all, cnt, dsp, MPI_INT, 0, MPI_COMM_WORLD,
                        MPI_INFO_NULL, &q));
    v = me + 1;
    run(&q);
    if (me == 0)
        for (int r = 0; r < n; r++) CHECK(all[n - 1 - r] == r + 1);
    OK(MPI_Request_free(&q));
    OK(MPI_Scatterv_init(all, cnt, dsp, MPI_INT, &v, 1, MPI_INT, 0, MPI_COMM_WORLD,
                         MPI_INFO_NULL, &q));
    for (int r = 0; r < n; r++) all[n - 1 - r] = 40 + r;
    run(&q);
    CHECK(v == 40 + me);
    OK(MPI_Request_free(&q));

    OK(MPI_Alltoall_init(snd, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &q));
    for (int it = 0; it < 2; it++) {
        for (int j = 0; j < n; j++) snd[j] = me * 100 + j + it;
        run(&q);
        for (int j = 0; j < n; j++) CHECK(all[j] == j * 100 + me + it);
    }
    OK(MPI_Request_free(&q));
    for (int r = 0; r < n; r++) dsp[r] = r;
    OK(MPI_Alltoallv_init(snd, cnt, dsp, MPI_INT, all, cnt, dsp, MPI_INT, MPI_COMM_WORLD,
                          MPI_INFO_NULL, &q));
    for (int j = 0; j < n; j++) snd[j] = me * 100 + j + 9;
    run(&q);
    for (int j = 0; j < n; j++) CHECK(all[j] == j * 100 + me + 9);
    OK(MPI_Request_free(&q));
    MPI_Datatype *ts = malloc(sizeof(MPI_Datatype) * n);
    for (int r = 0; r < n; r++) dsp[r] = r * sizeof(int), ts[r] = MPI_INT;
    OK(MPI_Alltoallw_init(snd, cnt, dsp, ts, all, cnt, dsp, ts, MPI_COMM_WORLD, MPI_INFO_NULL,
                          &q));
    for (int j = 0; j < n; j++) snd[j] = me * 100 + j + 3;
    run(&q);
    for (int j = 0; j < n; j++) CHECK(all[j] == j * 100 + me + 3);
    OK(MPI_Request_free(&q));

    /* reduce-scatter: element j of rank k is k + j; block j (one element) lands on j */
    OK(MPI_Reduce_scatter_block_init(snd, &v, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD,
                                     MPI_INFO_NULL, &q));
    for (int j = 0; j < n; j++) snd[j] = me + j;
    run(&q);
    CHECK(v == n * (n - 1) / 2 + n * me);
    OK(MPI_Request_free(&q));
    OK(MPI_Reduce_scatter_init(snd, &v, cnt, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL,
                               &q));
    for (int j = 0; j < n; j++) snd[j] = me * j;
    run(&q);
    CHECK(v == me * n * (n - 1) / 2);
    OK(MPI_Request_free(&q));
    free(ts);
    free(all);
    free(snd);
    free(cnt);
    free(dsp);
}

static void test_neighbours(void) {
    MPI_Comm ring;
    int dims[1] = {n}, periods[1] = {1};
    OK(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring));
    int left = (me - 1 + n) % n, right = (me + 1) % n;
    MPI_Request q[2];
    int v, got[2], snd[2], got2[2];
    OK(MPI_Neighbor_allgather_init(&v, 1, MPI_INT, got, 1, MPI_INT, ring, MPI_INFO_NULL, &q[0]));
    OK(MPI_Neighbor_alltoall_init(snd, 1, MPI_INT, got2, 1, MPI_INT, ring, MPI_INFO_NULL, &q[1]));
    for (int it = 0; it < 2; it++) {
        v = me + it;
        snd[0] = me * 10 + it;
        snd[1] = me * 10 + 5 + it;
        OK(MPI_Startall(2, q));
        int done = 0;
        while (!done) OK(MPI_Testall(2, q, &done, MPI_STATUSES_IGNORE));
        CHECK(got[0] == left + it && got[1] == right + it);
        CHECK(got2[0] == left * 10 + 5 + it && got2[1] == right * 10 + it);
    }
    OK(MPI_Request_free(&q[0]));
    OK(MPI_Request_free(&q[1]));
    /* The v-form takes its counts and displacements at init: the arrays are reused after. */
    int sc[2] = {1, 1}, sd[2] = {1, 0}, rc[2] = {1, 1}, rd[2] = {1, 0};
    OK(MPI_Neighbor_alltoallv_init(snd, sc, sd, MPI_INT, got2, rc, rd, MPI_INT, ring,
                                   MPI_INFO_NULL, &q[0]));
    sc[0] = sc[1] = rc[0] = rc[1] = -7;
    sd[0] = sd[1] = rd[0] = rd[1] = 1 << 28;
    snd[0] = me * 10;
    snd[1] = me * 10 + 5;
    OK(MPI_Start(&q[0]));
    OK(MPI_Wait(&q[0], MPI_STATUS_IGNORE));
    /* block 0 (to the left) is snd[1], block 1 (to the right) snd[0]; received likewise swapped */
    CHECK(got2[1] == left * 10 && got2[0] == right * 10 + 5, "got %d %d", got2[0], got2[1]);
    OK(MPI_Request_free(&q[0]));
    OK(MPI_Comm_free(&ring));
}

int main(int argc, char **argv) {
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &n));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    test_basic();
    test_moves();
    test_neighbours();
    printf("PASS persist rank %d of %d\n", me, n);
    OK(MPI_Finalize());
    return 0;
}

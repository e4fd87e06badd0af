/* Topologies: Cartesian (create, coords, rank, shift, sub, get, map, dims_create), graph,
 * distributed graph, and the neighbour collectives on each, blocking and non-blocking. */
#include "check.h"
#include <string.h>

static int n, me;

static void test_cart(void) {
    int dims[2] = {0, 0}, periods[2] = {1, 0}, st;
    OK(MPI_Dims_create(n, 2, dims));
    CHECK(dims[0] * dims[1] == n && dims[0] >= dims[1]);
    int fixed[3] = {0, 1, 0};
    OK(MPI_Dims_create(n, 3, fixed));
    CHECK(fixed[0] * fixed[1] * fixed[2] == n && fixed[1] == 1);

    MPI_Comm cart;
    OK(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart));
    OK(MPI_Topo_test(cart, &st));
    CHECK(st == MPI_CART);
    OK(MPI_Topo_test(MPI_COMM_WORLD, &st));
    CHECK(st == MPI_UNDEFINED);
    int nd, gd[2], gp[2], gc[2], cr;
    OK(MPI_Cartdim_get(cart, &nd));
    CHECK(nd == 2);
    OK(MPI_Cart_get(cart, 2, gd, gp, gc));
    CHECK(gd[0] == dims[0] && gd[1] == dims[1] && gp[0] == 1 && gp[1] == 0);
    CHECK(gc[0] == me / dims[1] && gc[1] == me % dims[1]);
    for (int r = 0; r < n; r++) {
        int c[2];
        OK(MPI_Cart_coords(cart, r, 2, c));
        CHECK(c[0] == r / dims[1] && c[1] == r % dims[1]);
        OK(MPI_Cart_rank(cart, c, &cr));
        CHECK(cr == r);
    }
    int src, dst;
    OK(MPI_Cart_shift(cart, 0, 1, &src, &dst));
    CHECK(src == ((gc[0] - 1 + dims[0]) % dims[0]) * dims[1] + gc[1]);
    CHECK(dst == ((gc[0] + 1) % dims[0]) * dims[1] + gc[1]);
    OK(MPI_Cart_shift(cart, 1, 1, &src, &dst));
    CHECK(src == (gc[1] == 0 ? MPI_PROC_NULL : me - 1));
    CHECK(dst == (gc[1] == dims[1] - 1 ? MPI_PROC_NULL : me + 1));
    int newrank;
    OK(MPI_Cart_map(MPI_COMM_WORLD, 2, dims, periods, &newrank));
    CHECK(newrank == me);

    /* neighbours in MPI's order: dim 0 at -1, +1, dim 1 at -1, +1 */
    int nb[4];
    OK(MPI_Cart_shift(cart, 0, 1, &nb[0], &nb[1]));
    OK(MPI_Cart_shift(cart, 1, 1, &nb[2], &nb[3]));
    int got[4], q2[8];
    MPI_Request q;
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < 4; k++) got[k] = -1;
        if (pass == 0) {
            OK(MPI_Neighbor_allgather(&me, 1, MPI_INT, got, 1, MPI_INT, cart));
        } else {
            OK(MPI_Ineighbor_allgather(&me, 1, MPI_INT, got, 1, MPI_INT, cart, &q));
            OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        }
        for (int k = 0; k < 4; k++) CHECK(got[k] == (nb[k] == MPI_PROC_NULL ? -1 : nb[k]));
    }
    /* alltoall: block k goes to neighbour k; from the -1 neighbour comes what it sent up */
    int out[4];
    for (int k = 0; k < 4; k++) out[k] = me * 10 + k;
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < 4; k++) got[k] = -1;
        if (pass == 0) {
            OK(MPI_Neighbor_alltoall(out, 1, MPI_INT, got, 1, MPI_INT, cart));
        } else {
            OK(MPI_Ineighbor_alltoall(out, 1, MPI_INT, got, 1, MPI_INT, cart, &q));
            OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        }
        for (int k = 0; k < 4; k++)
            CHECK(got[k] == (nb[k] == MPI_PROC_NULL ? -1 : nb[k] * 10 + (k ^ 1)));
    }
    /* allgatherv with a gap after each block */
    int rc[4] = {1, 1, 1, 1}, ds[4] = {0, 2, 4, 6};
    for (int k = 0; k < 8; k++) q2[k] = -1;
    OK(MPI_Neighbor_allgatherv(&me, 1, MPI_INT, q2, rc, ds, MPI_INT, cart));
    for (int k = 0; k < 4; k++) {
        CHECK(q2[2 * k] == (nb[k] == MPI_PROC_NULL ? -1 : nb[k]));
        CHECK(q2[2 * k + 1] == -1);
    }

    MPI_Comm row;
    int keep[2] = {0, 1}, rs, rr;
    OK(MPI_Cart_sub(cart, keep, &row));
    OK(MPI_Comm_size(row, &rs));
    OK(MPI_Comm_rank(row, &rr));
    CHECK(rs == dims[1] && rr == gc[1]);
    OK(MPI_Cartdim_get(row, &nd));
    CHECK(nd == 1);
    /* MPI_Comm_free is not built on this branch yet: finalize frees it */
    /* MPI_Comm_free is not built on this branch yet: finalize frees it */
}

static void test_graph(void) {
    /* a ring: each node lists both sides (one side for 2 nodes, none for 1) */
    int index[8], edges[16], e = 0;
    for (int i = 0; i < n; i++) {
        if (n >= 3) { edges[e++] = (i + 1) % n; edges[e++] = (i - 1 + n) % n; }
        else if (n == 2) edges[e++] = 1 - i;
        index[i] = e;
    }
    MPI_Comm g;
    int st, nn, ne, cnt, nbs[4];
    OK(MPI_Graph_create(MPI_COMM_WORLD, n, index, edges, 0, &g));
    OK(MPI_Topo_test(g, &st));
    CHECK(st == MPI_GRAPH);
    OK(MPI_Graphdims_get(g, &nn, &ne));
    CHECK(nn == n && ne == e);
    int gi[8], ge[16];
    OK(MPI_Graph_get(g, 8, 16, gi, ge));
    for (int i = 0; i < n; i++) CHECK(gi[i] == index[i]);
    for (int i = 0; i < e; i++) CHECK(ge[i] == edges[i]);
    OK(MPI_Graph_neighbors_count(g, me, &cnt));
    int lo = me == 0 ? 0 : index[me - 1];
    CHECK(cnt == index[me] - lo);
    OK(MPI_Graph_neighbors(g, me, 4, nbs));
    for (int k = 0; k < cnt; k++) CHECK(nbs[k] == edges[lo + k]);
    int newrank;
    OK(MPI_Graph_map(MPI_COMM_WORLD, n, index, edges, &newrank));
    CHECK(newrank == me);
    int got[4] = {-1, -1, -1, -1};
    OK(MPI_Neighbor_allgather(&me, 1, MPI_INT, got, 1, MPI_INT, g));
    for (int k = 0; k < cnt; k++) CHECK(got[k] == nbs[k]);
    /* MPI_Comm_free is not built on this branch yet: finalize frees it */
}

static void test_dist_graph(void) {
    int src = (me - 1 + n) % n, dst = (me + 1) % n, w = 5;
    MPI_Comm dg;
    int st, in, out, wt;
    OK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &src, &w, 1, &dst, &w, MPI_INFO_NULL,
                                      0, &dg));
    OK(MPI_Topo_test(dg, &st));
    CHECK(st == MPI_DIST_GRAPH);
    OK(MPI_Dist_graph_neighbors_count(dg, &in, &out, &wt));
    CHECK(in == 1 && out == 1 && wt == 1);
    int s, sw, d, dw;
    OK(MPI_Dist_graph_neighbors(dg, 1, &s, &sw, 1, &d, &dw));
    CHECK(s == src && d == dst && sw == 5 && dw == 5);

    /* alltoallv: two ints to the next rank, from the previous one */
    int send[2] = {me, me * 2}, recv[3] = {-1, -1, -1}, c2 = 2, z = 0, one = 1;
    OK(MPI_Neighbor_alltoallv(send, &c2, &z, MPI_INT, recv, &c2, &one, MPI_INT, dg));
    CHECK(recv[0] == -1 && recv[1] == src && recv[2] == src * 2);
    /* alltoallw: the same, received as one double-int-sized... as two ints at byte 4 */
    MPI_Aint zb = 0, fb = 4;
    MPI_Datatype ti = MPI_INT;
    MPI_Request q;
    recv[0] = recv[1] = recv[2] = -1;
    OK(MPI_Ineighbor_alltoallw(send, &c2, &zb, &ti, recv, &c2, &fb, &ti, dg, &q));
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    CHECK(recv[0] == -1 && recv[1] == src && recv[2] == src * 2);
    OK(MPI_Ineighbor_alltoallv(send, &c2, &z, MPI_INT, recv, &c2, &z, MPI_INT, dg, &q));
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    CHECK(recv[0] == src && recv[1] == src * 2);
    int gv[2] = {-1, -1};
    OK(MPI_Ineighbor_allgatherv(&me, 1, MPI_INT, gv, &one, &one, MPI_INT, dg, &q));
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    CHECK(gv[0] == -1 && gv[1] == src);
    /* MPI_Comm_free is not built on this branch yet: finalize frees it */

    /* the same ring, each rank naming its outgoing edge, unweighted */
    int deg = 1;
    OK(MPI_Dist_graph_create(MPI_COMM_WORLD, 1, &me, &deg, &dst, MPI_UNWEIGHTED, MPI_INFO_NULL,
                             0, &dg));
    OK(MPI_Dist_graph_neighbors_count(dg, &in, &out, &wt));
    CHECK(in == 1 && out == 1 && wt == 0);
    OK(MPI_Dist_graph_neighbors(dg, 1, &s, MPI_UNWEIGHTED, 1, &d, MPI_UNWEIGHTED));
    CHECK(s == src && d == dst);
    int got = -1;
    OK(MPI_Neighbor_allgather(&me, 1, MPI_INT, &got, 1, MPI_INT, dg));
    CHECK(got == src);
    /* MPI_Comm_free is not built on this branch yet: finalize frees it */
}

int main(int argc, char **argv) {
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &n));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    test_cart();
    test_graph();
    test_dist_graph();
    OK(MPI_Finalize());
    printf("PASS topo rank %d of %d\n", me, n);
    return 0;
}

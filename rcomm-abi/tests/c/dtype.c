/* Derived datatypes: constructors, size/extent, envelope/contents, pack/unpack, MPI_BOTTOM
 * with absolute addresses, and derived types in collectives and reductions (send derived,
 * receive contiguous and back). */
#include "check.h"
#include <stddef.h>
#include <string.h>

static int n, me;

static void extent_is(MPI_Datatype t, MPI_Aint lb, MPI_Aint ext, int size) {
    MPI_Aint l, e;
    int s;
    OK(MPI_Type_get_extent(t, &l, &e));
    OK(MPI_Type_size(t, &s));
    if (l != lb || e != ext || s != size)
        fprintf(stderr, "lb %ld extent %ld size %d, want %ld %ld %d\n", (long)l, (long)e, s,
                (long)lb, (long)ext, size);
    CHECK(l == lb && e == ext && s == size);
}

static void envelope_is(MPI_Datatype t, int ni, int na, int nd, int comb) {
    int a, b, c, k;
    OK(MPI_Type_get_envelope(t, &a, &b, &c, &k));
    if (a != ni || b != na || c != nd || k != comb)
        fprintf(stderr, "envelope %d %d %d %d, want %d %d %d %d\n", a, b, c, k, ni, na, nd, comb);
    CHECK(a == ni && b == na && c == nd && k == comb);
}

static void test_constructors(void) {
    MPI_Datatype col, idx, hv, hidx, ib, hib, dup, rs, cont, idx2;
    OK(MPI_Type_vector(4, 1, 5, MPI_INT, &col));
    extent_is(col, 0, 16 * 4, 16);
    envelope_is(col, 3, 0, 1, MPI_COMBINER_VECTOR);
    int ints[8];
    MPI_Aint aints[8];
    MPI_Datatype types[4];
    OK(MPI_Type_get_contents(col, 8, 8, 4, ints, aints, types));
    CHECK(ints[0] == 4 && ints[1] == 1 && ints[2] == 5 && types[0] == MPI_INT);

    int bl[3] = {2, 1, 3}, di[3] = {0, 4, 7};
    OK(MPI_Type_indexed(3, bl, di, MPI_INT, &idx));
    extent_is(idx, 0, 40, 24);
    envelope_is(idx, 7, 0, 1, MPI_COMBINER_INDEXED);
    OK(MPI_Type_get_contents(idx, 8, 8, 4, ints, aints, types));
    CHECK(ints[0] == 3 && ints[1] == 2 && ints[3] == 3 && ints[4] == 0 && ints[6] == 7);

    OK(MPI_Type_create_hvector(3, 2, 20, MPI_SHORT, &hv));
    extent_is(hv, 0, 44, 12);
    envelope_is(hv, 2, 1, 1, MPI_COMBINER_HVECTOR);
    MPI_Aint hd[2] = {8, 0};
    int hbl[2] = {1, 2};
    OK(MPI_Type_create_hindexed(2, hbl, hd, MPI_INT, &hidx));
    extent_is(hidx, 0, 12, 12);
    envelope_is(hidx, 3, 2, 1, MPI_COMBINER_HINDEXED);
    int ibd[2] = {3, 0};
    OK(MPI_Type_create_indexed_block(2, 2, ibd, MPI_DOUBLE, &ib));
    extent_is(ib, 0, 40, 32);
    envelope_is(ib, 4, 0, 1, MPI_COMBINER_INDEXED_BLOCK);
    MPI_Aint hibd[2] = {0, 16};
    OK(MPI_Type_create_hindexed_block(2, 1, hibd, MPI_INT, &hib));
    extent_is(hib, 0, 20, 8);
    envelope_is(hib, 2, 2, 1, MPI_COMBINER_HINDEXED_BLOCK);
    OK(MPI_Type_dup(col, &dup));
    extent_is(dup, 0, 64, 16);
    envelope_is(dup, 0, 0, 1, MPI_COMBINER_DUP);
    OK(MPI_Type_create_resized(col, 0, sizeof(int), &rs));
    extent_is(rs, 0, sizeof(int), 16);
    envelope_is(rs, 0, 2, 1, MPI_COMBINER_RESIZED);
    MPI_Aint tl, te;
    OK(MPI_Type_get_true_extent(rs, &tl, &te));
    CHECK(tl == 0 && te == 64);
    MPI_Count sc, lc, ec;
    OK(MPI_Type_size_c(col, &sc));
    OK(MPI_Type_get_extent_c(col, &lc, &ec));
    CHECK(sc == 16 && lc == 0 && ec == 64);
    envelope_is(MPI_INT, 0, 0, 0, MPI_COMBINER_NAMED);

    /* a derived component comes back as a new handle that outlives the original */
    OK(MPI_Type_contiguous(2, MPI_INT, &cont));
    envelope_is(cont, 1, 0, 1, MPI_COMBINER_CONTIGUOUS);
    OK(MPI_Type_indexed(3, bl, di, cont, &idx2));
    OK(MPI_Type_free(&cont));
    CHECK(cont == MPI_DATATYPE_NULL);
    OK(MPI_Type_get_contents(idx2, 8, 8, 4, ints, aints, types));
    envelope_is(types[0], 1, 0, 1, MPI_COMBINER_CONTIGUOUS);
    extent_is(types[0], 0, 8, 8);
    OK(MPI_Type_free(&types[0]));
    extent_is(idx2, 0, 80, 48);

    MPI_Datatype all[] = {col, idx, hv, hidx, ib, hib, dup, rs, idx2};
    for (unsigned i = 0; i < sizeof all / sizeof all[0]; i++) OK(MPI_Type_free(&all[i]));
}

struct s1 { char c; double d; int i[2]; };
struct s2 { double d; char c; };

static MPI_Datatype struct_type(void) {
    int bl[3] = {1, 1, 2};
    MPI_Aint d[3] = {offsetof(struct s1, c), offsetof(struct s1, d), offsetof(struct s1, i)};
    MPI_Datatype t[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT}, st;
    OK(MPI_Type_create_struct(3, bl, d, t, &st));
    OK(MPI_Type_commit(&st));
    return st;
}

static void test_struct(void) {
    MPI_Datatype st = struct_type(), st2;
    extent_is(st, 0, sizeof(struct s1), 1 + 8 + 8);
    envelope_is(st, 4, 3, 3, MPI_COMBINER_STRUCT);
    int bl[2] = {1, 1};
    MPI_Aint d[2] = {offsetof(struct s2, d), offsetof(struct s2, c)};
    MPI_Datatype t[2] = {MPI_DOUBLE, MPI_CHAR};
    OK(MPI_Type_create_struct(2, bl, d, t, &st2));
    /* padded to the double's alignment, as C pads the struct */
    extent_is(st2, 0, sizeof(struct s2), 9);
    OK(MPI_Type_free(&st2));

    struct s1 a[3];
    memset(a, 0, sizeof a);
    for (int k = 0; k < 3; k++)
        if (me == 0) { a[k].c = 'a' + k; a[k].d = k + 0.25; a[k].i[0] = k; a[k].i[1] = -k; }
    OK(MPI_Bcast(a, 3, st, 0, MPI_COMM_WORLD));
    for (int k = 0; k < 3; k++)
        CHECK(a[k].c == 'a' + k && a[k].d == k + 0.25 && a[k].i[0] == k && a[k].i[1] == -k);

    /* absolute addresses from MPI_BOTTOM */
    int x = me == 0 ? 41 : 0;
    double y = me == 0 ? 2.5 : 0;
    MPI_Aint ax, ay;
    OK(MPI_Get_address(&x, &ax));
    OK(MPI_Get_address(&y, &ay));
    int abl[2] = {1, 1};
    MPI_Aint ad[2] = {ax, ay};
    MPI_Datatype at[2] = {MPI_INT, MPI_DOUBLE}, abs_t;
    OK(MPI_Type_create_struct(2, abl, ad, at, &abs_t));
    OK(MPI_Type_commit(&abs_t));
    OK(MPI_Bcast(MPI_BOTTOM, 1, abs_t, 0, MPI_COMM_WORLD));
    CHECK(x == 41 && y == 2.5);
    OK(MPI_Type_free(&abs_t));
    OK(MPI_Type_free(&st));
}

static void test_in_collectives(void) {
    /* a 4x5 matrix; column `me % 5` goes out as one vector element, lands as 4 ints */
    int m[20], got[64], back[20];
    for (int i = 0; i < 20; i++) m[i] = me * 100 + i;
    MPI_Datatype col;
    OK(MPI_Type_vector(4, 1, 5, MPI_INT, &col));
    OK(MPI_Type_commit(&col));
    OK(MPI_Allgather(m + me % 5, 1, col, got, 4, MPI_INT, MPI_COMM_WORLD));
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) CHECK(got[4 * i + k] == i * 100 + k * 5 + i % 5);
    /* and back: contiguous out, into a column of each receiver's matrix */
    MPI_Datatype colr;
    OK(MPI_Type_create_resized(col, 0, sizeof(int), &colr));
    OK(MPI_Type_commit(&colr));
    int send[64];
    for (int j = 0; j < n; j++)
        for (int k = 0; k < 4; k++) send[4 * j + k] = me * 10 + j + k * 1000;
    for (int i = 0; i < 20; i++) back[i] = -1;
    /* block i of the receive is column i (the resized type's extent is one int) */
    CHECK(n <= 5);
    OK(MPI_Alltoall(send, 4, MPI_INT, back, 1, colr, MPI_COMM_WORLD));
    for (int i = 0; i < 5; i++)
        for (int k = 0; k < 4; k++)
            CHECK(back[k * 5 + i] == (i < n ? i * 10 + me + k * 1000 : -1));

    /* subarray: the 2x3 block at (1,2) of a 4x6 array */
    int arr[24], sub[64];
    for (int i = 0; i < 24; i++) arr[i] = me * 1000 + i;
    int sz[2] = {4, 6}, ss[2] = {2, 3}, st[2] = {1, 2};
    MPI_Datatype subt;
    OK(MPI_Type_create_subarray(2, sz, ss, st, MPI_ORDER_C, MPI_INT, &subt));
    OK(MPI_Type_commit(&subt));
    extent_is(subt, 0, 24 * sizeof(int), 6 * sizeof(int));
    envelope_is(subt, 8, 0, 1, MPI_COMBINER_SUBARRAY);
    OK(MPI_Gather(arr, 1, subt, sub, 6, MPI_INT, 0, MPI_COMM_WORLD));
    if (me == 0)
        for (int i = 0; i < n; i++)
            for (int r = 0; r < 2; r++)
                for (int c = 0; c < 3; c++)
                    CHECK(sub[6 * i + 3 * r + c] == i * 1000 + (1 + r) * 6 + 2 + c);
    /* and back into a subarray of a zeroed array */
    int into[24];
    memset(into, 0, sizeof into);
    OK(MPI_Scatter(sub, 6, MPI_INT, into, 1, subt, 0, MPI_COMM_WORLD));
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 6; c++) {
            int in = r >= 1 && r < 3 && c >= 2 && c < 5;
            CHECK(into[r * 6 + c] == (in ? me * 1000 + r * 6 + c : 0));
        }

    /* a reduction on a derived type of one predefined type: summed element by element in
     * place in the strided layout */
    int mm[20], sum[20];
    for (int i = 0; i < 20; i++) { mm[i] = me + i; sum[i] = -5; }
    OK(MPI_Allreduce(mm, sum, 1, col, MPI_SUM, MPI_COMM_WORLD));
    for (int i = 0; i < 20; i++)
        CHECK(sum[i] == (i % 5 == 0 ? n * (n - 1) / 2 + n * i : -5));

    /* pack / unpack */
    char buf[256];
    int pos = 0, psz;
    OK(MPI_Pack_size(1, col, MPI_COMM_WORLD, &psz));
    CHECK(psz == 16);
    int extra = 77;
    OK(MPI_Pack(m, 1, col, buf, sizeof buf, &pos, MPI_COMM_WORLD));
    OK(MPI_Pack(&extra, 1, MPI_INT, buf, sizeof buf, &pos, MPI_COMM_WORLD));
    CHECK(pos == 20);
    int five[5], p2 = 0;
    OK(MPI_Unpack(buf, pos, &p2, five, 5, MPI_INT, MPI_COMM_WORLD));
    for (int k = 0; k < 4; k++) CHECK(five[k] == me * 100 + k * 5);
    CHECK(five[4] == 77 && p2 == 20);

    OK(MPI_Type_free(&col));
    OK(MPI_Type_free(&colr));
    OK(MPI_Type_free(&subt));
}

/* A component whose handle the program freed still answers through the handles
 * MPI_Type_get_contents gives back, level after level (mpi4py's dtlib walks types so). */
static void test_contents_outlive_handles(void) {
    MPI_Datatype d, v, s;
    OK(MPI_Type_dup(MPI_INT, &d));
    OK(MPI_Type_contiguous(3, d, &v));
    OK(MPI_Type_create_struct(1, (int[]){2}, (MPI_Aint[]){0}, (MPI_Datatype[]){v}, &s));
    OK(MPI_Type_free(&d));
    OK(MPI_Type_free(&v));
    int ni, na, nd, comb, ints[4];
    MPI_Aint aints[4];
    MPI_Datatype parts[2];
    OK(MPI_Type_get_contents(s, 4, 4, 2, ints, aints, parts));
    envelope_is(parts[0], 1, 0, 1, MPI_COMBINER_CONTIGUOUS);
    OK(MPI_Type_get_contents(parts[0], 4, 4, 2, ints, aints, &parts[1]));
    CHECK(ints[0] == 3, "contiguous count %d", ints[0]);
    envelope_is(parts[1], 0, 0, 1, MPI_COMBINER_DUP);
    MPI_Datatype base;
    OK(MPI_Type_get_envelope(parts[1], &ni, &na, &nd, &comb));
    OK(MPI_Type_get_contents(parts[1], 0, 0, 1, ints, aints, &base));
    CHECK(base == MPI_INT, "the dup's base is MPI_INT");
    OK(MPI_Type_free(&parts[1]));
    OK(MPI_Type_free(&parts[0]));
    OK(MPI_Type_free(&s));
}

int main(int argc, char **argv) {
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &n));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    test_constructors();
    test_struct();
    test_in_collectives();
    test_contents_outlive_handles();
    OK(MPI_Finalize());
    printf("PASS dtype rank %d of %d\n", me, n);
    return 0;
}

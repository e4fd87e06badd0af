/* Datatype names (predefined ones have their MPI names), datatype attributes with their
 * delete callbacks, MPI_Type_match_size, MPI_Type_get_value_index, and packing in the
 * external32 representation (big-endian bytes written out here). */
#include "check.h"

static int deleted, last_deleted;

static int on_delete(MPI_Datatype t, int key, void *val, void *extra) {
    (void)t;
    (void)key;
    CHECK(extra == &deleted);
    deleted++;
    last_deleted = (int)(size_t)val;
    return MPI_SUCCESS;
}

static int plus_one(MPI_Datatype t, int key, void *extra, void *in, void *out, int *flag) {
    (void)t;
    (void)key;
    (void)extra;
    *(void **)out = (void *)((size_t)in + 1);
    *flag = 1;
    return MPI_SUCCESS;
}

/* MPI_Type_dup copies attributes as each keyval's copy callback says. */
static void test_dup_attrs(void) {
    int kdup, knull, kplus, flag;
    void *v;
    OK(MPI_Type_create_keyval(MPI_TYPE_DUP_FN, MPI_TYPE_NULL_DELETE_FN, &kdup, NULL));
    OK(MPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, MPI_TYPE_NULL_DELETE_FN, &knull, NULL));
    OK(MPI_Type_create_keyval(plus_one, MPI_TYPE_NULL_DELETE_FN, &kplus, NULL));
    MPI_Datatype t, d;
    OK(MPI_Type_contiguous(2, MPI_INT, &t));
    OK(MPI_Type_set_attr(t, kdup, (void *)(size_t)21));
    OK(MPI_Type_set_attr(t, knull, (void *)(size_t)22));
    OK(MPI_Type_set_attr(t, kplus, (void *)(size_t)23));
    OK(MPI_Type_dup(t, &d));
    OK(MPI_Type_get_attr(d, kdup, &v, &flag));
    CHECK(flag && v == (void *)(size_t)21);
    OK(MPI_Type_get_attr(d, knull, &v, &flag));
    CHECK(!flag);
    OK(MPI_Type_get_attr(d, kplus, &v, &flag));
    CHECK(flag && v == (void *)(size_t)24);
    OK(MPI_Type_free(&d));
    OK(MPI_Type_free(&t));
    OK(MPI_Type_free_keyval(&kdup));
    OK(MPI_Type_free_keyval(&knull));
    OK(MPI_Type_free_keyval(&kplus));
}

static void name_is(MPI_Datatype t, const char *want) {
    char name[MPI_MAX_OBJECT_NAME];
    int len = -1;
    OK(MPI_Type_get_name(t, name, &len));
    CHECK(strcmp(name, want) == 0 && len == (int)strlen(want), "name '%s' want '%s'", name, want);
}

static void test_names(void) {
    name_is(MPI_INT, "MPI_INT");
    name_is(MPI_DOUBLE, "MPI_DOUBLE");
    name_is(MPI_FLOAT_INT, "MPI_FLOAT_INT");
    MPI_Datatype t;
    OK(MPI_Type_contiguous(2, MPI_INT, &t));
    name_is(t, "");
    OK(MPI_Type_set_name(t, "pair of ints"));
    name_is(t, "pair of ints");
    OK(MPI_Type_free(&t));
    /* The null handles answer with their names, as MPICH does. */
    name_is(MPI_DATATYPE_NULL, "MPI_DATATYPE_NULL");
    char name[MPI_MAX_OBJECT_NAME];
    int len = -1;
    OK(MPI_Comm_get_name(MPI_COMM_NULL, name, &len));
    CHECK(strcmp(name, "MPI_COMM_NULL") == 0 && len == 13, "comm null name '%s'", name);
}

/* The Fortran 90 parameterised types: predefined (not freeable), the sized type's layout, the
 * F90 combiner with its arguments, the same handle for the same arguments. */
static void test_f90(void) {
    MPI_Datatype t, u;
    int size, ni, na, nd, comb, ints[2];
    struct {
        int kind, p, r, size;
    } cases[] = {{0, 0, 2, 1}, {0, 0, 4, 2}, {0, 0, 9, 4}, {0, 0, 18, 8},
                 {1, 6, 30, 4}, {1, 15, 300, 8}, {1, MPI_UNDEFINED, 200, 8},
                 {2, 6, 30, 8}, {2, 15, MPI_UNDEFINED, 16}};
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int k = cases[i].kind, p = cases[i].p, r = cases[i].r;
        if (k == 0) OK(MPI_Type_create_f90_integer(r, &t));
        if (k == 1) OK(MPI_Type_create_f90_real(p, r, &t));
        if (k == 2) OK(MPI_Type_create_f90_complex(p, r, &t));
        OK(MPI_Type_size(t, &size));
        CHECK(size == cases[i].size, "f90 case %u: size %d", i, size);
        OK(MPI_Type_get_envelope(t, &ni, &na, &nd, &comb));
        int want = k == 0 ? MPI_COMBINER_F90_INTEGER
                          : k == 1 ? MPI_COMBINER_F90_REAL : MPI_COMBINER_F90_COMPLEX;
        CHECK(comb == want && ni == (k == 0 ? 1 : 2) && na == 0 && nd == 0, "f90 case %u", i);
        OK(MPI_Type_get_contents(t, 2, 0, 0, ints, NULL, NULL));
        CHECK(k == 0 ? ints[0] == r : (ints[0] == p && ints[1] == r), "f90 case %u contents", i);
        if (k == 0) OK(MPI_Type_create_f90_integer(r, &u));
        if (k == 1) OK(MPI_Type_create_f90_real(p, r, &u));
        if (k == 2) OK(MPI_Type_create_f90_complex(p, r, &u));
        CHECK(u == t, "f90 case %u: a second call gives another handle", i);
    }
    /* A message in an F90 type. */
    OK(MPI_Type_create_f90_real(15, 300, &t));
    double out[3] = {1.5, -2.25, 1e300}, in[3] = {0, 0, 0};
    OK(MPI_Sendrecv(out, 3, t, 0, 9, in, 3, t, 0, 9, MPI_COMM_SELF, MPI_STATUS_IGNORE));
    CHECK(in[0] == 1.5 && in[1] == -2.25 && in[2] == 1e300, "f90 real message");
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int cls, rc = MPI_Type_free(&t);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TYPE, "freeing an f90 type: class %d", cls);
    rc = MPI_Type_create_f90_integer(40, &t);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_ARG, "integer range 40: class %d", cls);
    rc = MPI_Type_create_f90_real(MPI_UNDEFINED, MPI_UNDEFINED, &t);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_ARG, "real with neither: class %d", cls);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
}

static void test_attrs(void) {
    int key;
    OK(MPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, on_delete, &key, &deleted));
    MPI_Datatype t;
    OK(MPI_Type_contiguous(3, MPI_INT, &t));
    void *v;
    int flag = -1;
    OK(MPI_Type_get_attr(t, key, &v, &flag));
    CHECK(flag == 0);
    OK(MPI_Type_set_attr(t, key, (void *)(size_t)11));
    OK(MPI_Type_get_attr(t, key, &v, &flag));
    CHECK(flag == 1 && v == (void *)(size_t)11);
    /* replacing deletes the old value */
    OK(MPI_Type_set_attr(t, key, (void *)(size_t)12));
    CHECK(deleted == 1 && last_deleted == 11);
    OK(MPI_Type_delete_attr(t, key));
    CHECK(deleted == 2 && last_deleted == 12);
    OK(MPI_Type_get_attr(t, key, &v, &flag));
    CHECK(flag == 0);
    /* freeing the type deletes what it holds */
    OK(MPI_Type_set_attr(t, key, (void *)(size_t)13));
    OK(MPI_Type_free(&t));
    CHECK(deleted == 3 && last_deleted == 13);
    /* predefined types hold attributes too */
    OK(MPI_Type_set_attr(MPI_INT, key, (void *)(size_t)14));
    OK(MPI_Type_get_attr(MPI_INT, key, &v, &flag));
    CHECK(flag == 1 && v == (void *)(size_t)14);
    OK(MPI_Type_delete_attr(MPI_INT, key));
    CHECK(deleted == 4 && last_deleted == 14);
    OK(MPI_Type_free_keyval(&key));
    CHECK(key == MPI_KEYVAL_INVALID);
}

static void test_match(void) {
    MPI_Datatype t;
    int size;
    struct {
        int cls, size;
        MPI_Datatype want;
    } cases[] = {
        {MPI_TYPECLASS_INTEGER, 1, MPI_INTEGER1}, {MPI_TYPECLASS_INTEGER, 4, MPI_INTEGER4},
        {MPI_TYPECLASS_INTEGER, 8, MPI_INTEGER8}, {MPI_TYPECLASS_REAL, 4, MPI_REAL4},
        {MPI_TYPECLASS_REAL, 8, MPI_REAL8},       {MPI_TYPECLASS_COMPLEX, 16, MPI_COMPLEX16},
        {MPI_TYPECLASS_REAL, 2, MPI_REAL2},       {MPI_TYPECLASS_COMPLEX, 4, MPI_COMPLEX4},
    };
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        OK(MPI_Type_match_size(cases[i].cls, cases[i].size, &t));
        CHECK(t == cases[i].want, "case %u", i);
        OK(MPI_Type_size(t, &size));
        CHECK(size == cases[i].size);
    }
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int cls, rc = MPI_Type_match_size(MPI_TYPECLASS_REAL, 3, &t);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_ARG, "class %d", cls);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));

    OK(MPI_Type_get_value_index(MPI_DOUBLE, MPI_INT, &t));
    CHECK(t == MPI_DOUBLE_INT);
    OK(MPI_Type_get_value_index(MPI_INT, MPI_INT, &t));
    CHECK(t == MPI_2INT);
    OK(MPI_Type_get_value_index(MPI_CHAR, MPI_INT, &t));
    CHECK(t == MPI_DATATYPE_NULL);
}

static void bytes_are(const unsigned char *got, const unsigned char *want, int n) {
    for (int i = 0; i < n; i++) CHECK(got[i] == want[i], "byte %d is %#x, want %#x", i, got[i], want[i]);
}

static void test_external(void) {
    const char *rep = "external32";
    unsigned char buf[64];
    MPI_Aint size, pos = 0;
    int a[3] = {1, -2, 0x01020304}, back[3] = {0, 0, 0};
    OK(MPI_Pack_external_size(rep, 3, MPI_INT, &size));
    CHECK(size == 12);
    OK(MPI_Pack_external(rep, a, 3, MPI_INT, buf, sizeof buf, &pos));
    CHECK(pos == 12);
    bytes_are(buf, (unsigned char[]){0, 0, 0, 1, 0xff, 0xff, 0xff, 0xfe, 1, 2, 3, 4}, 12);
    pos = 0;
    OK(MPI_Unpack_external(rep, buf, 12, &pos, back, 3, MPI_INT));
    CHECK(pos == 12 && back[0] == 1 && back[1] == -2 && back[2] == 0x01020304);

    double d = 1.0, dback = 0;
    MPI_Count cpos = 0, csize;
    OK(MPI_Pack_external_size_c(rep, 1, MPI_DOUBLE, &csize));
    CHECK(csize == 8);
    OK(MPI_Pack_external_c(rep, &d, 1, MPI_DOUBLE, buf, sizeof buf, &cpos));
    CHECK(cpos == 8);
    bytes_are(buf, (unsigned char[]){0x3f, 0xf0, 0, 0, 0, 0, 0, 0}, 8);
    cpos = 0;
    OK(MPI_Unpack_external_c(rep, buf, 8, &cpos, &dback, 1, MPI_DOUBLE));
    CHECK(dback == 1.0);

    /* long is 4 bytes in external32 */
    long l[2] = {5, -1}, lback[2] = {0, 0};
    OK(MPI_Pack_external_size(rep, 2, MPI_LONG, &size));
    CHECK(size == 8);
    pos = 0;
    OK(MPI_Pack_external(rep, l, 2, MPI_LONG, buf, sizeof buf, &pos));
    bytes_are(buf, (unsigned char[]){0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff}, 8);
    pos = 0;
    OK(MPI_Unpack_external(rep, buf, 8, &pos, lback, 2, MPI_LONG));
    CHECK(lback[0] == 5 && lback[1] == -1);

    /* a derived type of one basic type: every other int */
    MPI_Datatype v;
    OK(MPI_Type_vector(2, 1, 2, MPI_INT, &v));
    OK(MPI_Type_commit(&v));
    pos = 0;
    OK(MPI_Pack_external(rep, a, 1, v, buf, sizeof buf, &pos));
    CHECK(pos == 8);
    bytes_are(buf, (unsigned char[]){0, 0, 0, 1, 1, 2, 3, 4}, 8);
    OK(MPI_Type_free(&v));

    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int cls;
    long big = 1L << 40;
    pos = 0;
    int rc = MPI_Pack_external(rep, &big, 1, MPI_LONG, buf, sizeof buf, &pos);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_CONVERSION, "class %d", cls);
    rc = MPI_Pack_external("native", a, 1, MPI_INT, buf, sizeof buf, &pos);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_UNSUPPORTED_DATAREP, "class %d", cls);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
}

int main(int argc, char **argv) {
    int n, me;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &n));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    test_names();
    test_attrs();
    test_dup_attrs();
    test_match();
    test_f90();
    test_external();
    printf("PASS typeinfo rank %d of %d\n", me, n);
    OK(MPI_Finalize());
    return 0;
}

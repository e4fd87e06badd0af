/* Datatype names (predefined ones have their MPI names), datatype attributes with their
 * delete callbacks, MPI_Type_match_size and MPI_Type_get_value_index. */
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

int main(int argc, char **argv) {
    int n, me;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &n));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    test_names();
    test_attrs();
    test_match();
    printf("PASS typeinfo rank %d of %d\n", me, n);
    OK(MPI_Finalize());
    return 0;
}

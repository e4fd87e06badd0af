//! The ABI's types and constant values, written from the MPI-5.0 standard's ABI chapter
//! (predefined handles are fixed small integers, so a binary built against any ABI library
//! passes the same numbers). `tests/header.rs` compiles the published ABI header and checks
//! every value here against it; `header` writes rcomm's own `mpi.h` from these tables.
#![allow(non_camel_case_types, dead_code)]

/// C `int`.
pub type c_int = i32;
/// `MPI_Aint`: `intptr_t`.
pub type MPI_Aint = isize;
/// `MPI_Offset`: `int64_t`.
pub type MPI_Offset = i64;
/// `MPI_Count`: `MPI_Offset`.
pub type MPI_Count = i64;
/// Handles are pointers to incomplete structs in C; a pointer-sized integer has the same
/// calling convention and lets a value be compared against the live-object tables before use.
pub type MPI_Comm = usize;
/// See [`MPI_Comm`].
pub type MPI_Group = usize;
/// See [`MPI_Comm`].
pub type MPI_Datatype = usize;
/// See [`MPI_Comm`].
pub type MPI_Op = usize;
/// See [`MPI_Comm`].
pub type MPI_Request = usize;
/// See [`MPI_Comm`].
pub type MPI_Errhandler = usize;
/// See [`MPI_Comm`].
pub type MPI_Info = usize;
/// See [`MPI_Comm`].
pub type MPI_Message = usize;
/// See [`MPI_Comm`].
pub type MPI_Session = usize;
/// See [`MPI_Comm`].
pub type MPI_Win = usize;
/// See [`MPI_Comm`].
pub type MPI_File = usize;

/// `MPI_Status`: three public ints and five the library keeps (byte count low and high
/// halves, the cancelled flag).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MPI_Status {
    /// The sender's rank.
    pub MPI_SOURCE: c_int,
    /// The message's tag.
    pub MPI_TAG: c_int,
    /// The error of this request (multi-request calls).
    pub MPI_ERROR: c_int,
    /// Library-private.
    pub MPI_internal: [c_int; 5],
}

/// A C struct's layout: (C type, size, [(field, offset)]).
pub type StructLayout = (&'static str, usize, &'static [(&'static str, usize)]);

/// The struct layouts the header test checks.
pub const STRUCTS: &[StructLayout] = &[(
    "MPI_Status",
    32,
    &[
        ("MPI_SOURCE", 0),
        ("MPI_TAG", 4),
        ("MPI_ERROR", 8),
        ("MPI_internal", 12),
    ],
)];

/// Scalar types the header test checks by size: (C type, size).
pub const SCALARS: &[(&str, usize)] = &[
    ("MPI_Aint", 8),
    ("MPI_Offset", 8),
    ("MPI_Count", 8),
    ("MPI_Comm", 8),
    ("MPI_Group", 8),
    ("MPI_Datatype", 8),
    ("MPI_Op", 8),
    ("MPI_Request", 8),
    ("MPI_Errhandler", 8),
    ("MPI_Info", 8),
    ("MPI_Message", 8),
    ("MPI_Session", 8),
    ("MPI_Win", 8),
    ("MPI_File", 8),
];

macro_rules! int_consts {
    ($table:ident: $($name:ident = $v:expr),* $(,)?) => {
        $(#[doc = "Standard value."] pub const $name: c_int = $v;)*
        /// (name, value) of each constant, for the header and its test.
        pub const $table: &[(&str, c_int)] = &[$((stringify!($name), $name)),*];
    };
}

macro_rules! handle_consts {
    ($table:ident, $ty:ident: $($name:ident = $v:expr),* $(,)?) => {
        $(#[doc = "Predefined handle."] pub const $name: $ty = $v;)*
        /// (C type, name, value) of each predefined handle.
        pub const $table: &[(&str, &str, usize)] = &[$((stringify!($ty), stringify!($name), $name)),*];
    };
}

handle_consts!(OPS, MPI_Op:
    MPI_OP_NULL = 0x20, MPI_SUM = 0x21, MPI_MIN = 0x22, MPI_MAX = 0x23, MPI_PROD = 0x24,
    MPI_BAND = 0x28, MPI_BOR = 0x29, MPI_BXOR = 0x2a, MPI_LAND = 0x30, MPI_LOR = 0x31,
    MPI_LXOR = 0x32, MPI_MINLOC = 0x38, MPI_MAXLOC = 0x39, MPI_REPLACE = 0x3c, MPI_NO_OP = 0x3d,
);
handle_consts!(COMMS, MPI_Comm: MPI_COMM_NULL = 0x100, MPI_COMM_WORLD = 0x101, MPI_COMM_SELF = 0x102);
handle_consts!(GROUPS, MPI_Group: MPI_GROUP_NULL = 0x108, MPI_GROUP_EMPTY = 0x109);
handle_consts!(WINS, MPI_Win: MPI_WIN_NULL = 0x110);
handle_consts!(FILES, MPI_File: MPI_FILE_NULL = 0x118);
handle_consts!(SESSIONS, MPI_Session: MPI_SESSION_NULL = 0x120);
handle_consts!(MESSAGES, MPI_Message: MPI_MESSAGE_NULL = 0x128, MPI_MESSAGE_NO_PROC = 0x129);
handle_consts!(INFOS, MPI_Info: MPI_INFO_NULL = 0x130, MPI_INFO_ENV = 0x131);
handle_consts!(ERRHANDLERS, MPI_Errhandler:
    MPI_ERRHANDLER_NULL = 0x140, MPI_ERRORS_ARE_FATAL = 0x141, MPI_ERRORS_ABORT = 0x142,
    MPI_ERRORS_RETURN = 0x143,
);
handle_consts!(REQUESTS, MPI_Request: MPI_REQUEST_NULL = 0x180);

/// The predefined datatypes: (name, handle, size in bytes, extent) on LP64 Linux (x86-64,
/// aarch64). Pair types (`MPI_DOUBLE_INT`, …) have the padding of the C struct they describe.
/// Aliases (`MPI_LONG_LONG_INT`, `MPI_C_COMPLEX`) are in [`DATATYPE_ALIASES`].
pub const DATATYPES: &[(&str, usize, usize, usize)] = &[
    ("MPI_DATATYPE_NULL", 0x200, 0, 0),
    ("MPI_AINT", 0x201, 8, 8),
    ("MPI_COUNT", 0x202, 8, 8),
    ("MPI_OFFSET", 0x203, 8, 8),
    ("MPI_PACKED", 0x207, 1, 1),
    ("MPI_SHORT", 0x208, 2, 2),
    ("MPI_INT", 0x209, 4, 4),
    ("MPI_LONG", 0x20a, 8, 8),
    ("MPI_LONG_LONG", 0x20b, 8, 8),
    ("MPI_UNSIGNED_SHORT", 0x20c, 2, 2),
    ("MPI_UNSIGNED", 0x20d, 4, 4),
    ("MPI_UNSIGNED_LONG", 0x20e, 8, 8),
    ("MPI_UNSIGNED_LONG_LONG", 0x20f, 8, 8),
    ("MPI_FLOAT", 0x210, 4, 4),
    ("MPI_C_FLOAT_COMPLEX", 0x212, 8, 8),
    ("MPI_CXX_FLOAT_COMPLEX", 0x213, 8, 8),
    ("MPI_DOUBLE", 0x214, 8, 8),
    ("MPI_C_DOUBLE_COMPLEX", 0x216, 16, 16),
    ("MPI_CXX_DOUBLE_COMPLEX", 0x217, 16, 16),
    ("MPI_LOGICAL", 0x218, 4, 4),
    ("MPI_INTEGER", 0x219, 4, 4),
    ("MPI_REAL", 0x21a, 4, 4),
    ("MPI_COMPLEX", 0x21b, 8, 8),
    ("MPI_DOUBLE_PRECISION", 0x21c, 8, 8),
    ("MPI_DOUBLE_COMPLEX", 0x21d, 16, 16),
    ("MPI_CHARACTER", 0x21e, 1, 1),
    ("MPI_LONG_DOUBLE", 0x220, 16, 16),
    ("MPI_C_LONG_DOUBLE_COMPLEX", 0x224, 32, 32),
    ("MPI_CXX_LONG_DOUBLE_COMPLEX", 0x225, 32, 32),
    ("MPI_FLOAT_INT", 0x228, 8, 8),
    ("MPI_DOUBLE_INT", 0x229, 12, 16),
    ("MPI_LONG_INT", 0x22a, 12, 16),
    ("MPI_2INT", 0x22b, 8, 8),
    ("MPI_SHORT_INT", 0x22c, 6, 8),
    ("MPI_LONG_DOUBLE_INT", 0x22d, 20, 32),
    ("MPI_2REAL", 0x230, 8, 8),
    ("MPI_2DOUBLE_PRECISION", 0x231, 16, 16),
    ("MPI_2INTEGER", 0x232, 8, 8),
    ("MPI_C_BOOL", 0x238, 1, 1),
    ("MPI_CXX_BOOL", 0x239, 1, 1),
    ("MPI_WCHAR", 0x23c, 4, 4),
    ("MPI_INT8_T", 0x240, 1, 1),
    ("MPI_UINT8_T", 0x241, 1, 1),
    ("MPI_CHAR", 0x243, 1, 1),
    ("MPI_SIGNED_CHAR", 0x244, 1, 1),
    ("MPI_UNSIGNED_CHAR", 0x245, 1, 1),
    ("MPI_BYTE", 0x247, 1, 1),
    ("MPI_INT16_T", 0x248, 2, 2),
    ("MPI_UINT16_T", 0x249, 2, 2),
    ("MPI_INT32_T", 0x250, 4, 4),
    ("MPI_UINT32_T", 0x251, 4, 4),
    ("MPI_INT64_T", 0x258, 8, 8),
    ("MPI_UINT64_T", 0x259, 8, 8),
    ("MPI_LOGICAL1", 0x2c0, 1, 1),
    ("MPI_INTEGER1", 0x2c1, 1, 1),
    ("MPI_LOGICAL2", 0x2c8, 2, 2),
    ("MPI_INTEGER2", 0x2c9, 2, 2),
    ("MPI_REAL2", 0x2ca, 2, 2),
    ("MPI_LOGICAL4", 0x2d0, 4, 4),
    ("MPI_INTEGER4", 0x2d1, 4, 4),
    ("MPI_REAL4", 0x2d2, 4, 4),
    ("MPI_COMPLEX4", 0x2d3, 4, 4),
    ("MPI_LOGICAL8", 0x2d8, 8, 8),
    ("MPI_INTEGER8", 0x2d9, 8, 8),
    ("MPI_REAL8", 0x2da, 8, 8),
    ("MPI_COMPLEX8", 0x2db, 8, 8),
    ("MPI_LOGICAL16", 0x2e0, 16, 16),
    ("MPI_INTEGER16", 0x2e1, 16, 16),
    ("MPI_REAL16", 0x2e2, 16, 16),
    ("MPI_COMPLEX16", 0x2e3, 16, 16),
    ("MPI_COMPLEX32", 0x2eb, 32, 32),
];

/// Each predefined datatype's handle, by name (the values of [`DATATYPES`]).
pub mod datatypes {
    use super::MPI_Datatype;
    /// Predefined datatype.
    pub const MPI_DATATYPE_NULL: MPI_Datatype = 0x200;
    /// Predefined datatype.
    pub const MPI_AINT: MPI_Datatype = 0x201;
    /// Predefined datatype.
    pub const MPI_COUNT: MPI_Datatype = 0x202;
    /// Predefined datatype.
    pub const MPI_OFFSET: MPI_Datatype = 0x203;
    /// Predefined datatype.
    pub const MPI_PACKED: MPI_Datatype = 0x207;
    /// Predefined datatype.
    pub const MPI_SHORT: MPI_Datatype = 0x208;
    /// Predefined datatype.
    pub const MPI_INT: MPI_Datatype = 0x209;
    /// Predefined datatype.
    pub const MPI_LONG: MPI_Datatype = 0x20a;
    /// Predefined datatype.
    pub const MPI_LONG_LONG: MPI_Datatype = 0x20b;
    /// Predefined datatype.
    pub const MPI_UNSIGNED_SHORT: MPI_Datatype = 0x20c;
    /// Predefined datatype.
    pub const MPI_UNSIGNED: MPI_Datatype = 0x20d;
    /// Predefined datatype.
    pub const MPI_UNSIGNED_LONG: MPI_Datatype = 0x20e;
    /// Predefined datatype.
    pub const MPI_UNSIGNED_LONG_LONG: MPI_Datatype = 0x20f;
    /// Predefined datatype.
    pub const MPI_FLOAT: MPI_Datatype = 0x210;
    /// Predefined datatype.
    pub const MPI_C_FLOAT_COMPLEX: MPI_Datatype = 0x212;
    /// Predefined datatype.
    pub const MPI_CXX_FLOAT_COMPLEX: MPI_Datatype = 0x213;
    /// Predefined datatype.
    pub const MPI_DOUBLE: MPI_Datatype = 0x214;
    /// Predefined datatype.
    pub const MPI_C_DOUBLE_COMPLEX: MPI_Datatype = 0x216;
    /// Predefined datatype.
    pub const MPI_CXX_DOUBLE_COMPLEX: MPI_Datatype = 0x217;
    /// Predefined datatype.
    pub const MPI_LOGICAL: MPI_Datatype = 0x218;
    /// Predefined datatype.
    pub const MPI_INTEGER: MPI_Datatype = 0x219;
    /// Predefined datatype.
    pub const MPI_REAL: MPI_Datatype = 0x21a;
    /// Predefined datatype.
    pub const MPI_COMPLEX: MPI_Datatype = 0x21b;
    /// Predefined datatype.
    pub const MPI_DOUBLE_PRECISION: MPI_Datatype = 0x21c;
    /// Predefined datatype.
    pub const MPI_DOUBLE_COMPLEX: MPI_Datatype = 0x21d;
    /// Predefined datatype.
    pub const MPI_CHARACTER: MPI_Datatype = 0x21e;
    /// Predefined datatype.
    pub const MPI_LONG_DOUBLE: MPI_Datatype = 0x220;
    /// Predefined datatype.
    pub const MPI_C_LONG_DOUBLE_COMPLEX: MPI_Datatype = 0x224;
    /// Predefined datatype.
    pub const MPI_CXX_LONG_DOUBLE_COMPLEX: MPI_Datatype = 0x225;
    /// Predefined datatype.
    pub const MPI_FLOAT_INT: MPI_Datatype = 0x228;
    /// Predefined datatype.
    pub const MPI_DOUBLE_INT: MPI_Datatype = 0x229;
    /// Predefined datatype.
    pub const MPI_LONG_INT: MPI_Datatype = 0x22a;
    /// Predefined datatype.
    pub const MPI_2INT: MPI_Datatype = 0x22b;
    /// Predefined datatype.
    pub const MPI_SHORT_INT: MPI_Datatype = 0x22c;
    /// Predefined datatype.
    pub const MPI_LONG_DOUBLE_INT: MPI_Datatype = 0x22d;
    /// Predefined datatype.
    pub const MPI_2REAL: MPI_Datatype = 0x230;
    /// Predefined datatype.
    pub const MPI_2DOUBLE_PRECISION: MPI_Datatype = 0x231;
    /// Predefined datatype.
    pub const MPI_2INTEGER: MPI_Datatype = 0x232;
    /// Predefined datatype.
    pub const MPI_C_BOOL: MPI_Datatype = 0x238;
    /// Predefined datatype.
    pub const MPI_CXX_BOOL: MPI_Datatype = 0x239;
    /// Predefined datatype.
    pub const MPI_WCHAR: MPI_Datatype = 0x23c;
    /// Predefined datatype.
    pub const MPI_INT8_T: MPI_Datatype = 0x240;
    /// Predefined datatype.
    pub const MPI_UINT8_T: MPI_Datatype = 0x241;
    /// Predefined datatype.
    pub const MPI_CHAR: MPI_Datatype = 0x243;
    /// Predefined datatype.
    pub const MPI_SIGNED_CHAR: MPI_Datatype = 0x244;
    /// Predefined datatype.
    pub const MPI_UNSIGNED_CHAR: MPI_Datatype = 0x245;
    /// Predefined datatype.
    pub const MPI_BYTE: MPI_Datatype = 0x247;
    /// Predefined datatype.
    pub const MPI_INT16_T: MPI_Datatype = 0x248;
    /// Predefined datatype.
    pub const MPI_UINT16_T: MPI_Datatype = 0x249;
    /// Predefined datatype.
    pub const MPI_INT32_T: MPI_Datatype = 0x250;
    /// Predefined datatype.
    pub const MPI_UINT32_T: MPI_Datatype = 0x251;
    /// Predefined datatype.
    pub const MPI_INT64_T: MPI_Datatype = 0x258;
    /// Predefined datatype.
    pub const MPI_UINT64_T: MPI_Datatype = 0x259;
    /// Predefined datatype.
    pub const MPI_LOGICAL1: MPI_Datatype = 0x2c0;
    /// Predefined datatype.
    pub const MPI_INTEGER1: MPI_Datatype = 0x2c1;
    /// Predefined datatype.
    pub const MPI_LOGICAL2: MPI_Datatype = 0x2c8;
    /// Predefined datatype.
    pub const MPI_INTEGER2: MPI_Datatype = 0x2c9;
    /// Predefined datatype.
    pub const MPI_REAL2: MPI_Datatype = 0x2ca;
    /// Predefined datatype.
    pub const MPI_LOGICAL4: MPI_Datatype = 0x2d0;
    /// Predefined datatype.
    pub const MPI_INTEGER4: MPI_Datatype = 0x2d1;
    /// Predefined datatype.
    pub const MPI_REAL4: MPI_Datatype = 0x2d2;
    /// Predefined datatype.
    pub const MPI_COMPLEX4: MPI_Datatype = 0x2d3;
    /// Predefined datatype.
    pub const MPI_LOGICAL8: MPI_Datatype = 0x2d8;
    /// Predefined datatype.
    pub const MPI_INTEGER8: MPI_Datatype = 0x2d9;
    /// Predefined datatype.
    pub const MPI_REAL8: MPI_Datatype = 0x2da;
    /// Predefined datatype.
    pub const MPI_COMPLEX8: MPI_Datatype = 0x2db;
    /// Predefined datatype.
    pub const MPI_LOGICAL16: MPI_Datatype = 0x2e0;
    /// Predefined datatype.
    pub const MPI_INTEGER16: MPI_Datatype = 0x2e1;
    /// Predefined datatype.
    pub const MPI_REAL16: MPI_Datatype = 0x2e2;
    /// Predefined datatype.
    pub const MPI_COMPLEX16: MPI_Datatype = 0x2e3;
    /// Predefined datatype.
    pub const MPI_COMPLEX32: MPI_Datatype = 0x2eb;
    /// Alias of `MPI_LONG_LONG`.
    pub const MPI_LONG_LONG_INT: MPI_Datatype = MPI_LONG_LONG;
    /// Alias of `MPI_C_FLOAT_COMPLEX`.
    pub const MPI_C_COMPLEX: MPI_Datatype = MPI_C_FLOAT_COMPLEX;
}
pub use datatypes::*;

/// Alternative names of predefined datatypes: (alias, the name it stands for).
pub const DATATYPE_ALIASES: &[(&str, &str)] = &[
    ("MPI_LONG_LONG_INT", "MPI_LONG_LONG"),
    ("MPI_C_COMPLEX", "MPI_C_FLOAT_COMPLEX"),
];

/// The C type each predefined datatype describes, where C has one: the header test checks
/// `sizeof` of these against [`DATATYPES`].
pub const DATATYPE_C_TYPES: &[(&str, &str)] = &[
    ("MPI_AINT", "MPI_Aint"),
    ("MPI_COUNT", "MPI_Count"),
    ("MPI_OFFSET", "MPI_Offset"),
    ("MPI_SHORT", "short"),
    ("MPI_INT", "int"),
    ("MPI_LONG", "long"),
    ("MPI_LONG_LONG", "long long"),
    ("MPI_UNSIGNED_SHORT", "unsigned short"),
    ("MPI_UNSIGNED", "unsigned"),
    ("MPI_UNSIGNED_LONG", "unsigned long"),
    ("MPI_UNSIGNED_LONG_LONG", "unsigned long long"),
    ("MPI_FLOAT", "float"),
    ("MPI_C_FLOAT_COMPLEX", "float _Complex"),
    ("MPI_DOUBLE", "double"),
    ("MPI_C_DOUBLE_COMPLEX", "double _Complex"),
    ("MPI_LONG_DOUBLE", "long double"),
    ("MPI_C_LONG_DOUBLE_COMPLEX", "long double _Complex"),
    ("MPI_FLOAT_INT", "struct { float a; int b; }"),
    ("MPI_DOUBLE_INT", "struct { double a; int b; }"),
    ("MPI_LONG_INT", "struct { long a; int b; }"),
    ("MPI_2INT", "struct { int a; int b; }"),
    ("MPI_SHORT_INT", "struct { short a; int b; }"),
    ("MPI_LONG_DOUBLE_INT", "struct { long double a; int b; }"),
    ("MPI_C_BOOL", "_Bool"),
    ("MPI_WCHAR", "wchar_t"),
    ("MPI_INT8_T", "int8_t"),
    ("MPI_UINT8_T", "uint8_t"),
    ("MPI_CHAR", "char"),
    ("MPI_SIGNED_CHAR", "signed char"),
    ("MPI_UNSIGNED_CHAR", "unsigned char"),
    ("MPI_INT16_T", "int16_t"),
    ("MPI_UINT16_T", "uint16_t"),
    ("MPI_INT32_T", "int32_t"),
    ("MPI_UINT32_T", "uint32_t"),
    ("MPI_INT64_T", "int64_t"),
    ("MPI_UINT64_T", "uint64_t"),
];

int_consts!(VERSIONS:
    MPI_VERSION = 5, MPI_SUBVERSION = 0, MPI_ABI_VERSION = 1, MPI_ABI_SUBVERSION = 0,
    MPI_F_STATUS_SIZE = 8, MPI_F_SOURCE = 0, MPI_F_TAG = 1, MPI_F_ERROR = 2,
);

int_consts!(ERROR_CLASSES:
    MPI_SUCCESS = 0, MPI_ERR_BUFFER = 1, MPI_ERR_COUNT = 2, MPI_ERR_TYPE = 3, MPI_ERR_TAG = 4,
    MPI_ERR_COMM = 5, MPI_ERR_RANK = 6, MPI_ERR_REQUEST = 7, MPI_ERR_ROOT = 8, MPI_ERR_GROUP = 9,
    MPI_ERR_OP = 10, MPI_ERR_TOPOLOGY = 11, MPI_ERR_DIMS = 12, MPI_ERR_ARG = 13,
    MPI_ERR_UNKNOWN = 14, MPI_ERR_TRUNCATE = 15, MPI_ERR_OTHER = 16, MPI_ERR_INTERN = 17,
    MPI_ERR_PENDING = 18, MPI_ERR_IN_STATUS = 19, MPI_ERR_ACCESS = 20, MPI_ERR_AMODE = 21,
    MPI_ERR_ASSERT = 22, MPI_ERR_BAD_FILE = 23, MPI_ERR_BASE = 24, MPI_ERR_CONVERSION = 25,
    MPI_ERR_DISP = 26, MPI_ERR_DUP_DATAREP = 27, MPI_ERR_FILE_EXISTS = 28,
    MPI_ERR_FILE_IN_USE = 29, MPI_ERR_FILE = 30, MPI_ERR_INFO_KEY = 31, MPI_ERR_INFO_NOKEY = 32,
    MPI_ERR_INFO_VALUE = 33, MPI_ERR_INFO = 34, MPI_ERR_IO = 35, MPI_ERR_KEYVAL = 36,
    MPI_ERR_LOCKTYPE = 37, MPI_ERR_NAME = 38, MPI_ERR_NO_MEM = 39, MPI_ERR_NOT_SAME = 40,
    MPI_ERR_NO_SPACE = 41, MPI_ERR_NO_SUCH_FILE = 42, MPI_ERR_PORT = 43, MPI_ERR_QUOTA = 44,
    MPI_ERR_READ_ONLY = 45, MPI_ERR_RMA_ATTACH = 46, MPI_ERR_RMA_CONFLICT = 47,
    MPI_ERR_RMA_RANGE = 48, MPI_ERR_RMA_SHARED = 49, MPI_ERR_RMA_SYNC = 50,
    MPI_ERR_SERVICE = 51, MPI_ERR_SIZE = 52, MPI_ERR_SPAWN = 53,
    MPI_ERR_UNSUPPORTED_DATAREP = 54, MPI_ERR_UNSUPPORTED_OPERATION = 55, MPI_ERR_WIN = 56,
    MPI_ERR_RMA_FLAVOR = 57, MPI_ERR_PROC_ABORTED = 58, MPI_ERR_VALUE_TOO_LARGE = 59,
    MPI_ERR_SESSION = 60, MPI_ERR_ERRHANDLER = 61, MPI_ERR_ABI = 62,
    MPI_T_ERR_CANNOT_INIT = 1001, MPI_T_ERR_NOT_ACCESSIBLE = 1002,
    MPI_T_ERR_NOT_INITIALIZED = 1003, MPI_T_ERR_NOT_SUPPORTED = 1004, MPI_T_ERR_MEMORY = 1005,
    MPI_T_ERR_INVALID = 1006, MPI_T_ERR_INVALID_INDEX = 1007, MPI_T_ERR_INVALID_ITEM = 1008,
    MPI_T_ERR_INVALID_SESSION = 1009, MPI_T_ERR_INVALID_HANDLE = 1010,
    MPI_T_ERR_INVALID_NAME = 1011, MPI_T_ERR_OUT_OF_HANDLES = 1012,
    MPI_T_ERR_OUT_OF_SESSIONS = 1013, MPI_T_ERR_CVAR_SET_NOT_NOW = 1014,
    MPI_T_ERR_CVAR_SET_NEVER = 1015, MPI_T_ERR_PVAR_NO_WRITE = 1016,
    MPI_T_ERR_PVAR_NO_STARTSTOP = 1017, MPI_T_ERR_PVAR_NO_ATOMIC = 1018,
    MPI_ERR_LASTCODE = 0x3fff,
);

int_consts!(LIMITS:
    MPI_MAX_DATAREP_STRING = 128, MPI_MAX_ERROR_STRING = 512, MPI_MAX_INFO_KEY = 256,
    MPI_MAX_INFO_VAL = 1024, MPI_MAX_LIBRARY_VERSION_STRING = 8192, MPI_MAX_OBJECT_NAME = 128,
    MPI_MAX_PORT_NAME = 1024, MPI_MAX_PROCESSOR_NAME = 256, MPI_MAX_STRINGTAG_LEN = 1024,
    MPI_MAX_PSET_NAME_LEN = 1024, MPI_BSEND_OVERHEAD = 512,
);

int_consts!(MODES:
    MPI_MODE_APPEND = 1, MPI_MODE_CREATE = 2, MPI_MODE_DELETE_ON_CLOSE = 4, MPI_MODE_EXCL = 8,
    MPI_MODE_RDONLY = 16, MPI_MODE_RDWR = 32, MPI_MODE_SEQUENTIAL = 64,
    MPI_MODE_UNIQUE_OPEN = 128, MPI_MODE_WRONLY = 256, MPI_MODE_NOCHECK = 1024,
    MPI_MODE_NOPRECEDE = 2048, MPI_MODE_NOPUT = 4096, MPI_MODE_NOSTORE = 8192,
    MPI_MODE_NOSUCCEED = 16384,
);

int_consts!(SENTINELS:
    MPI_ANY_SOURCE = -1, MPI_ANY_TAG = -2, MPI_PROC_NULL = -3, MPI_ROOT = -4,
    MPI_UNDEFINED = -32766,
    MPI_THREAD_SINGLE = 0, MPI_THREAD_FUNNELED = 1024, MPI_THREAD_SERIALIZED = 2048,
    MPI_THREAD_MULTIPLE = 4096,
    MPI_ORDER_C = 0xC, MPI_ORDER_FORTRAN = 0xF,
    MPI_DISTRIBUTE_NONE = 16, MPI_DISTRIBUTE_BLOCK = 17, MPI_DISTRIBUTE_CYCLIC = 18,
    MPI_DISTRIBUTE_DFLT_DARG = 19,
    MPI_COMBINER_NAMED = 101, MPI_COMBINER_DUP = 102, MPI_COMBINER_CONTIGUOUS = 103,
    MPI_COMBINER_VECTOR = 104, MPI_COMBINER_HVECTOR = 105, MPI_COMBINER_INDEXED = 106,
    MPI_COMBINER_HINDEXED = 107, MPI_COMBINER_INDEXED_BLOCK = 108,
    MPI_COMBINER_HINDEXED_BLOCK = 109, MPI_COMBINER_STRUCT = 110, MPI_COMBINER_SUBARRAY = 111,
    MPI_COMBINER_DARRAY = 112, MPI_COMBINER_F90_REAL = 113, MPI_COMBINER_F90_COMPLEX = 114,
    MPI_COMBINER_F90_INTEGER = 115, MPI_COMBINER_RESIZED = 116,
    MPI_COMBINER_VALUE_INDEX = 117,
    MPI_TYPECLASS_INTEGER = 192, MPI_TYPECLASS_REAL = 193, MPI_TYPECLASS_COMPLEX = 194,
    MPI_IDENT = 201, MPI_CONGRUENT = 202, MPI_SIMILAR = 203, MPI_UNEQUAL = 204,
    MPI_CART = 211, MPI_GRAPH = 212, MPI_DIST_GRAPH = 213,
    MPI_COMM_TYPE_SHARED = 221, MPI_COMM_TYPE_HW_UNGUIDED = 222,
    MPI_COMM_TYPE_HW_GUIDED = 223, MPI_COMM_TYPE_RESOURCE_GUIDED = 224,
    MPI_LOCK_EXCLUSIVE = 301, MPI_LOCK_SHARED = 302,
    MPI_WIN_FLAVOR_CREATE = 311, MPI_WIN_FLAVOR_ALLOCATE = 312, MPI_WIN_FLAVOR_DYNAMIC = 313,
    MPI_WIN_FLAVOR_SHARED = 314, MPI_WIN_UNIFIED = 321, MPI_WIN_SEPARATE = 322,
    MPI_SEEK_CUR = 401, MPI_SEEK_END = 402, MPI_SEEK_SET = 403,
);

int_consts!(KEYS:
    MPI_KEYVAL_INVALID = 0, MPI_TAG_UB = 501, MPI_IO = 502, MPI_HOST = 503,
    MPI_WTIME_IS_GLOBAL = 504, MPI_APPNUM = 505, MPI_LASTUSEDCODE = 506,
    MPI_UNIVERSE_SIZE = 507, MPI_WIN_BASE = 601, MPI_WIN_DISP_UNIT = 602, MPI_WIN_SIZE = 603,
    MPI_WIN_CREATE_FLAVOR = 604, MPI_WIN_MODEL = 605,
);

/// Every integer-constant table, for the header and its test.
pub const INT_TABLES: &[&[(&str, c_int)]] =
    &[VERSIONS, ERROR_CLASSES, LIMITS, MODES, SENTINELS, KEYS];

/// Every predefined-handle table except datatypes.
pub const HANDLE_TABLES: &[&[(&str, &str, usize)]] = &[
    OPS,
    COMMS,
    GROUPS,
    WINS,
    FILES,
    SESSIONS,
    MESSAGES,
    INFOS,
    ERRHANDLERS,
    REQUESTS,
];

/// Pointer-valued constants: (C type, name, value).
pub const POINTERS: &[(&str, &str, usize)] = &[
    ("void*", "MPI_BOTTOM", 0),
    ("void*", "MPI_IN_PLACE", 1),
    ("void*", "MPI_BUFFER_AUTOMATIC", 2),
    ("char**", "MPI_ARGV_NULL", 0),
    ("char***", "MPI_ARGVS_NULL", 0),
    ("int*", "MPI_ERRCODES_IGNORE", 0),
    ("MPI_Status*", "MPI_STATUS_IGNORE", 0),
    ("MPI_Status*", "MPI_STATUSES_IGNORE", 0),
    ("int*", "MPI_UNWEIGHTED", 10),
    ("int*", "MPI_WEIGHTS_EMPTY", 11),
    ("MPI_Copy_function*", "MPI_NULL_COPY_FN", 0),
    ("MPI_Copy_function*", "MPI_DUP_FN", 1),
    ("MPI_Delete_function*", "MPI_NULL_DELETE_FN", 0),
    ("MPI_Comm_copy_attr_function*", "MPI_COMM_NULL_COPY_FN", 0),
    ("MPI_Comm_copy_attr_function*", "MPI_COMM_DUP_FN", 1),
    (
        "MPI_Comm_delete_attr_function*",
        "MPI_COMM_NULL_DELETE_FN",
        0,
    ),
    ("MPI_Type_copy_attr_function*", "MPI_TYPE_NULL_COPY_FN", 0),
    ("MPI_Type_copy_attr_function*", "MPI_TYPE_DUP_FN", 1),
    (
        "MPI_Type_delete_attr_function*",
        "MPI_TYPE_NULL_DELETE_FN",
        0,
    ),
    ("MPI_Win_copy_attr_function*", "MPI_WIN_NULL_COPY_FN", 0),
    ("MPI_Win_copy_attr_function*", "MPI_WIN_DUP_FN", 1),
    ("MPI_Win_delete_attr_function*", "MPI_WIN_NULL_DELETE_FN", 0),
];

/// `MPI_IN_PLACE` as the address a C caller passes.
pub const IN_PLACE: usize = 1;

/// The callback types, as C declares them (written from the standard's C binding); rcomm's
/// header prints them and prototypes name them.
pub const C_TYPEDEFS: &[&str] = &[
    "typedef void (MPI_User_function)(void *invec, void *inoutvec, int *len, MPI_Datatype *datatype);",
    "typedef void (MPI_User_function_c)(void *invec, void *inoutvec, MPI_Count *len, MPI_Datatype *datatype);",
    "typedef int (MPI_Grequest_query_function)(void *extra_state, MPI_Status *status);",
    "typedef int (MPI_Grequest_free_function)(void *extra_state);",
    "typedef int (MPI_Grequest_cancel_function)(void *extra_state, int complete);",
    "typedef int (MPI_Copy_function)(MPI_Comm comm, int keyval, void *extra_state, void *attribute_val_in, void *attribute_val_out, int *flag);",
    "typedef int (MPI_Delete_function)(MPI_Comm comm, int keyval, void *attribute_val, void *extra_state);",
    "typedef int (MPI_Comm_copy_attr_function)(MPI_Comm comm, int keyval, void *extra_state, void *attribute_val_in, void *attribute_val_out, int *flag);",
    "typedef int (MPI_Comm_delete_attr_function)(MPI_Comm comm, int keyval, void *attribute_val, void *extra_state);",
    "typedef int (MPI_Type_copy_attr_function)(MPI_Datatype datatype, int keyval, void *extra_state, void *attribute_val_in, void *attribute_val_out, int *flag);",
    "typedef int (MPI_Type_delete_attr_function)(MPI_Datatype datatype, int keyval, void *attribute_val, void *extra_state);",
    "typedef int (MPI_Win_copy_attr_function)(MPI_Win win, int keyval, void *extra_state, void *attribute_val_in, void *attribute_val_out, int *flag);",
    "typedef int (MPI_Win_delete_attr_function)(MPI_Win win, int keyval, void *attribute_val, void *extra_state);",
    "typedef int (MPI_Datarep_extent_function)(MPI_Datatype datatype, MPI_Aint *extent, void *extra_state);",
    "typedef int (MPI_Datarep_conversion_function)(void *userbuf, MPI_Datatype datatype, int count, void *filebuf, MPI_Offset position, void *extra_state);",
    "typedef int (MPI_Datarep_conversion_function_c)(void *userbuf, MPI_Datatype datatype, MPI_Count count, void *filebuf, MPI_Offset position, void *extra_state);",
    "typedef void (MPI_Comm_errhandler_function)(MPI_Comm *comm, int *error_code, ...);",
    "typedef void (MPI_File_errhandler_function)(MPI_File *file, int *error_code, ...);",
    "typedef void (MPI_Win_errhandler_function)(MPI_Win *win, int *error_code, ...);",
    "typedef void (MPI_Session_errhandler_function)(MPI_Session *session, int *error_code, ...);",
    "typedef MPI_Comm_errhandler_function MPI_Comm_errhandler_fn;",
    "typedef MPI_File_errhandler_function MPI_File_errhandler_fn;",
    "typedef MPI_Win_errhandler_function MPI_Win_errhandler_fn;",
    "typedef MPI_Session_errhandler_function MPI_Session_errhandler_fn;",
];

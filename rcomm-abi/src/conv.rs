//! Handle conversions, `MPI_*_toint` / `MPI_*_fromint` (the ABI's replacement for the
//! Fortran `c2f` / `f2c` family). Every handle rcomm makes fits in 31 bits (`handles`), and
//! predefined handles are small, so the int is the handle's value; a value that is no handle
//! is refused when used, as any other invalid handle.

use crate::consts::*;

fn to_int(h: usize) -> c_int {
    // Above 31 bits is no handle of rcomm's: an int no handle has.
    c_int::try_from(h).unwrap_or(-1)
}

fn from_int(i: c_int) -> usize {
    usize::try_from(i).unwrap_or(usize::MAX)
}

/// `MPI_Comm_toint`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_toint(h: MPI_Comm) -> c_int {
    to_int(h)
}

/// `MPI_Comm_fromint`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Comm_fromint(i: c_int) -> MPI_Comm {
    from_int(i)
}
/// `MPI_Errhandler_toint`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Errhandler_toint(h: MPI_Errhandler) -> c_int {
    to_int(h)
}

/// `MPI_Errhandler_fromint`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Errhandler_fromint(i: c_int) -> MPI_Errhandler {
    from_int(i)
}
/// `MPI_File_toint`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_File_toint(h: MPI_File) -> c_int {
    to_int(h)
}

/// `MPI_File_fromint`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_File_fromint(i: c_int) -> MPI_File {
    from_int(i)
}
/// `MPI_Group_toint`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Group_toint(h: MPI_Group) -> c_int {
    to_int(h)
}

/// `MPI_Group_fromint`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Group_fromint(i: c_int) -> MPI_Group {
    from_int(i)
}
/// `MPI_Info_toint`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Info_toint(h: MPI_Info) -> c_int {
    to_int(h)
}

/// `MPI_Info_fromint`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Info_fromint(i: c_int) -> MPI_Info {
    from_int(i)
}
/// `MPI_Message_toint`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Message_toint(h: MPI_Message) -> c_int {
    to_int(h)
}

/// `MPI_Message_fromint`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Message_fromint(i: c_int) -> MPI_Message {
    from_int(i)
}
/// `MPI_Op_toint`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Op_toint(h: MPI_Op) -> c_int {
    to_int(h)
}

/// `MPI_Op_fromint`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Op_fromint(i: c_int) -> MPI_Op {
    from_int(i)
}
/// `MPI_Request_toint`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Request_toint(h: MPI_Request) -> c_int {
    to_int(h)
}

/// `MPI_Request_fromint`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Request_fromint(i: c_int) -> MPI_Request {
    from_int(i)
}
/// `MPI_Session_toint`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Session_toint(h: MPI_Session) -> c_int {
    to_int(h)
}

/// `MPI_Session_fromint`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Session_fromint(i: c_int) -> MPI_Session {
    from_int(i)
}
/// `MPI_Type_toint`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_toint(h: MPI_Datatype) -> c_int {
    to_int(h)
}

/// `MPI_Type_fromint`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Type_fromint(i: c_int) -> MPI_Datatype {
    from_int(i)
}
/// `MPI_Win_toint`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Win_toint(h: MPI_Win) -> c_int {
    to_int(h)
}

/// `MPI_Win_fromint`.
#[unsafe(no_mangle)]
pub extern "C" fn PMPI_Win_fromint(i: c_int) -> MPI_Win {
    from_int(i)
}

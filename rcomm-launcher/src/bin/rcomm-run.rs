//! `rcomm-run`: see the `rcomm_launcher` crate.

fn main() -> std::process::ExitCode {
    // Exit statuses are 8 bits; main_entry keeps its codes in range.
    std::process::ExitCode::from(rcomm_launcher::main_entry().clamp(0, 255) as u8)
}

//! Writes one of the fake sysfs trees of `rcomm_runtime::topo::fixture` into a directory,
//! for `tests/fixtures/topo/make-xml.sh` (hwloc reads it there):
//! `cargo run -p rcomm-runtime --example topo_fixture -- dgx /tmp/dgx`.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [name, dir] = args.as_slice() else {
        eprintln!(
            "usage: topo_fixture <{}> <empty directory>",
            rcomm_runtime::topo::fixture::NAMES.join("|")
        );
        std::process::exit(2);
    };
    if let Err(e) = rcomm_runtime::topo::fixture::write(name, std::path::Path::new(dir)) {
        eprintln!("topo_fixture: {name} into {dir}: {e}");
        std::process::exit(1);
    }
}

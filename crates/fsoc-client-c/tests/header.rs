//! include/fsoc_client.h is what cbindgen generates from src/lib.rs today: a stale header
//! fails here. `FSOC_BLESS=1 cargo test -p fsoc-client-c --test header` rewrites it.

use std::path::Path;

#[test]
fn the_committed_header_is_what_cbindgen_generates() {
    let crate_directory = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_directory.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_crate(crate_directory)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let committed_path = crate_directory.join("include/fsoc_client.h");
    if std::env::var_os("FSOC_BLESS").is_some() {
        std::fs::write(&committed_path, &generated).expect("write the header");
    }
    let committed = std::fs::read(&committed_path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/fsoc_client.h is stale: run `FSOC_BLESS=1 cargo test -p fsoc-client-c --test header` and commit it"
    );
}

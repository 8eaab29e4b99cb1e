//! The C example (example/fsoc_client_example.c) built with gcc `-Wall -Wextra -Werror`
//! against the committed header and the static library, and run against an in-process
//! `fsoc serve`; what it left on the volume is then checked through the Rust client, and the
//! volume must pass fsck.

#[path = "../../fsoc-client/tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

/// libfsoc_client_c.a as cargo built it for this test: in target/<profile>/deps beside the
/// test's own executable (a `cargo build` of the crate also copies it up to target/<profile>).
fn static_library() -> PathBuf {
    let executable = std::env::current_exe().expect("the test's path");
    let deps = executable.parent().expect("target/<profile>/deps");
    let candidates = [deps.join("libfsoc_client_c.a"), deps.parent().unwrap_or(deps).join("libfsoc_client_c.a")];
    let found = candidates.iter().find(|path| path.exists());
    found
        .unwrap_or_else(|| panic!("libfsoc_client_c.a is in none of {candidates:?}: cargo builds it with this crate"))
        .clone()
}

#[test]
fn the_c_example_builds_without_warnings_and_runs_against_a_server() {
    let crate_directory = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scratch = tempfile::tempdir().expect("tempdir");
    let program = scratch.path().join("fsoc_client_example");
    let compiled = Command::new("gcc")
        .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(crate_directory.join("include"))
        .arg(crate_directory.join("example/fsoc_client_example.c"))
        .arg(static_library())
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&program)
        .output()
        .expect("run gcc (scripts/setup.sh installs it)");
    assert!(compiled.status.success(), "gcc:\n{}", String::from_utf8_lossy(&compiled.stderr));

    let server = support::TestServer::start();
    let run = Command::new(&program).arg(&server.address).output().expect("run the example");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "the example failed:\n{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.ends_with("ok\n"), "{stdout}");

    let client = server.connect();
    let contents = client.read("c-example/renamed.txt").expect("the file the example left");
    assert_eq!(contents, b"Hello from C, through 9P2000.L\n");
    let mut names: Vec<_> =
        client.read_dir("c-example").expect("list").map(|entry| entry.expect("entry").file_name()).collect();
    names.sort();
    assert_eq!(names, ["renamed.txt"]);
    drop(client);
    server.stop();
}

//! Regression tests for what the Linux kernel's 9P2000.L client (v9fs, kernel 6.1) sends, found
//! by scripts/test-v9fs.sh with `fsoc serve --trace`: each test replays, through the
//! codec-built test client (support/mod.rs), the messages the kernel sent where the server
//! answered wrongly, and checks the answer Linux needs.

mod support;

use fsoc_9p::constants::open_flags;
use fsoc_9p::{LockQuery, LockRequest, LockStatus, LockType};
use fsoc_serve::ServeConfig;
use support::TestServer;

const ROOT: u32 = 1;

fn server() -> TestServer {
    TestServer::start(ServeConfig { commit_interval: None, ..ServeConfig::default() })
}

/// fcntl(F_GETLK) on a v9fs mount: the kernel tests its own processes' locks and, finding no
/// conflict, sends Tgetlock with type UNLCK (the type posix_test_lock left in the request).
/// The server answered EINVAL, which fcntl returned; the answer must be "free": UNLCK.
#[test]
fn getlock_with_type_unlock_as_linux_sends_it_is_answered_free() {
    let server = server();
    let mut client = server.connect();
    client.attach(ROOT, b"root", b"").expect("attach");
    client.walk(ROOT, 2, &[]).expect("clone");
    client.lcreate(2, b"locked", open_flags::READ_WRITE | open_flags::CREATE, 0o644).expect("lcreate");
    // As traced: Tlock type 1 start 0 length 100, Tlock type 2 (unlock), then Tgetlock type 2.
    let lock =
        LockRequest { lock_type: LockType::WRITE, flags: 0, start: 0, length: 100, proc_id: 331, client_id: b"" };
    assert_eq!(client.lock(2, lock), Ok(LockStatus::SUCCESS));
    assert_eq!(client.lock(2, LockRequest { lock_type: LockType::UNLOCK, ..lock }), Ok(LockStatus::SUCCESS));
    let query = LockQuery { lock_type: LockType::UNLOCK, start: 0, length: 0, proc_id: 331, client_id: b"" };
    assert_eq!(client.getlock(2, query), Ok((LockType::UNLOCK.0, 0, 0, 331, Vec::new())), "free");
    client.clunk(2).expect("clunk");
}

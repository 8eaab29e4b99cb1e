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

/// `ls -l` of a directory of 5,000 files on a cache=loose mount: the kernel keeps the fid of
/// every dentry it caches, so one connection holds a fid per file looked up. With 4,096 fids
/// per connection the 4,097th lookup got EMFILE ("Too many open files" from touch and ls);
/// the default admits 65,536.
#[test]
fn a_connection_holds_a_fid_per_cached_dentry_of_a_large_directory() {
    let server = server();
    let mut client = server.connect();
    client.attach(ROOT, b"root", b"").expect("attach");
    client.mkdir(ROOT, b"many", 0o755).expect("mkdir");
    client.walk(ROOT, 2, &[b"many"]).expect("walk to the directory");
    let file_count = 5_000u32;
    for index in 0..file_count {
        let name = format!("file-{index}");
        // As the kernel creates: clone the directory fid, Tlcreate on the clone (which then
        // names the open file), then walk a fid to the new name for its dentry; the create
        // fid is clunked at close, the dentry's fid is kept.
        client.walk(2, 3, &[]).expect("clone");
        client.lcreate(3, name.as_bytes(), open_flags::READ_WRITE | open_flags::CREATE, 0o644).expect("lcreate");
        client.clunk(3).expect("clunk the create fid");
        let dentry_fid = 100 + index;
        client.walk(2, dentry_fid, &[name.as_bytes()]).unwrap_or_else(|errno| panic!("walk {index}: {errno:?}"));
        client.getattr(dentry_fid).expect("getattr");
    }
    assert!(client.walk(2, 100 + file_count, &[]).is_ok(), "still room after {file_count} cached dentries");
}

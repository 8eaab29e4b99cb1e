//! Reads never wait in a chip's queue: a page written back is read from its chip file by the
//! reading thread, and a page still queued (or buffered by the worker) from the bytes it was
//! programmed with. Checked with the chip's worker held, which would block any read that went
//! through its queue.

use std::sync::mpsc;
use std::time::Duration;

use fsoc_array::ThreadedFlash;
use fsoc_media::{BlockAddress, Flash, PageAddress, Profile, SimConfig};

fn pattern(tag: u8, length: usize) -> Vec<u8> {
    (0..length).map(|index| (index as u8).wrapping_mul(13) ^ tag).collect()
}

/// Reads `page` on another thread and returns its data, or panics if that takes 10 s (a read
/// stuck behind the held worker).
fn read_promptly(flash: &ThreadedFlash, page: PageAddress) -> Vec<u8> {
    let geometry = flash.geometry();
    std::thread::scope(|scope| {
        let (done, finished) = mpsc::channel();
        scope.spawn(move || {
            let mut data = vec![0u8; geometry.page_data_bytes as usize];
            let mut spare = vec![0u8; geometry.spare_bytes as usize];
            let result = flash.read_page(0, page, &mut data, &mut spare).map(|_| data);
            let _ = done.send(result);
        });
        finished
            .recv_timeout(Duration::from_secs(10))
            .expect("a read waited behind the held chip's queue")
            .expect("read")
    })
}

#[test]
fn reads_bypass_a_held_chips_queue_and_see_the_latest_program() {
    let directory = tempfile::tempdir().expect("tempdir");
    let base = directory.path().join("array");
    let mut flash = ThreadedFlash::create(&base, SimConfig::new(Profile::Slc, 2, 16, 5)).expect("create");
    let geometry = flash.geometry();
    let (data_bytes, spare_bytes) = (geometry.page_data_bytes as usize, geometry.spare_bytes as usize);
    let spare = vec![0u8; spare_bytes];
    // Block 1: block 0 of a fresh chip may be factory-bad.
    let block = BlockAddress::new(0, 1);
    assert!(!flash.is_bad_block(block).expect("bad-block mark"));
    let written_back = PageAddress::new(0, 1, 0);
    let queued = PageAddress::new(0, 1, 1);
    flash.program_page(0, written_back, &pattern(1, data_bytes), &spare).expect("program");
    flash.flush().expect("flush: the first page is in its chip file");

    let control = flash.chip_control();
    control.hold(0);
    assert_eq!(read_promptly(&flash, written_back), pattern(1, data_bytes), "from the chip file");
    flash.program_page(0, queued, &pattern(2, data_bytes), &spare).expect("program, queued on the held chip");
    flash.write_barrier().expect("a barrier queues fences and does not wait");
    assert_eq!(read_promptly(&flash, queued), pattern(2, data_bytes), "from the in-flight bytes");
    assert_eq!(read_promptly(&flash, written_back), pattern(1, data_bytes));
    control.release(0);
    flash.close().expect("close");

    let flash = ThreadedFlash::open(&base).expect("reopen");
    assert_eq!(read_promptly(&flash, written_back), pattern(1, data_bytes));
    assert_eq!(read_promptly(&flash, queued), pattern(2, data_bytes), "the queued program reached the file");
}

/// After a chip erases and reprograms a page, reads see the new contents, never the old ones
/// still in the file's slot, across barriers, flushes and the fences the store adds itself
/// (2,560 programs of 2 KiB pages: more than the 4 MiB it lets pass between fences).
#[test]
fn a_reprogrammed_page_reads_new_contents_through_erase_and_write_back() {
    let directory = tempfile::tempdir().expect("tempdir");
    let base = directory.path().join("array");
    let mut flash = ThreadedFlash::create(&base, SimConfig::new(Profile::Slc, 2, 16, 6)).expect("create");
    let geometry = flash.geometry();
    let (data_bytes, spare_bytes) = (geometry.page_data_bytes as usize, geometry.spare_bytes as usize);
    let spare = vec![0u8; spare_bytes];
    let block = BlockAddress::new(1, 2);
    assert!(!flash.is_bad_block(block).expect("bad-block mark"));
    for round in 0..40u8 {
        flash.erase_block(0, block).expect("erase");
        for page_index in 0..geometry.pages_per_block {
            let page = PageAddress::new(1, 2, page_index);
            flash.program_page(0, page, &pattern(round ^ page_index as u8, data_bytes), &spare).expect("program");
        }
        if round % 3 == 0 {
            flash.write_barrier().expect("barrier");
        }
        if round % 7 == 0 {
            flash.flush().expect("flush");
        }
        for page_index in 0..geometry.pages_per_block {
            let page = PageAddress::new(1, 2, page_index);
            assert_eq!(read_promptly(&flash, page), pattern(round ^ page_index as u8, data_bytes), "round {round}");
        }
    }
    flash.close().expect("close");
}

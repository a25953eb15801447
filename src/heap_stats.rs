//! Measurement only (feature `heap-stats`, issue 27): every 5 s the daemon prints one line to
//! stderr with what jemalloc holds: `allocated` (live heap bytes), `active` (pages holding live
//! allocations), `resident` (what the allocator keeps in RAM, its metadata included),
//! `retained` (unmapped but reserved) and `metadata`. Set beside the process's RSS, it tells
//! live data from fragmentation and freed-but-kept pages. Read through `mallctl`; `epoch` is
//! advanced first so the figures are current.

use std::ffi::CStr;
use std::time::Duration;

fn read_size(name: &CStr) -> usize {
    let mut value: usize = 0;
    let mut len = std::mem::size_of::<usize>();
    // SAFETY: `name` is a NUL-terminated mallctl name whose value is a size_t; `value` and
    // `len` describe a writable size_t.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr(),
            (&mut value as *mut usize).cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    if rc == 0 { value } else { 0 }
}

fn advance_epoch() {
    let mut epoch: u64 = 1;
    let mut len = std::mem::size_of::<u64>();
    // SAFETY: `epoch` is a uint64_t both read and written, as mallctl's "epoch" takes.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            c"epoch".as_ptr(),
            (&mut epoch as *mut u64).cast(),
            &mut len,
            (&mut epoch as *mut u64).cast(),
            len,
        );
    }
}

/// Starts the printing thread.
pub fn start() {
    std::thread::spawn(|| {
        loop {
            advance_epoch();
            let mb = |n: &CStr| read_size(n) as f64 / 1_048_576.0;
            eprintln!(
                "heap-stats allocated={:.1}MB active={:.1}MB resident={:.1}MB mapped={:.1}MB retained={:.1}MB metadata={:.1}MB",
                mb(c"stats.allocated"),
                mb(c"stats.active"),
                mb(c"stats.resident"),
                mb(c"stats.mapped"),
                mb(c"stats.retained"),
                mb(c"stats.metadata"),
            );
            std::thread::sleep(Duration::from_secs(5));
        }
    });
}

//! glibc's allocator, told to give memory back to the system.
//!
//! By default glibc raises its mmap threshold each time a large block is freed, so once a
//! 2 MB request body has come and gone, later ones are carved from the heap arenas
//! instead of mapped on their own; and memory freed inside an arena stays resident until
//! something trims it. Under a burst that left `conform serve` holding hundreds of
//! megabytes of freed memory for good (BENCHMARKS.md, "conform serve under load").
//! So the serve command fixes the threshold at 128 KiB (larger blocks are mapped, and
//! unmapped when freed) and trims the arenas once a second.
//!
//! Only on glibc; elsewhere both are no-ops.

use std::time::Duration;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod glibc {
    use std::ffi::c_int;

    unsafe extern "C" {
        fn mallopt(param: c_int, value: c_int) -> c_int;
        fn malloc_trim(pad: usize) -> c_int;
    }

    /// `M_MMAP_THRESHOLD` in glibc's `malloc.h`.
    const M_MMAP_THRESHOLD: c_int = -3;

    pub(super) fn fix_mmap_threshold(bytes: c_int) {
        // SAFETY: mallopt only changes the allocator's tuning parameters, under its own
        // lock; it reads no memory of ours.
        unsafe {
            mallopt(M_MMAP_THRESHOLD, bytes);
        }
    }

    pub(super) fn trim() {
        // SAFETY: malloc_trim releases free memory of the allocator's own arenas, under
        // their locks; live allocations are untouched.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// Larger blocks than this are mapped on their own, and returned when freed.
const MMAP_THRESHOLD: i32 = 128 * 1024;

/// How often freed memory is handed back.
const TRIM_EVERY: Duration = Duration::from_secs(1);

/// Fixes the mmap threshold; call once, before the load begins.
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    glibc::fix_mmap_threshold(MMAP_THRESHOLD);
}

/// Trims the allocator's arenas every second, forever.
pub async fn trim_forever() {
    let mut tick = tokio::time::interval(TRIM_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        glibc::trim();
    }
}

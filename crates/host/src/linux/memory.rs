//! Giving memory freed after a burst of requests back to the system.
//!
//! A burst (a node starting 64 pods, 1,000 client connections) leaves glibc's heaps full of free
//! chunks between live ones; glibc returns only the free space at the very top of a heap, so the
//! daemon's resident memory would stay at its peak long after the burst. `malloc_trim(0)`
//! (glibc ≥ 2.8) also releases whole free pages inside every arena (`madvise(MADV_DONTNEED)`),
//! bringing the daemon back near its idle size.
#![allow(unsafe_code, reason = "glibc's malloc_trim is FFI")]

#[cfg(target_env = "gnu")]
unsafe extern "C" {
    /// glibc: releases free memory from the heaps; returns 1 if any was released.
    fn malloc_trim(pad: usize) -> std::ffi::c_int;
}

/// Returns free heap pages to the system; whether any were returned. Takes a few milliseconds
/// on a large heap, so call it when the daemon is quiet, off the async workers.
pub fn release_free_memory() -> bool {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: malloc_trim takes no pointers and locks each arena itself; it is safe to call
        // from any thread at any time.
        unsafe { malloc_trim(0) == 1 }
    }
    #[cfg(not(target_env = "gnu"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rss_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// RSS is the whole process's: other tests allocating meanwhile would blur it, so the test
    /// runs alone, in a child process of this test binary.
    #[test]
    #[cfg(target_env = "gnu")]
    fn freed_memory_between_live_allocations_goes_back_to_the_system() {
        const CHILD: &str = "CSI_PROXY_MEMORY_TEST_CHILD";
        if std::env::var_os(CHILD).is_none() {
            let name = "linux::memory::tests::freed_memory_between_live_allocations_goes_back_to_the_system";
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([name, "--exact", "--test-threads=1", "--nocapture"])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.contains("1 passed"),
                "{text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        // 64 MiB in 16 KiB blocks (below the mmap threshold, so on the heap), every other one
        // freed: half the heap is free but none of it at the top.
        let mut blocks: Vec<Vec<u8>> = (0..4096).map(|_| vec![1u8; 16 << 10]).collect();
        let mut kept = Vec::new();
        for (i, b) in blocks.drain(..).enumerate() {
            if i % 2 == 1 {
                kept.push(b);
            }
        }
        let before = rss_kib();
        assert!(
            release_free_memory(),
            "free pages inside the heap are released"
        );
        let after = rss_kib();
        assert!(
            after + 16 * 1024 < before,
            "RSS {before} KiB -> {after} KiB: about 32 MiB should have gone back"
        );
        assert!(
            kept.iter().all(|b| b.iter().all(|&x| x == 1)),
            "live data intact"
        );
    }
}

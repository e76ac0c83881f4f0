//! The binary's resident code pages: fault in only the pages the daemon runs.
//!
//! On a page fault in a file mapping the kernel maps up to 64 KiB of neighbouring cached pages too
//! ("fault-around"), so a daemon touching a few functions here and there ends up with most of its 12 MB of
//! machine code resident (RssFile). [`map_on_touch`] marks the executable's read-only segments
//! `MADV_RANDOM` (no fault-around, no read-ahead on faults) after asking the kernel to read them into the
//! page cache in one go (`MADV_WILLNEED`, so a cold start does not read the file a page at a time). Only the
//! process's own accounting changes: a page it runs is mapped on first use, as before.

/// Marks the running executable's read-only segments (code, read-only data) `MADV_RANDOM`; returns how
/// many bytes were marked. Does nothing (and returns 0) off Linux.
#[cfg(target_os = "linux")]
pub fn map_on_touch() -> usize {
    let mut marked = 0usize;
    // SAFETY: the callback only reads the program headers the loader hands it for the duration of the call;
    // `marked` outlives the call and is only touched by the callback, on this thread.
    unsafe { libc::dl_iterate_phdr(Some(advise_main_program), (&raw mut marked).cast()) };
    marked
}

/// Does nothing off Linux.
#[cfg(not(target_os = "linux"))]
pub fn map_on_touch() -> usize {
    0
}

/// `dl_iterate_phdr` callback: advises the main program's (the first object's) read-only loadable segments,
/// then stops the iteration.
#[cfg(target_os = "linux")]
unsafe extern "C" fn advise_main_program(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: the loader passes a valid `dl_phdr_info` for the duration of the callback.
    let info = unsafe { &*info };
    // SAFETY: `data` is the `&mut usize` given to `dl_iterate_phdr` in `map_on_touch`.
    let marked = unsafe { &mut *data.cast::<usize>() };
    if info.dlpi_phdr.is_null() {
        return 1;
    }
    // SAFETY: `dlpi_phdr` points to `dlpi_phnum` program headers owned by the loader.
    let headers =
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    for h in headers {
        if h.p_type != libc::PT_LOAD || h.p_flags & libc::PF_W != 0 {
            continue;
        }
        let start = usize::try_from(info.dlpi_addr.wrapping_add(h.p_vaddr)).unwrap_or(0);
        let len = usize::try_from(h.p_memsz).unwrap_or(0);
        *marked += advise(start, len);
    }
    1
}

/// `MADV_WILLNEED` then `MADV_RANDOM` on the pages covering `[start, start + len)`; the bytes advised.
#[cfg(target_os = "linux")]
fn advise(start: usize, len: usize) -> usize {
    let page = super::process::page_size().unwrap_or(4096);
    let first = start & !(page - 1);
    let end = start.saturating_add(len);
    let span = end - first;
    if len == 0 || first == 0 {
        return 0;
    }
    let addr = first as *mut libc::c_void;
    // SAFETY: the range lies within a segment the loader mapped for this program; WILLNEED only starts
    // reading the file into the page cache.
    unsafe { libc::madvise(addr, span, libc::MADV_WILLNEED) };
    // SAFETY: same range; RANDOM changes neither contents nor protection, only how faults page it in.
    let random = unsafe { libc::madvise(addr, span, libc::MADV_RANDOM) };
    if random == 0 { span } else { 0 }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The test executable's read-only file mappings: each one's header line and whether its `VmFlags`
    /// include `rr` (random read).
    fn exe_mappings() -> Vec<(String, bool)> {
        let exe = std::fs::read_link("/proc/self/exe").expect("exe link");
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
        let mut out = Vec::new();
        let mut current: Option<String> = None;
        for line in smaps.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let header = fields.len() >= 5 && fields[0].contains('-') && fields[1].len() == 4;
            if header {
                let ours = fields
                    .get(5)
                    .is_some_and(|p| std::path::Path::new(p) == exe)
                    && !fields[1].contains('w');
                current = ours.then(|| line.to_string());
            } else if let (Some(m), Some(flags)) = (&current, line.strip_prefix("VmFlags:")) {
                out.push((m.clone(), flags.split_whitespace().any(|f| f == "rr")));
                current = None;
            }
        }
        out
    }

    #[test]
    fn marks_the_executables_read_only_segments_random() {
        let before = exe_mappings();
        assert!(
            !before.is_empty(),
            "no read-only mapping of the test executable found"
        );
        assert!(
            before.iter().all(|(_, rr)| !rr),
            "already random before the call: {before:?}"
        );
        let marked = map_on_touch();
        assert!(marked > 0);
        let after = exe_mappings();
        // The code and the segment at file offset 0 (read-only data); the RELRO segment (written by the
        // loader, then made read-only) is a writable load segment and left alone.
        let (code, first): (Vec<_>, Vec<_>) = (
            after
                .iter()
                .filter(|(m, _)| field(m, 1) == "r-xp")
                .collect(),
            after
                .iter()
                .filter(|(m, _)| field(m, 2).trim_start_matches('0').is_empty())
                .collect(),
        );
        assert!(
            !code.is_empty() && !first.is_empty(),
            "mappings not found: {after:?}"
        );
        assert!(
            code.iter().chain(&first).all(|(_, rr)| *rr),
            "not random after the call: {after:?}"
        );
    }

    fn field(line: &str, i: usize) -> &str {
        line.split_whitespace().nth(i).unwrap_or("")
    }
}

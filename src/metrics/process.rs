//! The standard process metrics of Prometheus client libraries (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_open_fds`, `process_max_fds`,
//! `process_start_time_seconds`), read from `/proc/self` at scrape time the way the Go and Python clients do.
//! Off Linux, or where `/proc` cannot be read, a metric that cannot be read is left out.

/// One scrape's reading; `None` where `/proc` did not say.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    pub start_time_seconds: Option<f64>,
}

impl ProcessStats {
    /// Reads this process's figures.
    pub fn read() -> Self {
        #[cfg(target_os = "linux")]
        {
            read_linux()
        }
        #[cfg(not(target_os = "linux"))]
        {
            Self::default()
        }
    }
}

#[cfg(target_os = "linux")]
fn read_linux() -> ProcessStats {
    // SAFETY: sysconf only reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let stat = std::fs::read_to_string("/proc/self/stat").ok().and_then(|text| parse_stat(&text));
    let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|text| boot_time(&text));
    let mut stats = ProcessStats {
        open_fds: std::fs::read_dir("/proc/self/fd").ok().map(|dir| dir.count() as u64),
        max_fds: std::fs::read_to_string("/proc/self/limits").ok().and_then(|text| max_open_files(&text)),
        ..ProcessStats::default()
    };
    if let Some(stat) = stat {
        stats.virtual_bytes = Some(stat.vsize);
        if page > 0 {
            stats.resident_bytes = Some(stat.rss_pages.saturating_mul(page as u64));
        }
        if ticks > 0 {
            let ticks = ticks as f64;
            stats.cpu_seconds = Some((stat.utime + stat.stime) as f64 / ticks);
            stats.start_time_seconds = boot.map(|boot| boot as f64 + stat.starttime as f64 / ticks);
        }
    }
    stats
}

/// The fields of `/proc/self/stat` that matter here (see proc(5)).
#[cfg(any(target_os = "linux", test))]
#[derive(Debug, PartialEq)]
struct Stat {
    utime: u64,
    stime: u64,
    starttime: u64,
    vsize: u64,
    rss_pages: u64,
}

/// Parses `/proc/PID/stat`. The command name (field 2) is in parentheses and may hold spaces and `)`, so the
/// fields are counted from the last `)`.
#[cfg(any(target_os = "linux", test))]
fn parse_stat(text: &str) -> Option<Stat> {
    let after = &text[text.rfind(')')? + 1..];
    // `after` starts at field 3 (state): field N is at index N - 3.
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat { utime: field(14)?, stime: field(15)?, starttime: field(22)?, vsize: field(23)?, rss_pages: field(24)? })
}

/// The boot time (`btime`, seconds since the epoch) from `/proc/stat`.
#[cfg(any(target_os = "linux", test))]
fn boot_time(text: &str) -> Option<u64> {
    text.lines().find_map(|line| line.strip_prefix("btime")?.trim().parse().ok())
}

/// The soft limit of open files from `/proc/self/limits` (`unlimited` is left out).
#[cfg(any(target_os = "linux", test))]
fn max_open_files(text: &str) -> Option<u64> {
    let line = text.lines().find(|line| line.starts_with("Max open files"))?;
    line["Max open files".len()..].split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        let text = "4242 (agentd (a) b) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 9 0 123456 \
                    987654321 3000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
        let stat = parse_stat(text).expect("parses");
        assert_eq!(stat, Stat { utime: 250, stime: 75, starttime: 123456, vsize: 987654321, rss_pages: 3000 });
        assert_eq!(parse_stat("12 (short) S 1 2"), None);
    }

    #[test]
    fn limits_and_boot_time() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max cpu time              unlimited            unlimited            seconds   \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(max_open_files(limits), Some(1024));
        assert_eq!(max_open_files("Max open files            unlimited            unlimited   files"), None);
        assert_eq!(boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 5\n"), Some(1_700_000_000));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_read() {
        let stats = ProcessStats::read();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64());
        let started = stats.start_time_seconds.expect("start time");
        assert!(started > 1.0e9 && started <= now.unwrap_or(f64::MAX) + 1.0, "{started}");
        assert!(stats.resident_bytes.expect("rss") > 1 << 20);
        assert!(stats.virtual_bytes.expect("vsize") >= stats.resident_bytes.unwrap_or(0));
        assert!(stats.open_fds.expect("fds") >= 3);
        assert!(stats.max_fds.expect("limit") >= stats.open_fds.unwrap_or(0));
        assert!(stats.cpu_seconds.expect("cpu") >= 0.0);
    }
}

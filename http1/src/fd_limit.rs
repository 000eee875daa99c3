//! The process's limit on open files, and how many connections it leaves room for.
//!
//! Every connection is a file descriptor. Many systems start a process with a soft limit of
//! 1,024 and a hard limit far above it; a process may raise its soft limit up to the hard one,
//! so the server does that at start-up. Connections never take the last [`RESERVED_FDS`]: the
//! store (SQLite's files, Postgres connections), attachments, logs and the listener itself need
//! descriptors too, and running out of them fails a write rather than a connection.

/// Descriptors kept out of reach of connections, for everything else the process opens.
pub const RESERVED_FDS: u64 = 256;

/// The open-files limits after [`raise_to_hard_limit`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FdLimits {
    /// The soft limit before raising it.
    pub soft_before: u64,
    /// The soft limit in force.
    pub soft: u64,
    pub hard: u64,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (where the system has one) and returns
/// the limits before and after.
pub fn raise_to_hard_limit() -> std::io::Result<FdLimits> {
    #[cfg(unix)]
    {
        let (soft_before, hard) = rlimit::Resource::NOFILE.get()?;
        // The crate caps the target where the system has a stricter limit than `hard`
        // (macOS's `kern.maxfilesperproc`).
        let soft = rlimit::increase_nofile_limit(hard)?;
        Ok(FdLimits {
            soft_before,
            soft,
            hard,
        })
    }
    #[cfg(not(unix))]
    {
        Ok(FdLimits {
            soft_before: u64::MAX,
            soft: u64::MAX,
            hard: u64::MAX,
        })
    }
}

/// The connection cap in force: `requested`, but never more than the soft limit allows once
/// [`RESERVED_FDS`] are set aside (and at least 1).
pub fn connection_cap(requested: usize, soft_limit: u64) -> usize {
    let room = soft_limit.saturating_sub(RESERVED_FDS);
    let room = usize::try_from(room).unwrap_or(usize::MAX);
    requested.min(room).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_the_reserve_free() {
        assert_eq!(connection_cap(10_000, 1_048_576), 10_000);
        assert_eq!(connection_cap(10_000, 1_024), 1_024 - RESERVED_FDS as usize);
        assert_eq!(connection_cap(10_000, u64::MAX), 10_000);
        assert_eq!(connection_cap(10_000, 100), 1);
        assert_eq!(connection_cap(0, 4_096), 1);
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let limits = raise_to_hard_limit().expect("getrlimit/setrlimit");
        assert!(limits.soft >= limits.soft_before);
        assert!(limits.soft <= limits.hard);
        #[cfg(target_os = "linux")]
        if limits.hard != rlimit::INFINITY {
            assert_eq!(limits.soft, limits.hard);
        }
    }
}

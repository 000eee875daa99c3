//! The wall clock, read in one place: event timestamps, lease expiries and the lifetimes of
//! signed values all count milliseconds since the Unix epoch from [`now_ms`].

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the system clock is set before it).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_milliseconds_since_the_epoch() {
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let now = super::now_ms();
        // 2020-01-01 in ms: a clock in seconds or nanoseconds would be far off.
        assert!(now >= before && now > 1_577_836_800_000 && now < 1_577_836_800_000 * 10);
    }
}

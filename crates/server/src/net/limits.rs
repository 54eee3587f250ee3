//! The connection limits of one server ([`ConnLimits`]): how long a client
//! may take to send a request head and body, how long it may leave a
//! response unread, how long a kept-alive connection may stay idle, and how
//! many connections may be open at once.

use std::time::Duration;

/// Timeouts and the connection cap (each a `headroom serve` flag).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConnLimits {
    /// From a request's first byte to the end of its header block; a client
    /// slower than this is disconnected.
    pub header_timeout: Duration,
    /// From the end of the head to the end of the body; slower is a 408.
    pub body_timeout: Duration,
    /// How long a response write may make no progress (a client that stops
    /// reading fills the socket's buffers); past it the connection is
    /// closed and its request cancelled, freeing its engine slot.
    pub write_timeout: Duration,
    /// How long a connection may sit with no request in flight and no byte
    /// received (a fresh connection or a kept-alive one) before it is closed.
    pub keep_alive_timeout: Duration,
    /// Most connections open at once; beyond it a connection is answered 503
    /// and closed at once.
    pub max_connections: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            keep_alive_timeout: Duration::from_secs(60),
            max_connections: 1024,
        }
    }
}

/// A flag's seconds as a duration: finite, > 0 and at most a day.
pub fn seconds(flag: &str, s: f64) -> Result<Duration, String> {
    if !(s.is_finite() && s > 0.0 && s <= 86_400.0) {
        return Err(format!(
            "{flag} must be a number of seconds in (0, 86400] (got {s})"
        ));
    }
    Ok(Duration::from_secs_f64(s))
}

#[cfg(test)]
mod tests {
    use super::seconds;
    use std::time::Duration;

    #[test]
    fn seconds_refuses_what_a_duration_cannot_hold() {
        assert_eq!(seconds("--x", 1.5).unwrap(), Duration::from_millis(1500));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e300] {
            let e = seconds("--x", bad).unwrap_err();
            assert!(e.contains("--x"), "{e}");
        }
    }
}

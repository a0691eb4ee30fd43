//! Capped exponential backoff between retries.

use std::time::Duration;

/// Doubles from `FIRST` up to a cap; reset after a success.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    max: Duration,
}

const FIRST: Duration = Duration::from_millis(100);

impl Backoff {
    pub fn new(max: Duration) -> Self {
        Backoff {
            next: FIRST.min(max),
            max,
        }
    }

    /// The pause before the next attempt.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    pub fn reset(&mut self) {
        self.next = FIRST.min(self.max);
    }
}

/// Sleeps for `delay`; `true` if `cancel` fired first.
pub async fn sleep_unless_cancelled(
    cancel: &tokio_util::sync::CancellationToken,
    delay: Duration,
) -> bool {
    tokio::select! {
        _ = cancel.cancelled() => true,
        _ = tokio::time::sleep(delay) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(500));
        let delays: Vec<u128> = (0..5).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 500, 500]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(100));
    }
}

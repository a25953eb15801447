//! Jittered exponential reconnect delays (backon), reset after a successful connection.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

pub(crate) struct Reconnect {
    builder: ExponentialBuilder,
    current: Box<dyn Iterator<Item = Duration> + Send>,
    pub failures: u32,
}

impl Reconnect {
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        let builder = ExponentialBuilder::default()
            .with_min_delay(min)
            .with_max_delay(max)
            .with_jitter()
            .without_max_times();
        Reconnect {
            current: Box::new(builder.build()),
            builder,
            failures: 0,
        }
    }

    /// The next delay to wait before reconnecting.
    pub(crate) fn next_delay(&mut self) -> Duration {
        self.failures += 1;
        self.current.next().unwrap_or(Duration::from_secs(5))
    }

    pub(crate) fn reset(&mut self) {
        self.failures = 0;
        self.current = Box::new(self.builder.build());
    }
}

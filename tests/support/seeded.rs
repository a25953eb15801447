//! Seeded fault schedules, five at a time: the seeds come from two environment variables (how
//! many, from which), each schedule runs in a task of its own, a failure names its seed and the
//! command that replays it alone, and the faults the schedules played are tallied.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Instant;

use futures::StreamExt;

use super::fleet::panic_text;

/// One family of schedules.
pub struct Seeds {
    /// What a message calls a schedule ("fleet fault").
    pub name: &'static str,
    /// The variable holding how many seeds run.
    pub count_var: &'static str,
    /// The variable holding the first seed.
    pub base_var: &'static str,
    pub default_count: u64,
    /// The command a replay runs (`cargo test --test …`).
    pub replay: &'static str,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// With `VK_FAULT_TRACE` set, the fleet's and the daemon's logs (or `RUST_LOG`'s) on stderr.
pub fn trace_if_asked() {
    if std::env::var("VK_FAULT_TRACE").is_ok() {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| "vk_observer_fleet=info,vk_observer_daemon=info".into());
        let _ = tracing_subscriber::fmt().with_env_filter(filter).try_init();
    }
}

impl Seeds {
    pub fn count(&self) -> u64 {
        env_u64(self.count_var, self.default_count)
    }

    /// Runs every seed's schedule (five at once) and tallies the faults they played; a failed
    /// seed panics with its message and its replay command. Prints the time and the tally.
    pub async fn run<K, Fut>(&self, schedule: impl Fn(u64) -> Fut) -> BTreeMap<K, usize>
    where
        K: Ord + std::fmt::Debug + Send + 'static,
        Fut: Future<Output = Vec<K>> + Send + 'static,
    {
        let (n, base) = (self.count(), env_u64(self.base_var, 0));
        let started = Instant::now();
        let tally = std::sync::Mutex::new(BTreeMap::new());
        futures::stream::iter(base..base + n)
            .for_each_concurrent(5, |seed| {
                let run = tokio::spawn(schedule(seed));
                let tally = &tally;
                async move {
                    let played = run.await.unwrap_or_else(|e| {
                        panic!(
                            "{} seed {seed} failed: {}\nreplay: {}={seed} {}=1 VK_FAULT_TRACE=1 {}",
                            self.name,
                            panic_text(e),
                            self.base_var,
                            self.count_var,
                            self.replay
                        )
                    });
                    let mut tally = tally.lock().unwrap();
                    for f in played {
                        *tally.entry(f).or_default() += 1;
                    }
                }
            })
            .await;
        let tally = tally.into_inner().unwrap();
        eprintln!(
            "{} schedules: {n} seeds from {base} converged in {:.0?}; faults played: {tally:?}",
            self.name,
            started.elapsed()
        );
        tally
    }
}

//! Options from the environment (`VK_BENCH_*` knobs).

pub(crate) struct Opts {
    pub(crate) quick: bool,
    pub(crate) only: Option<Vec<String>>,
    pub(crate) tail_sizes: Vec<u64>,
    pub(crate) catchup: u64,
    pub(crate) waiters: usize,
    pub(crate) secs: u64,
}

impl Opts {
    pub(crate) fn from_env() -> Opts {
        let quick = std::env::var("VK_BENCH_QUICK").is_ok_and(|v| v != "0");
        let list = |k: &str| {
            std::env::var(k).ok().map(|v| {
                v.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
            })
        };
        let num = |k: &str, d: u64| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        let tail_sizes = list("VK_BENCH_TAIL_SIZES")
            .map(|v| v.iter().filter_map(|s| s.parse().ok()).collect())
            .unwrap_or_else(|| {
                if quick {
                    vec![1_000, 10_000]
                } else {
                    vec![1_000, 10_000, 100_000, 1_000_000]
                }
            });
        Opts {
            quick,
            only: list("VK_BENCH_ONLY"),
            tail_sizes,
            catchup: num("VK_BENCH_CATCHUP", if quick { 20_000 } else { 1_000_000 }),
            waiters: num("VK_BENCH_WAITERS", if quick { 500 } else { 10_000 }) as usize,
            secs: num("VK_BENCH_SECS", if quick { 3 } else { 10 }),
        }
    }
    pub(crate) fn runs(&self, phase: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|p| p == phase))
    }
    pub(crate) fn iters(&self, full: usize) -> usize {
        if self.quick { (full / 8).max(10) } else { full }
    }
}

//! A child process stopped with SIGTERM when its guard drops, so it can stop its own children
//! (`vk-observer demo` stops its nats-server), and waited for up to 15 s.

use std::time::{Duration, Instant};

use tokio::process::Child;

pub struct TermOnDrop(pub Child);

impl Drop for TermOnDrop {
    fn drop(&mut self) {
        let Some(pid) = self.0.id() else { return };
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        let start = Instant::now();
        while self.0.try_wait().ok().flatten().is_none()
            && start.elapsed() < Duration::from_secs(15)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

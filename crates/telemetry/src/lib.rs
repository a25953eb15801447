//! `vk-observer-telemetry`: vk-observer's `telemetry`, `health` as its own crate, so the compiler keeps
//! ARCHITECTURE.md's layer rules: this crate can name only the crates its Cargo.toml lists, all
//! on lower floors. The code is in the module(s) below; the lower layers keep their usual names
//! (`crate::store::...`) through the private aliases at the end.

pub mod catchup_metrics;
pub mod fleet_metrics;
pub mod health;
pub mod telemetry;

//! `vk-observer-fleet`: vk-observer's `fleet` as its own crate, so the compiler keeps
//! ARCHITECTURE.md's layer rules: this crate can name only the crates its Cargo.toml lists, all
//! on lower floors. The code is in the module(s) below; the lower layers keep their usual names
//! (`crate::store::...`) through the private aliases at the end.

pub mod fleet;

// Lower layers under their usual names: `crate::<layer>::...` paths keep working.
#[allow(unused_imports)]
use vk_observer_config::config;
#[allow(unused_imports)]
use vk_observer_store::store;
#[allow(unused_imports)]
use vk_observer_telemetry::fleet_metrics as telemetry_fleet;
#[allow(unused_imports)]
use vk_observer_vk::vk;

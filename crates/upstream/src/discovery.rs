//! Finding VK when no URL is configured: VK writes its port to
//! `<system temp dir>/vibe-kanban/vibe-kanban.port` (decimal, no newline) on every start.

use std::path::PathBuf;

pub fn port_file_path() -> PathBuf {
    std::env::temp_dir()
        .join("vibe-kanban")
        .join("vibe-kanban.port")
}

/// `http://127.0.0.1:<port>` from VK's port file, if it exists and holds a port.
pub fn upstream_from_port_file() -> Option<String> {
    let text = std::fs::read_to_string(port_file_path()).ok()?;
    let port: u16 = text.trim().parse().ok()?;
    Some(format!("http://127.0.0.1:{port}"))
}

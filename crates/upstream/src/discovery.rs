//! Finding VK when no URL is configured: VK writes its port to
//! `<system temp dir>/vibe-kanban/vibe-kanban.port` on every start. The fork writes the bare
//! decimal port; VK 0.1.x writes JSON, `{"main_port": N, "preview_proxy_port": M}`
//! (`tests/fixtures/vk-wire-bloop/samples/port-file.txt`). Both are read.

use std::path::PathBuf;

pub fn port_file_path() -> PathBuf {
    std::env::temp_dir()
        .join("vibe-kanban")
        .join("vibe-kanban.port")
}

/// How the port file spells the port: one of the witnesses of VK's dialect (`dialect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortFileShape {
    /// A bare number: the fork.
    Bare,
    /// JSON with `main_port`: VK 0.1.x.
    Json,
}

/// What VK's port file says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortFile {
    pub port: u16,
    pub shape: PortFileShape,
}

/// The port file's port and shape, if it exists and holds a port in either spelling.
pub fn port_file() -> Option<PortFile> {
    parse_port_file(&std::fs::read_to_string(port_file_path()).ok()?)
}

/// A bare decimal port, or VK 0.1.x's JSON object with `main_port`.
pub(crate) fn parse_port_file(text: &str) -> Option<PortFile> {
    let text = text.trim();
    if let Ok(port) = text.parse::<u16>() {
        return Some(PortFile {
            port,
            shape: PortFileShape::Bare,
        });
    }
    let json: serde_json::Value = serde_json::from_str(text).ok()?;
    let port = u16::try_from(json.get("main_port")?.as_u64()?).ok()?;
    Some(PortFile {
        port,
        shape: PortFileShape::Json,
    })
}

/// `http://127.0.0.1:<port>` from VK's port file, if it exists and holds a port.
pub fn upstream_from_port_file() -> Option<String> {
    port_file().map(|p| format!("http://127.0.0.1:{}", p.port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_spellings_of_the_port_file_are_read() {
        let bare = parse_port_file("53412").unwrap();
        assert_eq!((bare.port, bare.shape), (53412, PortFileShape::Bare));
        let recorded = include_str!("../../../tests/fixtures/vk-wire-bloop/samples/port-file.txt");
        let json = parse_port_file(recorded).unwrap();
        assert_eq!((json.port, json.shape), (59997, PortFileShape::Json));
        for garbage in [
            "",
            "port",
            "{}",
            "{\"main_port\": 70000}",
            "{\"main_port\": \"1\"}",
        ] {
            assert_eq!(parse_port_file(garbage), None, "{garbage:?}");
        }
    }
}

//! The fleet's board in a real headless chromium (issue 41): `vk-observer demo --hosts 3` (the
//! real binary: a nats-server child, three simulated hosts each with its daemon, a fleet node
//! serving the board), its page read with no token (the demo's node takes none: open to the
//! loopback caller). The hosts line names each host with connected, lag and heartbeat, the
//! cards of every host render, each project named by its host, and an attempt opens.
//!
//! Skipped with a printed line where chromium, chromedriver or nats-server is missing (failed
//! under `CI`, which installs them). Screenshots: `target/board-screenshots/fleet-*.png`.

mod board_support;

#[allow(dead_code)]
#[path = "support/nats.rs"]
mod nats;

#[path = "support/term_on_drop.rs"]
mod term_on_drop;

use std::process::Stdio;
use std::time::{Duration, Instant};

use board_support::browser;
use serde_json::Value;
use term_on_drop::TermOnDrop;
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_vk-observer");
const HOSTS: usize = 3;
const SHOWN: Duration = Duration::from_secs(90);

/// The demo process, stopped with SIGTERM (so it stops its nats-server child) when dropped.
type Demo = TermOnDrop;

/// `vk-observer demo --hosts 3` on a free loopback port, with no `VK_OBSERVER_*` of the
/// caller's shell but the nats-server it is given.
fn start_demo(nats: &std::path::Path, dir: &std::path::Path) -> (Demo, std::net::SocketAddr) {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut c = Command::new(BIN);
    for (k, _) in std::env::vars() {
        if k.starts_with("VK_OBSERVER_") {
            c.env_remove(k);
        }
    }
    c.args(["demo", "--hosts", &HOSTS.to_string(), "--every", "3"])
        .arg("--listen")
        .arg(addr.to_string())
        .arg("--data-dir")
        .arg(dir)
        .env("VK_OBSERVER_NATS_SERVER", nats)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    (TermOnDrop(c.spawn().expect("the demo starts")), addr)
}

/// The hosts named on the cards' meta lines, per project heading.
async fn cards_by_project(b: &browser::Browser) -> Vec<(String, Vec<String>)> {
    let script = "return Array.from(document.querySelectorAll('.project')).map(p => [p.querySelector('h2').firstChild.textContent, Array.from(p.querySelectorAll('.card')).map(c => (c.querySelector('.meta') || {textContent: ''}).textContent)]);";
    let v = b.client.execute(script, vec![]).await.unwrap();
    let text = |x: &Value| x.as_str().unwrap_or_default().to_string();
    v.as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    let metas = p[1].as_array().map(|m| m.iter().map(text).collect());
                    (text(&p[0]), metas.unwrap_or_default())
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_board_of_a_three_host_fleet_shows_each_host_and_its_cards() {
    let test = "board_fleet_browser::three_hosts";
    let Some(nats) = nats::binary_or_skip(test) else {
        return;
    };
    let Some(b) = browser::open(test).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_demo, addr) = start_demo(&nats, dir.path());
    let base = format!("http://{addr}");
    let http = reqwest::Client::new();
    b.until("the fleet node ready (/readyz 200)", SHOWN, || async {
        let ready = http.get(format!("{base}/readyz")).send().await;
        ready.is_ok_and(|r| r.status() == 200).then_some(())
    })
    .await;
    b.client.goto(&format!("{base}/board")).await.unwrap();
    b.wait_for("#main:not([hidden]) .project", SHOWN).await;
    let started = Instant::now();
    let chips = b
        .until("every host connected on the hosts line", SHOWN, || async {
            let chips = b.texts("#hosts .host").await;
            let all = (1..=HOSTS).all(|i| {
                chips.iter().any(|c| {
                    c.starts_with(&format!("host-{i}: connected"))
                        && c.contains(" · lag ")
                        && c.contains("heartbeat ")
                        && !c.contains("no heartbeat")
                })
            });
            all.then_some(chips)
        })
        .await;
    println!("hosts line after {:?}: {chips:?}", started.elapsed());
    let projects = b
        .until("cards of every host", SHOWN, || async {
            let projects = cards_by_project(&b).await;
            let every = (1..=HOSTS).all(|i| {
                let host = format!("host-{i}");
                projects.iter().any(|(name, metas)| {
                    name.trim() == format!("Demo on {host}")
                        && !metas.is_empty()
                        && metas.iter().all(|m| m.contains(&host))
                })
            });
            every.then_some(projects)
        })
        .await;
    assert_eq!(projects.len(), HOSTS, "{projects:?}");
    assert_eq!(b.count("#chart g.bucket").await, 24, "the chart renders");
    b.screenshot("fleet-board").await;
    // One attempt opened on the node: read from the node's cache like on a single daemon.
    let card = b.wait_for(".card a.title", SHOWN).await;
    card.click().await.unwrap();
    b.wait_for("#attempt:not([hidden]) #branch", SHOWN).await;
    let title = b.texts("#attempt h2").await.join(" ");
    assert!(title.starts_with("Demo task"), "{title}");
    assert!(b.count("#attempt #log li").await >= 1, "its log");
    b.screenshot("fleet-attempt").await;
    b.close().await;
}

//! A real headless chromium for the board's browser tests, driven over WebDriver (fantoccini)
//! through a `chromedriver` this module starts on a free port and ends when dropped.
//!
//! Where chromium or chromedriver is absent the test prints one line saying so (`SKIPPED …`, to
//! stderr past libtest's capture) and returns —
//! unless `CI` is set: there `.ci/run` installs them, and their absence fails the test.
//! Screenshots go to `target/board-screenshots/` (`$CARGO_TARGET_DIR` when set), kept by CI.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

/// The first of `names` in the directories of `path` (a `PATH` value).
fn on_path(path: &std::ffi::OsStr, names: &[&str]) -> Option<PathBuf> {
    std::env::split_paths(path)
        .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
        .find(|p| p.is_file())
}

/// Why the browser tests cannot run here.
pub const NOT_INSTALLED: &str =
    "chromium or chromedriver is not installed (apt-get install chromium chromium-driver)";

/// Chromium and chromedriver in the directories of `path`, or why not.
pub fn find_browser(path: &std::ffi::OsStr) -> Result<(PathBuf, PathBuf), &'static str> {
    let chromium = on_path(path, &["chromium", "chromium-browser", "google-chrome"]);
    let driver = on_path(path, &["chromedriver"]);
    chromium.zip(driver).ok_or(NOT_INSTALLED)
}

/// The line a skipped browser test prints.
pub fn skip_line(test: &str, why: &str) -> String {
    format!("SKIPPED {test}: {why}")
}

/// Where the screenshots of the run are kept.
pub fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("board-screenshots")
}

/// A chromedriver and the browser session it runs.
pub struct Browser {
    pub client: Client,
    _driver: tokio::process::Child,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A browser, or None (with a line saying why) where none can run here; with `CI` set its
/// absence is a failure.
pub async fn open(test: &str) -> Option<Browser> {
    open_with(test, &[]).await
}

/// As [`open`], with more chromium arguments (e.g. a dark colour scheme).
pub async fn open_with(test: &str, more: &[&str]) -> Option<Browser> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let (chromium, driver) = match find_browser(&path) {
        Ok(found) => found,
        Err(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "{test}: {why}, and CI is set"
            );
            // Past libtest's capture (which takes only print!/eprint!), so the line shows.
            let _ = writeln!(std::io::stderr(), "{}", skip_line(test, why));
            return None;
        }
    };
    let port = free_port();
    let child = tokio::process::Command::new(&driver)
        .arg(format!("--port={port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("chromedriver starts");
    let started = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "chromedriver did not listen"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut args = vec![
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
    ];
    args.extend_from_slice(more);
    let caps = json!({"goog:chromeOptions": {"binary": chromium, "args": args}});
    let serde_json::Value::Object(caps) = caps else {
        unreachable!()
    };
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let client = ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("a chromium session starts");
    Some(Browser {
        client,
        _driver: child,
    })
}

impl Browser {
    /// Save a screenshot of the page as `<name>.png`.
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("screenshot");
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    /// The texts of every element `css` selects.
    pub async fn texts(&self, css: &str) -> Vec<String> {
        let mut out = Vec::new();
        for e in self
            .client
            .find_all(Locator::Css(css))
            .await
            .unwrap_or_default()
        {
            out.push(e.text().await.unwrap_or_default());
        }
        out
    }

    /// How many elements `css` selects.
    pub async fn count(&self, css: &str) -> usize {
        self.client
            .find_all(Locator::Css(css))
            .await
            .map(|v| v.len())
            .unwrap_or(0)
    }

    /// The first element `css` selects, waited for at most `within`.
    pub async fn wait_for(&self, css: &str, within: Duration) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(within)
            .every(Duration::from_millis(50))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: not shown within {within:?}: {e}"))
    }

    /// Wait until `probe` over the page gives a value, at most `within`.
    pub async fn until<T, F, Fut>(&self, what: &str, within: Duration, mut probe: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let started = Instant::now();
        loop {
            if let Some(v) = probe().await {
                return v;
            }
            assert!(started.elapsed() < within, "{what}: not within {within:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sign in through the page's form with `token`.
    pub async fn login(&self, base: &str, token: &str) {
        self.client.goto(&format!("{base}/board")).await.unwrap();
        let input = self.wait_for("#token", Duration::from_secs(10)).await;
        input.send_keys(token).await.unwrap();
        self.client
            .find(Locator::Css("#login form button"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let shown = self
            .client
            .wait()
            .at_most(Duration::from_secs(20))
            .for_element(Locator::Css("#main:not([hidden]) .project"))
            .await;
        if shown.is_err() {
            let url = self.client.current_url().await.map(|u| u.to_string());
            let text = self
                .client
                .execute("return document.body.innerText;", vec![])
                .await;
            self.screenshot("login-failed").await;
            panic!("the board did not show after signing in: at {url:?}, page says {text:?}");
        }
    }

    pub async fn close(self) {
        let _ = self.client.close().await;
    }
}

//! The board's page, embedded in the binary (no build step, nothing fetched at run time), and
//! the headers every board answer carries.
//!
//! The Content-Security-Policy allows scripts, styles and connections from the daemon's own
//! origin only: the page has no inline script or style (the HTML links its two scripts and one CSS
//! file), so an injected `<script>` or `style=` attribute does not run, and nothing the page
//! shows (task titles, log lines: written by agents) is ever inserted as HTML — the script
//! sets `textContent` only. `frame-ancestors 'none'` keeps it out of other sites' frames
//! (click-jacking of the approve button); `form-action 'self'` keeps the login form home.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

const PAGE: &str = include_str!("board.html");
const SCRIPT: &str = include_str!("board.js");
const CHART: &str = include_str!("board-chart.js");
const STYLE: &str = include_str!("board.css");

/// The policy of every board answer (see the module doc).
pub(crate) const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'";

pub(crate) async fn page() -> Response {
    with_type(PAGE, "text/html; charset=utf-8")
}

pub(crate) async fn script() -> Response {
    with_type(SCRIPT, "text/javascript; charset=utf-8")
}

pub(crate) async fn chart() -> Response {
    with_type(CHART, "text/javascript; charset=utf-8")
}

pub(crate) async fn style() -> Response {
    with_type(STYLE, "text/css; charset=utf-8")
}

fn with_type(body: &'static str, content_type: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// Every board answer: the CSP, no sniffing, no framing, no caching (answers hold what a token
/// may read; assets change with the binary), and no referrer to other sites — `same-origin`,
/// not `no-referrer`, under which a browser sends `Origin: null` with the page's own form posts
/// and the Origin check (`auth`) could not tell them from a forged one.
pub(crate) async fn secured(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    r
}

//! Who is looking at the board, and the checks in front of every POST.
//!
//! The board takes exactly the tokens `/mcp` takes (`mcp::access::TokenBook`: `[mcp] token` and
//! the tokens file, re-read when it changes, so a revoked token stops working at once). With no
//! token in use anywhere the board, like `/mcp`, is the loopback caller's (every scope). Else a
//! request needs one: an `Authorization: Bearer` header (scripts), or the cookie the login form
//! sets — HttpOnly (no script reads it), SameSite=Strict (no other site's request carries it),
//! Path=/board. The cookie holds the token itself, checked on every request like a header, so
//! there is no session state to leak or expire apart from the token's own.
//!
//! Every request must name the daemon by a host it answers as (`known_host`: loopback names and
//! `[mcp] allowed_hosts`, the rule `/mcp` keeps), so a page of another site whose name was
//! rebound to this address (DNS rebinding) reads nothing, even where no token is in use.
//!
//! Every POST (login, logout, approve, deny, stop) must carry an `Origin` that is the page's
//! own (`http(s)://` + the request's `Host`) or one of `[mcp] allowed_origins`; a missing or
//! foreign one is refused with 403 before anything else is read, so a form on another site
//! cannot act even where a browser would send the cookie.

use axum::extract::{Form, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};

use super::{BoardError, BoardState};
use vk_observer_config::access::Scope;
use vk_observer_mcp::access::Caller;

/// The cookie that keeps the board's token.
pub(crate) const COOKIE: &str = "vko_board";

/// The caller of this request (see the module doc), or why there is none.
pub(crate) fn caller(state: &BoardState, headers: &HeaderMap) -> Result<Caller, BoardError> {
    if let Some(auth) = headers.get(header::AUTHORIZATION) {
        return state
            .tokens
            .authenticate(auth.to_str().ok())
            .map_err(|_| refused("The bearer token was not accepted (unknown or revoked)."));
    }
    // With no token in use every request is the loopback caller, cookie or not.
    let secret = cookie(headers);
    let bearer = secret.as_ref().map(|s| format!("Bearer {s}"));
    state
        .tokens
        .authenticate(bearer.as_deref())
        .map_err(|_| match secret {
            None => BoardError::new(
                StatusCode::UNAUTHORIZED,
                "login_required",
                "This daemon needs a token: sign in with one (`vk-observer token create`, or the [mcp] token).",
            ),
            Some(_) => refused("The token saved in this browser is no longer accepted (revoked or replaced). Sign in again with a current token."),
        })
}

fn refused(message: &str) -> BoardError {
    BoardError::new(StatusCode::UNAUTHORIZED, "token_refused", message)
}

/// The caller, if it may read (scope `read`): what every board read needs.
pub(crate) fn reader(state: &BoardState, headers: &HeaderMap) -> Result<Caller, BoardError> {
    let caller = caller(state, headers)?;
    if !caller.scopes.contains(Scope::Read) {
        return Err(BoardError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "Token `{}` may not read (its scopes: {}): the board needs scope `read`.",
                caller.name,
                caller.scopes.names()
            ),
        ));
    }
    Ok(caller)
}

/// The board's cookie, if the request carries one.
fn cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// 403 unless the request's `Origin` is the page's own or an allowed one (module doc).
pub(crate) fn same_origin(state: &BoardState, headers: &HeaderMap) -> Result<(), BoardError> {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return Err(BoardError::new(
            StatusCode::FORBIDDEN,
            "origin_missing",
            "Refused: a board action must come from the board's own page (the request has no Origin header).",
        ));
    };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let own =
        host.is_some_and(|h| origin == format!("http://{h}") || origin == format!("https://{h}"));
    if own || state.allowed_origins.iter().any(|o| o == origin) {
        return Ok(());
    }
    Err(BoardError::new(
        StatusCode::FORBIDDEN,
        "origin_refused",
        format!(
            "Refused: origin {origin} is not this board's (add it to [mcp] allowed_origins if a proxy serves the board there)."
        ),
    ))
}

/// (host, port) of an authority, the host lowercased and without IPv6 brackets.
fn authority(raw: &str) -> Option<(String, Option<u16>)> {
    let a = axum::http::uri::Authority::try_from(raw.trim()).ok()?;
    let host = a.host().trim_matches(['[', ']']).to_ascii_lowercase();
    Some((host, a.port_u16()))
}

/// Middleware: 403 unless the request's host (its `Host`, or the HTTP/2 authority) is one the
/// daemon answers as; an allowed name without a port allows every port (as `/mcp`).
pub(crate) async fn known_host(
    State(state): State<BoardState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let named = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.to_string()))
        .unwrap_or_default();
    let known = authority(&named).is_some_and(|(host, port)| {
        state
            .allowed_hosts
            .iter()
            .filter_map(|a| authority(a))
            .any(|(h, p)| h == host && p.is_none_or(|p| Some(p) == port))
    });
    if known {
        return next.run(req).await;
    }
    let shown: String = named.chars().take(100).collect();
    BoardError::new(
        StatusCode::FORBIDDEN,
        "host_refused",
        format!("Refused: this daemon does not answer as `{shown}` (a guard against DNS rebinding); add the name to [mcp] allowed_hosts to serve the board under it."),
    )
    .into_response()
}

#[derive(serde::Deserialize)]
pub(crate) struct LoginForm {
    token: String,
}

/// `POST /board/login` (the form): a token that authenticates is kept in the cookie and the
/// page reloaded; any other gets the page again with `?login=refused` (it says why).
pub(crate) async fn login(
    State(state): State<BoardState>,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    if let Err(e) = same_origin(&state, &headers) {
        return e.into_response();
    }
    let Ok(Form(form)) = form else {
        return Redirect::to("/board?login=refused").into_response();
    };
    let token = form.token.trim();
    // A cookie value holds no spaces, quotes, commas or semicolons; no token does either.
    let cookie_safe = !token.is_empty()
        && token.len() <= 512
        && token
            .bytes()
            .all(|b| b.is_ascii_graphic() && !b"\";,\\".contains(&b));
    let accepted = cookie_safe
        && state
            .tokens
            .authenticate(Some(&format!("Bearer {token}")))
            .is_ok();
    if !accepted {
        return Redirect::to("/board?login=refused").into_response();
    }
    let cookie = format!("{COOKIE}={token}; Path=/board; HttpOnly; SameSite=Strict");
    with_cookie(Redirect::to("/board"), &cookie)
}

/// `POST /board/logout`: the cookie is cleared.
pub(crate) async fn logout(State(state): State<BoardState>, headers: HeaderMap) -> Response {
    if let Err(e) = same_origin(&state, &headers) {
        return e.into_response();
    }
    let cookie = format!("{COOKIE}=; Path=/board; HttpOnly; SameSite=Strict; Max-Age=0");
    with_cookie(Redirect::to("/board?login=out"), &cookie)
}

fn with_cookie(redirect: Redirect, cookie: &str) -> Response {
    let mut r = redirect.into_response();
    match HeaderValue::from_str(cookie) {
        Ok(v) => {
            r.headers_mut().insert(header::SET_COOKIE, v);
            r
        }
        Err(_) => BoardError::new(
            StatusCode::BAD_REQUEST,
            "invalid_argument",
            "That token cannot be kept in a cookie.",
        )
        .into_response(),
    }
}

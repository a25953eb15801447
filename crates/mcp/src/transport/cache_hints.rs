//! The caching hints (`ttlMs`, `cacheScope`; protocol 2026-07-28) on the cacheable results the
//! daemon and the stdio bridge answer: what a client may keep, and for how long. Set only for
//! peers on 2026-07-28 or later (older revisions define no such fields; rmcp adds nothing for
//! them either); rmcp would otherwise fill in `0` / `private` on its own, so the values here
//! are the daemon's stated choice, not an accident of the default.
//!
//! - `resources/read`: live cache data (an attempt's status, a project's tasks), changed by
//!   every VK event: never reusable (`ttlMs: 0`), and `private` (one user's board).
//! - `tools/list`: fixed while this daemon runs, but it depends on the caller (`get_context`
//!   only inside an attempt workspace; what a bearer token may call): `private`, kept
//!   `LISTING_TTL_MS` so a daemon upgraded in place is seen within minutes.
//! - `resources/templates/list`: the same for every caller: `public`, `LISTING_TTL_MS`.

use rmcp::RoleServer;
use rmcp::model::{
    CacheScope, ListResourceTemplatesResult, ListToolsResult, ProtocolVersion, ReadResourceResult,
};
use rmcp::service::RequestContext;

/// How long a client may reuse a listing (tools, resource templates): 5 minutes.
pub const LISTING_TTL_MS: u64 = 300_000;

/// Whether this request's protocol revision defines caching hints (2026-07-28 or later; ISO
/// dates compare as strings).
fn speaks_cache_hints(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// `tools/list`: per caller, reusable for `LISTING_TTL_MS`.
pub(crate) fn on_tools(ctx: &RequestContext<RoleServer>, result: &mut ListToolsResult) {
    if speaks_cache_hints(ctx) {
        result.ttl_ms = Some(LISTING_TTL_MS);
        result.cache_scope = Some(CacheScope::Private);
    }
}

/// `resources/templates/list`: the same for everyone, reusable for `LISTING_TTL_MS`.
pub(crate) fn on_templates(
    ctx: &RequestContext<RoleServer>,
    result: &mut ListResourceTemplatesResult,
) {
    if speaks_cache_hints(ctx) {
        result.ttl_ms = Some(LISTING_TTL_MS);
        result.cache_scope = Some(CacheScope::Public);
    }
}

/// `resources/read`: live data, not reusable.
pub(crate) fn on_read(ctx: &RequestContext<RoleServer>, result: &mut ReadResourceResult) {
    if speaks_cache_hints(ctx) {
        result.ttl_ms = Some(0);
        result.cache_scope = Some(CacheScope::Private);
    }
}

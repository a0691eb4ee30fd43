//! The operator's console: three static files compiled into the binary (no CDN, no build
//! step: the page works with no network), served at `/` beside the API on the same listener.
//!
//! The page itself holds nothing secret, so it needs no token; everything it reads or does
//! goes through the API with the token in an `Authorization: Bearer` header that its own
//! script sends with `fetch` (the operator types the token once; it stays in the tab's
//! `sessionStorage`). A header, unlike a cookie, is never sent by the browser on its own, so
//! another site's page cannot act with it (no cross-site request forgery to defend against),
//! and the API's rules still apply to every call the page makes: under a rebound host name
//! (DNS rebinding) every call is refused, from another origin every action, and the console
//! shows the API's reason. The page polls the API every two seconds (`EventSource` cannot send the
//! header). Its plots are hand-written SVG polylines: a few lines of script where a chart
//! library would be a vendored file larger than the whole console.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

const INDEX: &str = include_str!("console/index.html");
const SCRIPT: &str = include_str!("console/console.js");
const STYLE: &str = include_str!("console/console.css");

/// `/`, `/console.js` and `/console.css`.
pub(super) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/",
            get(|| async { file("text/html; charset=utf-8", INDEX) }),
        )
        .route(
            "/console.js",
            get(|| async { file("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/console.css",
            get(|| async { file("text/css; charset=utf-8", STYLE) }),
        )
}

fn file(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            // Its own files only, and no frame of another page around it (its buttons act).
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                 connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
            ),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}

//! A stub of VK 0.1.x for tests that drive the daemon's parts directly (tests/proxy_v01.rs):
//! it answers each route with the exchange recorded on BloopAI VK v0.1.44
//! (tests/fixtures/vk-wire-bloop/samples/rest-*.json: status, content type and body as sent),
//! anything else as 0.1.x does (an unknown GET: the web app's page; another method: 405
//! without a body), and keeps every request it received.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

pub fn recording(name: &str) -> Value {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/vk-wire-bloop/samples/"
    );
    let text = std::fs::read_to_string(format!("{dir}{name}")).expect(name);
    serde_json::from_str(&text).expect(name)
}

/// The recorded `data` of a recording's answer.
pub fn data(name: &str) -> Value {
    recording(name)["response"]["data"].clone()
}

/// One request the stub received: method, path and query, JSON body.
pub type Asked = (String, String, Option<Value>);

/// An answer as recorded: status, content type, body bytes.
#[derive(Debug, Clone)]
pub struct Answer(pub u16, pub Option<String>, pub Vec<u8>);

impl Answer {
    pub fn of(name: &str) -> Answer {
        let r = recording(name);
        let body = match r.get("response") {
            Some(v) => serde_json::to_vec(v).unwrap(),
            None => r["response_text"].as_str().unwrap().as_bytes().to_vec(),
        };
        let kind = r["content_type"].as_str().map(str::to_string);
        Answer(r["status"].as_u64().unwrap() as u16, kind, body)
    }
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        let mut resp = (StatusCode::from_u16(self.0).unwrap(), self.2).into_response();
        let headers = resp.headers_mut();
        headers.remove(header::CONTENT_TYPE);
        if let Some(t) = self.1 {
            headers.insert(header::CONTENT_TYPE, t.parse().unwrap());
        }
        resp
    }
}

/// What the stub serves: (method, path, recording whose answer it gives).
pub type Serve = (String, String, &'static str);

/// The recording `file`, at the route it was recorded on.
pub fn recorded(file: &'static str) -> Serve {
    let request = recording(file)["request"].clone();
    let text = |k: &str| request[k].as_str().unwrap().to_string();
    (text("method"), text("path"), file)
}

/// The recording `file`'s answer at another route (0.1.x answers so on each route of it).
pub fn served_at(method: &str, path: String, file: &'static str) -> Serve {
    (method.to_string(), path, file)
}

/// Answers each route's recordings in turn (the last one again once they run out); anything
/// else as 0.1.x does. Keeps every request. Answers the base URL and the requests.
pub async fn stub(serve: Vec<Serve>) -> (String, Arc<Mutex<Vec<Asked>>>) {
    let mut queues = HashMap::<(String, String), VecDeque<Answer>>::new();
    for (method, path, file) in serve {
        let queue = queues.entry((method, path)).or_default();
        queue.push_back(Answer::of(file));
    }
    let queues = Arc::new(Mutex::new(queues));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let page = Answer::of("rest-err-unknown-api-route.json");
    let kept = asked.clone();
    let app = Router::new().fallback(move |method: Method, uri: Uri, body: Bytes| {
        let path = uri.path_and_query().map_or("", |p| p.as_str()).to_string();
        let json = serde_json::from_slice::<Value>(&body).ok();
        kept.lock()
            .unwrap()
            .push((method.to_string(), path.clone(), json));
        let answer = match queues.lock().unwrap().get_mut(&(method.to_string(), path)) {
            Some(q) if q.len() > 1 => q.pop_front().unwrap(),
            Some(q) => q.front().unwrap().clone(),
            None if method == Method::GET => page.clone(),
            None => Answer(405, None, Vec::new()),
        };
        std::future::ready(answer)
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), asked)
}

//! The stall behind fleet fault seed 40 of tests/fleet_faults.rs (issue 24), on a real
//! `nats-server` and the real host publisher: a session that ends on a refused publish keeps the
//! acknowledgements it received before it, so the next session goes on after them.
//!
//! The publisher chains each publish of a session to the one before (`wire::chain_after`,
//! `Nats-Expected-Last-Msg-Id`); the first publish of a session is unchained. When the stream's
//! last message is not the publisher's own (here, as in the fault schedule's `Duplicates`,
//! another client's copy of a stored batch under a fresh `Nats-Msg-Id`), the next chained
//! publish is refused and the session ends. Where the publisher's cursor was behind the stream
//! (a crash before sled flushed its last records, or acknowledgements not yet recorded), the
//! next session re-publishes the stored batches after the cursor — JetStream drops them as
//! duplicates and acknowledges them — then chains the new batch to the last of them: refused
//! again. Before the fix those acknowledgements were dropped with the session, so every session
//! resumed from the same cursor and was refused the same way: the host's stream never got its
//! next batch (the fault schedule saw the fleet's position stuck below the host's token for
//! 40 s). Played deterministically for both ways (`fleet::Pipelining`), one batch a message;
//! and with packs (`fleet::pack`), where the next session packs differently from the one
//! before, so its first pack overlaps what the stream holds and says so in `Vko-Pack`.

#[allow(dead_code)]
#[path = "support/nats.rs"]
mod nats;

use std::time::{Duration, Instant};

use async_nats::jetstream;
use serde_json::json;
use uuid::Uuid;
use vk_observer_config::FleetSettings;
use vk_observer_fleet::Pipelining;
use vk_observer_fleet::publisher::Publisher;
use vk_observer_fleet::{pack, wire};
use vk_observer_store::events::DomainEvent;
use vk_observer_store::outbox::{FleetCursor, OutboxConfig};
use vk_observer_store::writer::WriterHandle;
use vk_observer_store::{Retention, StoreOwner};

/// How long a publisher may take to publish what the test expects (sessions retry after 200 ms).
const PUBLISHED_WITHIN: Duration = Duration::from_secs(30);

/// The host's committed batch of `token`: its project list grown to `token` projects.
async fn commit(writer: &WriterHandle, token: u64) {
    let projects = (1..=token)
        .map(|n| json!({"id": Uuid::from_u128(n as u128), "name": format!("p{n}")}))
        .collect();
    let applied = writer
        .write(vec![DomainEvent::ProjectsSnapshot { projects }])
        .await
        .unwrap();
    assert_eq!(applied.token, Some(token));
}

/// A publisher of `owner`'s outbox until `cancel`.
fn publisher(
    owner: &StoreOwner,
    url: &str,
    host: &str,
    way: Pipelining,
    cancel: &tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let settings = FleetSettings {
        urls: vec![url.to_owned()],
        host: host.into(),
        ..FleetSettings::default()
    };
    Publisher::new(settings, owner.store(), owner.fleet_cursor())
        .with_pipelining(way)
        .spawn(cancel.child_token())
}

/// Wait until the publisher's cursor is at `token` and the stream holds `tokens`.
async fn published(owner: &StoreOwner, js: &jetstream::Context, host: &str, tokens: &[u64]) {
    let start = Instant::now();
    let want = *tokens.last().unwrap();
    loop {
        let cursor = owner.fleet_cursor().get().map(|c| c.token);
        let stream = nats::tokens_in_order(js, host).await;
        if cursor == Some(want) && stream == tokens {
            return;
        }
        assert!(
            start.elapsed() < PUBLISHED_WITHIN,
            "{host}: the publisher did not publish token {want} within {PUBLISHED_WITHIN:?}: \
             its cursor is at {cursor:?}, the stream holds tokens {stream:?} (want {tokens:?})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A host store with its outbox on, its writer, and batches 1 to 3 committed.
struct HostStore {
    _dir: tempfile::TempDir,
    owner: StoreOwner,
    writer: WriterHandle,
    _writer_task: tokio::task::JoinHandle<()>,
}

async fn host_store() -> HostStore {
    let dir = tempfile::tempdir().unwrap();
    let mut owner = StoreOwner::open(dir.path(), Retention::default()).unwrap();
    owner.enable_outbox(OutboxConfig {
        max_backlog: u64::MAX,
    });
    let (writer, writer_task) = owner.spawn_writer().unwrap();
    for token in 1..=3 {
        commit(&writer, token).await;
    }
    HostStore {
        _dir: dir,
        owner,
        writer,
        _writer_task: writer_task,
    }
}

/// A publisher session of `way` until the stream holds `tokens` (`published`), then stopped.
async fn publish_until(
    owner: &StoreOwner,
    js: &jetstream::Context,
    (url, host): (&str, &str),
    way: Pipelining,
    tokens: &[u64],
) {
    let cancel = tokio_util::sync::CancellationToken::new();
    let running = publisher(owner, url, host, way, &cancel);
    published(owner, js, host, tokens).await;
    cancel.cancel();
    running.await.unwrap();
}

/// What a crash before sled flushed the cursor's last records leaves: the cursor back at
/// token 1 (stream sequence 1) while the stream holds more.
fn cursor_back_to_one(owner: &StoreOwner) {
    let cursor = owner.fleet_cursor().get().unwrap();
    owner
        .fleet_cursor()
        .set(&FleetCursor {
            token: 1,
            meta: 0,
            stream_seq: 1,
            ..cursor
        })
        .unwrap();
}

/// Another client's copy of the stream's message `seq` under a fresh `Nats-Msg-Id`: stored as
/// the stream's last message, so a publish chained to the host's own last one is refused.
async fn foreign_copy(js: &jetstream::Context, host: &str, seq: u64) {
    let stream = js.get_stream(wire::stream_name(host)).await.unwrap();
    let m = stream.get_raw_message(seq).await.unwrap();
    let mut headers = async_nats::HeaderMap::new();
    for (name, values) in m.headers.iter() {
        // Without the host publisher's chain expectation, which would refuse the copy.
        if AsRef::<str>::as_ref(name) != wire::HEADER_EXPECTED_LAST_MSG_ID {
            for value in values {
                headers.append(name.clone(), value.clone());
            }
        }
    }
    headers.insert(wire::HEADER_MSG_ID, format!("{host}.copy.{seq}").as_str());
    let ack = js
        .publish_with_headers(m.subject.clone(), headers, m.payload.clone())
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(!ack.duplicate, "the copy has an id of its own");
}

/// One way: three batches published; the publisher stopped with its cursor back at token 1;
/// a foreign copy stored last; token 4 committed; a new publisher must publish it.
async fn resumes_after_refused_chain(url: &str, host: &str, way: Pipelining) {
    let js = jetstream::new(async_nats::connect(url).await.unwrap());
    let h = host_store().await;
    publish_until(&h.owner, &js, (url, host), way, &[1, 2, 3]).await;

    // The stream holds 1, 2 and 3; the cursor goes back to 1.
    cursor_back_to_one(&h.owner);
    foreign_copy(&js, host, 2).await;
    commit(&h.writer, 4).await;

    // 2 and 3 again are duplicates (not stored); 4, chained to 3, is refused once (the copy is
    // last); the next session resumes after 3 and stores 4 unchained.
    publish_until(&h.owner, &js, (url, host), way, &[1, 2, 3, 2, 4]).await;
}

/// One way on a server of its own.
async fn on_a_server(host: &str, way: Pipelining) {
    let Some(server) = nats::NatsServer::start("fleet publish resume") else {
        return;
    };
    resumes_after_refused_chain(&server.url, host, way).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipelined_publisher_goes_on_after_a_refused_chained_publish() {
    on_a_server("pipelined", Pipelining::unpacked()).await;
}

/// The stream's messages as `(Vko-Token, Vko-Pack)`, in order.
async fn packs_in_order(js: &jetstream::Context, host: &str) -> Vec<(u64, Option<String>)> {
    let stream = js.get_stream(wire::stream_name(host)).await.unwrap();
    let mut out = Vec::new();
    let mut seq = 1;
    while let Ok(m) = stream.get_raw_message(seq).await {
        let token = m
            .headers
            .get(wire::HEADER_TOKEN)
            .unwrap()
            .as_str()
            .parse()
            .unwrap();
        let pack = m
            .headers
            .get(pack::HEADER_PACK)
            .map(|v| v.as_str().to_owned());
        out.push((token, pack));
        seq += 1;
    }
    out
}

/// Packs: three batches waiting go out as one message; after the same crash (cursor back at
/// token 1) and a foreign copy, the next session packs 2, 3 and 4 into one message, which
/// JetStream cannot tell from the one before (its id is 4's) and stores: its `Vko-Pack` names
/// every batch in it, so a fleet node skips 2 and 3, which it applied from the first message
/// (`pack::applied_prefix`), and applies 4. A node follows the stream to the host's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_packing_publisher_resumes_with_a_pack_that_names_its_overlap() {
    let Some(server) = nats::NatsServer::start("fleet publish resume, packs") else {
        return;
    };
    let (url, host) = (server.url.as_str(), "packed");
    let js = jetstream::new(async_nats::connect(url).await.unwrap());
    let h = host_store().await;
    publish_until(&h.owner, &js, (url, host), Pipelining::pipelined(), &[3]).await;
    assert_eq!(
        packs_in_order(&js, host).await,
        [(3, Some("1:0:1,2:0:1,3:0:1".to_owned()))]
    );
    cursor_back_to_one(&h.owner);
    foreign_copy(&js, host, 1).await;
    commit(&h.writer, 4).await;
    publish_until(
        &h.owner,
        &js,
        (url, host),
        Pipelining::pipelined(),
        &[3, 3, 4],
    )
    .await;
    let stream = packs_in_order(&js, host).await;
    assert_eq!(stream[2], (4, Some("2:0:1,3:0:1,4:0:1".to_owned())));

    // A fleet node reads the three messages to the host's token, its projects those of 4.
    let node_dir = tempfile::tempdir().unwrap();
    let mut node_owner = StoreOwner::open(node_dir.path(), Retention::default()).unwrap();
    let (node_writer, _node_task) = node_owner.spawn_writer().unwrap();
    let cancel = tokio_util::sync::CancellationToken::new();
    let settings = FleetSettings {
        urls: vec![url.to_owned()],
        host: "node".into(),
        ..FleetSettings::default()
    };
    let events = std::sync::Arc::new(vk_observer_fleet::node::Unheard);
    let node =
        vk_observer_fleet::node::Node::new(settings, node_owner.store(), node_writer, events);
    let _node = node.spawn(cancel.child_token());
    let start = Instant::now();
    loop {
        let positions = node_owner
            .store()
            .read()
            .fleet_positions()
            .unwrap_or_default();
        let at = positions
            .iter()
            .find(|(h, _)| h == host)
            .map(|(_, p)| p.token);
        if at == Some(4) {
            break;
        }
        assert!(
            start.elapsed() < PUBLISHED_WITHIN,
            "the node is at {at:?}, not 4"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let projects = node_owner.store().read().projects().unwrap();
    assert_eq!(projects.len(), 4, "the host's four projects, each once");
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_serial_publisher_goes_on_after_a_refused_chained_publish() {
    on_a_server("serial", Pipelining::serial()).await;
}

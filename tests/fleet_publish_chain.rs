//! The race behind fault seed 6 of tests/fleet_faults.rs (issue 24), on a real `nats-server`: a
//! host publisher keeps several publishes in flight; one of them is not stored while a later one
//! is — seed 6 lost one in a `nats-server` restart (its acknowledgement timed out, a later publish
//! went out on the reconnected client); here, deterministically, JetStream refuses one (its stream
//! full, `discard: new`) and stores a later one (room came back in between). The next session
//! publishes the refused batch again from the acknowledged cursor, so it lands in the stream
//! *after* the later one — where the fleet node, which applies a host's batches by rising token,
//! skips it as already applied: the fleet's position reaches the host's token with that batch's
//! facts missing. Chaining each publish to the one before it (`wire::chain_after`,
//! `Nats-Expected-Last-Msg-Id`) makes JetStream refuse every publish behind a refused one, so the
//! stream keeps the host's order. Checked here on the wire itself, with the unchained way beside
//! it showing the race.

#[allow(dead_code)]
#[path = "support/nats.rs"]
mod nats;

use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use vk_observer_fleet::wire::{self, Kind};

const EPOCH: u64 = 7;

/// A host stream that holds one message and refuses the next (`discard: new`).
async fn full_after_one(js: &jetstream::Context, host: &str) -> stream::Config {
    let config = stream::Config {
        name: wire::stream_name(host),
        subjects: wire::stream_subjects(host),
        max_messages: 1,
        discard: stream::DiscardPolicy::New,
        ..Default::default()
    };
    js.create_stream(config.clone()).await.unwrap();
    config
}

/// Room again, as when an operator lifts the limit (tests/fleet_faults.rs' PublishRefused).
async fn room_again(js: &jetstream::Context, mut config: stream::Config) {
    config.max_messages = -1;
    config.discard = stream::DiscardPolicy::Old;
    js.update_stream(&config).await.unwrap();
}

/// Publish the batch of `token`, chained to `previous` when given; whether JetStream stored it
/// (or dropped it as a duplicate: `Some(true)`), and its id.
async fn publish(
    js: &jetstream::Context,
    host: &str,
    token: u64,
    previous: Option<&str>,
) -> (Result<bool, String>, String) {
    let mut headers = wire::batch_headers(host, EPOCH, token, 0);
    let id = wire::chain_after(&mut headers, previous);
    let ack = js
        .publish_with_headers(
            wire::subject(host, Kind::Batch),
            headers,
            Bytes::from(format!("[{token}]")),
        )
        .await
        .unwrap()
        .await;
    (ack.map(|a| a.duplicate).map_err(|e| e.to_string()), id)
}

#[tokio::test]
async fn a_publish_behind_a_refused_one_is_refused_so_the_stream_keeps_the_hosts_order() {
    let Some(server) = nats::NatsServer::start("fleet publish chain") else {
        return;
    };
    let js = jetstream::new(async_nats::connect(&server.url).await.unwrap());

    // Unchained (the race): 1 stored, 2 refused (full), room again, 3 stored; the next session
    // resumes after 1 and publishes 2 again, then 3 (a duplicate, dropped).
    let config = full_after_one(&js, "loose").await;
    assert!(publish(&js, "loose", 1, None).await.0.is_ok());
    assert!(
        publish(&js, "loose", 2, None).await.0.is_err(),
        "the stream is full"
    );
    room_again(&js, config).await;
    assert!(publish(&js, "loose", 3, None).await.0.is_ok());
    assert!(publish(&js, "loose", 2, None).await.0.is_ok());
    assert_eq!(publish(&js, "loose", 3, None).await.0, Ok(true));
    assert_eq!(
        nats::tokens_in_order(&js, "loose").await,
        [1, 3, 2],
        "without the chain, the refused batch lands after a later one (the fleet skips it)"
    );

    // Chained: the same schedule. 3 is refused because 2, which it follows, is not the
    // stream's last message; the next session resumes after 1 (its first publish unchained).
    let config = full_after_one(&js, "h").await;
    let (stored, one) = publish(&js, "h", 1, None).await;
    assert_eq!(stored, Ok(false));
    let (refused, two) = publish(&js, "h", 2, Some(&one)).await;
    assert!(refused.is_err(), "the stream is full");
    room_again(&js, config).await;
    let (behind, _) = publish(&js, "h", 3, Some(&two)).await;
    assert!(
        behind.as_ref().is_err_and(|e| e.contains("last msg")),
        "a publish behind a refused one was not refused: {behind:?}"
    );
    let (again, two) = publish(&js, "h", 2, None).await;
    assert_eq!(again, Ok(false));
    let (three, three_id) = publish(&js, "h", 3, Some(&two)).await;
    assert_eq!(three, Ok(false));
    assert_eq!(nats::tokens_in_order(&js, "h").await, [1, 2, 3]);

    // A session that lost its acknowledgements publishes stored batches again, chained: each is
    // dropped as a duplicate (JetStream checks the id before the chain), and the next new batch,
    // chained to the last of them, is stored.
    let (dup, two) = publish(&js, "h", 2, Some(&one)).await;
    assert_eq!(
        dup,
        Ok(true),
        "a re-publish behind the stream's last is a duplicate"
    );
    let (dup, three) = publish(&js, "h", 3, Some(&two)).await;
    assert_eq!(dup, Ok(true));
    assert_eq!(three, three_id);
    let (four, _) = publish(&js, "h", 4, Some(&three)).await;
    assert_eq!(four, Ok(false));
    assert_eq!(nats::tokens_in_order(&js, "h").await, [1, 2, 3, 4]);
}

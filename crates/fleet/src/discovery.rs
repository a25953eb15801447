//! How a fleet node finds host streams (design-notes §23): by name from the JetStream API's
//! stream names, each stream's creation time and last sequence asked of it apart, and at once
//! when a host says its stream is ready.
//!
//! The names come from the cluster's assignments and answer at once. The stream list
//! (`$JS.API.STREAM.LIST`) gathers every stream's info from its leader instead, and on a
//! cluster where a stream is being created or is electing a leader it waits for the missing
//! infos (about 4 s with nats-server 2.15.1) and then leaves those streams out: a node starting
//! beside new hosts saw no stream for 4 s, and a node discovering during an election stopped
//! the followers of the streams left out. Here a stream whose info is late is still listed,
//! without it.
//!
//! A host's publisher, once its stream is ready, says so on core NATS (`vko.<host>.stream`,
//! never stored: not a stream subject); the node listens and looks again at once instead of
//! at its next periodic discovery (up to [`DISCOVER_EVERY`](super::node) later). A node or a
//! host without this (an older version) is served by the periodic discovery as before.

use std::collections::HashMap;
use std::time::Duration;

use async_nats::jetstream;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

use super::wire;
use vk_observer_config::is_subject_token;

/// How long discovery waits for one stream's info before listing it without.
const INFO_WITHIN: Duration = Duration::from_secs(1);

/// Every host's announcements, for a fleet node.
const ALL_ANNOUNCEMENTS: &str = "vko.*.stream";

/// The subject a host's publisher says its stream is ready on.
fn announcement_subject(host: &str) -> String {
    format!("vko.{host}.stream")
}

/// A host stream as discovery lists it.
pub(crate) struct HostStream {
    /// Its creation time and last sequence, when its info came within [`INFO_WITHIN`].
    pub(crate) at: Option<StreamAt>,
}

/// What a stream's info said.
pub(crate) struct StreamAt {
    pub(crate) created: String,
    pub(crate) last_seq: u64,
}

/// Every host stream (`VKO_<host>`) by host, asked for its info concurrently.
pub(crate) async fn host_streams(
    js: &jetstream::Context,
) -> anyhow::Result<HashMap<String, HostStream>> {
    let names: Vec<String> = js.stream_names().try_collect().await?;
    let hosts = names.into_iter().filter_map(|name| {
        let host = name.strip_prefix(wire::STREAM_PREFIX)?;
        is_subject_token(host).then(|| (host.to_owned(), name.clone()))
    });
    let asked = hosts.map(|(host, name)| async move {
        let at = match tokio::time::timeout(INFO_WITHIN, js.get_stream(&name)).await {
            Ok(Ok(stream)) => {
                let info = stream.cached_info();
                Some(StreamAt {
                    created: info.created.to_string(),
                    last_seq: info.state.last_sequence,
                })
            }
            Ok(Err(e)) => {
                tracing::debug!(stream = %name, error = %e, "fleet stream info refused; listed without it");
                None
            }
            Err(_) => {
                tracing::debug!(stream = %name, "fleet stream info late; listed without it");
                None
            }
        };
        (host, HostStream { at })
    });
    Ok(futures::future::join_all(asked).await.into_iter().collect())
}

/// Say on core NATS that `host`'s stream is ready to be followed (an empty message: the node
/// reads the stream itself). Not sent is not lost: the node's periodic discovery finds the
/// stream anyway.
pub(crate) async fn announce(client: &async_nats::Client, host: &str) {
    if let Err(e) = client
        .publish(announcement_subject(host), Bytes::new())
        .await
    {
        tracing::debug!(host, error = %e, "fleet stream announcement not sent");
    }
}

/// Every host's announcements, as a stream of wake-ups (the host they name is not trusted:
/// discovery reads the streams themselves).
pub(crate) async fn announcements(
    client: &async_nats::Client,
) -> anyhow::Result<impl futures::Stream<Item = ()> + Unpin + use<>> {
    Ok(client.subscribe(ALL_ANNOUNCEMENTS).await?.map(|_| ()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announcement_is_core_nats_outside_the_stream() {
        let subject = announcement_subject("build-box");
        assert!(!wire::stream_subjects("build-box").contains(&subject));
        assert!(
            subject.starts_with("vko.build-box."),
            "under the host's own subjects"
        );
    }
}

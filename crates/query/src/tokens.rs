//! The tokens a daemon answers and the `since_token`s it is given: a host daemon's
//! `<epoch>.<n>` (`store::token`), a fleet node's places in its hosts' streams (`fleet_token`).
//! Every token a read prints and every token it judges goes through here.

use std::collections::BTreeMap;

use vk_observer_store::StoreReader;
use vk_observer_store::token::{Token, TokenCheck};
use vk_observer_tool_error::ToolError;

use super::fleet_token::{self, Cut, Judged};
use super::{Query, Since};

impl Query {
    /// The store's current token as the opaque string clients pass back.
    pub fn token(&self) -> String {
        self.token_at(self.store.current_token())
    }

    /// Local token `t` as clients see it: on a fleet node, every host's place as of `t`.
    pub fn token_at(&self, t: u64) -> String {
        self.token_printer()(t)
    }

    /// Prints local tokens as [`Query::token_at`] does, reading a fleet node's hosts once: for
    /// an answer that prints many (a feed page's items, a batch of statuses).
    pub(crate) fn token_printer(&self) -> impl Fn(u64) -> String + '_ {
        let fleet = self.fleet_tokens.then(|| {
            let reader = self.read();
            let hosts = fleet_hosts(&reader);
            (reader, hosts)
        });
        move |t| match &fleet {
            None => Token {
                epoch: self.store.epoch(),
                seq: t,
            }
            .to_string(),
            Some((reader, hosts)) => {
                fleet_token::print(&reader.fleet_marks_at(t, hosts).unwrap_or_default())
            }
        }
    }

    /// Local token `t` as the token of an answer read after `since`: on a fleet node, also
    /// every place the client had seen, where this node's is older (never a step back).
    pub(crate) fn token_after(&self, since: &Since, t: u64) -> String {
        match since.cut() {
            Some(cut) if self.fleet_tokens => {
                let reader = self.read();
                let mine = reader
                    .fleet_marks_at(t, &fleet_hosts(&reader))
                    .unwrap_or_default();
                fleet_token::print(&fleet_token::merge(cut.marks(), mine))
            }
            _ => self.token_at(t),
        }
    }

    /// Judge a `since_token` argument; a string that is not a token is an invalid argument.
    pub fn since(&self, token: Option<&str>, field: &str) -> Result<Since, ToolError> {
        let Some(raw) = token else {
            return Ok(Since::None);
        };
        if self.fleet_tokens {
            return self.fleet_since(raw, field);
        }
        if raw.starts_with(fleet_token::PREFIX) {
            return Err(fleet_token::foreign(field, "a fleet node's token"));
        }
        let t = Token::parse(raw).map_err(|e| {
            ToolError::invalid_field(
                field,
                format!(
                    "{e}. Pass the `token` string from a previous response, or omit `{field}`."
                ),
            )
        })?;
        Ok(
            match t.check(self.store.epoch(), self.store.current_token()) {
                TokenCheck::Valid(n) => Since::After(Cut::local(n)),
                TokenCheck::Stale => Since::Reset,
            },
        )
    }

    fn fleet_since(&self, raw: &str, field: &str) -> Result<Since, ToolError> {
        let reader = self.read();
        let applied: BTreeMap<String, (String, u64)> = reader
            .fleet_positions()
            .map_err(ToolError::internal)?
            .into_iter()
            .map(|(host, p)| (host, (p.stream_created, p.stream_seq)))
            .collect();
        Ok(match fleet_token::judge(raw, field, reader, &applied)? {
            Judged::Cut(cut) => Since::After(cut),
            Judged::Reset => Since::Reset,
        })
    }
}

/// The hosts a fleet node follows (those it holds a position for).
fn fleet_hosts(reader: &StoreReader) -> Vec<String> {
    reader
        .fleet_positions()
        .unwrap_or_default()
        .into_iter()
        .map(|(host, _)| host)
        .collect()
}

//! Which fleet hosts own a mutation's target (a fleet node, design-notes §23): every host that
//! reports its attempt or task (one, unless a copied VK database gave the id to several), or
//! every host a project lives on (every host that lists it, and its tasks'). Read from the fleet
//! node's cache, where every project, task and attempt names its hosts.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::Query;
use super::owner::Owner;
use vk_observer_store::StoreReader;
use vk_observer_store::events::{HOST_FIELD, HOSTS_FIELD};
use vk_observer_tool_error::ToolError;

/// A mutation's target as the fleet node's cache places it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owning {
    pub owner: Owner,
    /// The hosts it lives on, sorted: one or more (a mutation without `host` needs exactly one).
    pub hosts: Vec<String>,
}

impl Query {
    /// The owner and hosts of the target a mutation's arguments name; None when they name
    /// none the cache holds.
    pub fn owning_hosts(&self, args: &Map<String, Value>) -> Result<Option<Owning>, ToolError> {
        let Some(owner) = self.owner_of(args)? else {
            return Ok(None);
        };
        let reader = self.read();
        let mut hosts = BTreeSet::new();
        if let Some(attempt) = owner.attempt {
            hosts.extend(row_hosts(reader.attempt(attempt)?.map(|a| a.value)));
        } else if let Some(task) = owner.task {
            hosts.extend(row_hosts(reader.task(task)?.map(|t| t.value)));
        } else {
            hosts.extend(project_hosts(&reader, owner.project)?);
        }
        Ok(Some(Owning {
            owner,
            hosts: hosts.into_iter().collect(),
        }))
    }

    /// Every host name this fleet node knows (it follows or heard from), sorted.
    pub fn fleet_host_names(&self) -> Vec<String> {
        self.health
            .fleet_hosts()
            .into_iter()
            .map(|(h, _)| h)
            .collect()
    }
}

/// The hosts that list a project, from its row's `hosts` (a fleet node's; empty elsewhere).
pub(crate) fn listing_hosts(row: Option<&Value>) -> Vec<String> {
    let listed = row.and_then(|r| r.get(HOSTS_FIELD)?.as_array());
    listed
        .into_iter()
        .flatten()
        .filter_map(|h| h.as_str().map(str::to_owned))
        .collect()
}

fn host(value: Option<Value>) -> Option<String> {
    value?.get(HOST_FIELD)?.as_str().map(str::to_owned)
}

/// Every host a row names: its `hosts` and its `host` (a row written before `hosts` was kept
/// names only `host`).
fn row_hosts(value: Option<Value>) -> BTreeSet<String> {
    let mut hosts: BTreeSet<String> = listing_hosts(value.as_ref()).into_iter().collect();
    hosts.extend(host(value));
    hosts
}

/// A project's hosts: every host that lists it (its row's `hosts`, or `host` for a row written
/// before `hosts` was kept) and those of its tasks.
fn project_hosts(reader: &StoreReader, project: uuid::Uuid) -> Result<Vec<String>, ToolError> {
    let mut hosts = BTreeSet::new();
    hosts.extend(row_hosts(reader.project(project)?.map(|p| p.value)));
    for task in reader.tasks_of_project(project)? {
        hosts.extend(row_hosts(Some(task.value)));
    }
    Ok(hosts.into_iter().collect())
}

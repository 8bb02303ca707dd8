//! The admin-only trail of decisions: an events.k8s.io/v1 Event in kube-system, plus a log
//! line. The exact cause lives only here, in logs and in metric labels, never in the CSR
//! (P1, hidden flavor).
//!
//! The Events are about cluster-scoped objects (CSRs), and the API server accepts those
//! only in `default` or `kube-system` (422 elsewhere, even for an admin). kube-system it
//! is: cluster admins read it, while no bootstrap token, node or ordinary namespace viewer
//! can (the `default` namespace is often readable by every developer).

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;

/// Where the trail's Events live (see the module documentation).
pub const TRAIL_NAMESPACE: &str = "kube-system";

/// What the Event is about.
pub struct Regarding<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
    pub uid: Option<&'a str>,
}

/// An Event of the trail: `reporting` (controller, instance) says who writes it; `what` is
/// (type, action, reason).
pub fn event(
    reporting_controller: &str,
    reporting_instance: &str,
    regarding: Regarding<'_>,
    what: (&str, &str, &str),
    note: &str,
) -> Event {
    let (type_, action, reason) = what;
    let now = jiff::Timestamp::now();
    let suffix = format!("{:x}", now.as_nanosecond() as u64 ^ rand_u64());
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{suffix}", name_part(regarding.name))),
            namespace: Some(TRAIL_NAMESPACE.to_string()),
            ..ObjectMeta::default()
        },
        // MicroTime: exactly 6 fractional digits or the API server answers 400; k8s-openapi
        // writes them.
        event_time: Some(MicroTime(now)),
        reporting_controller: Some(reporting_controller.into()),
        reporting_instance: Some(reporting_instance.into()),
        action: Some(action.into()),
        reason: Some(reason.into()),
        type_: Some(type_.into()),
        // The API server limits note to 1 kB.
        note: Some(note.chars().take(1000).collect()),
        regarding: Some(ObjectReference {
            api_version: Some(regarding.api_version.into()),
            kind: Some(regarding.kind.into()),
            name: Some(regarding.name.into()),
            uid: regarding.uid.map(str::to_string),
            ..ObjectReference::default()
        }),
        ..Event::default()
    }
}

/// Creates the Event in the trail's namespace; a failure is logged, never fatal.
pub async fn post(client: &kube::Client, event: &Event) {
    let api: Api<Event> = Api::namespaced(client.clone(), TRAIL_NAMESPACE);
    if let Err(e) = api.create(&PostParams::default(), event).await {
        tracing::warn!(error = %e, reason = event.reason.as_deref().unwrap_or_default(), "could not record an Event (the log line has the same facts)");
    }
}

/// The part of an Event's name taken from what it is about: Event names must be DNS
/// subdomains (dot-separated labels of lower-case alphanumerics and `-`, each starting and
/// ending with an alphanumeric), and some objects' names are not (kubeadm's
/// `kubeadm:node-autoapprove-bootstrap`): other characters become `-`, and the part is cut
/// so the whole name stays within 253 characters. A valid name is kept as it is.
fn name_part(name: &str) -> String {
    let mapped: String = name
        .chars()
        .take(200)
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '.' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect();
    let labels: Vec<&str> = mapped
        .split('.')
        .map(|l| l.trim_matches('-'))
        .filter(|l| !l.is_empty())
        .collect();
    match labels.join(".") {
        part if part.is_empty() => "x".to_string(),
        part => part,
    }
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_are_dns_subdomains_whatever_they_are_about() {
        assert_eq!(name_part("csr-abc.1"), "csr-abc.1", "valid names are kept");
        assert_eq!(
            name_part("kubeadm:node-autoapprove-bootstrap"),
            "kubeadm-node-autoapprove-bootstrap"
        );
        assert_eq!(name_part(":A-:.b"), "a.b");
        assert_eq!(name_part("::"), "x");
        assert_eq!(name_part(&"y".repeat(300)).len(), 200);
    }
}

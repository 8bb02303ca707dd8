//! The `coordination.k8s.io/v1` Lease the controller's replicas compete for: read it, create
//! it held, renew it, take it over, release it. Each write after a read is a PUT of the
//! Lease as read, so its resourceVersion makes the write fail with 409 Conflict if anyone
//! wrote in between: the optimistic lock of the election. When to make which write (the
//! rounds, the timing) is the controller's.
//!
//! Lease times are MicroTime: the API server requires exactly 6 fractional digits (`.123Z`
//! or no fraction is a 400); k8s-openapi's `MicroTime` serialises with `%.6f`, checked by a
//! test below.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};

/// Who holds the Lease, and for how long each renewal keeps it.
#[derive(Clone, Debug)]
pub struct Holder {
    pub identity: String,
    pub lease_duration: Duration,
}

impl Holder {
    /// The Lease's spec held by this holder from now, acquired at `acquire_time` (now when
    /// `None`), after `transitions` changes of holder.
    fn spec_now(&self, acquire_time: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.lease_duration.as_secs().max(1) as i32),
            acquire_time: Some(acquire_time.unwrap_or_else(|| now.clone())),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }
}

/// One Lease, by namespace and name.
pub struct NamedLease {
    api: Api<Lease>,
    namespace: String,
    name: String,
}

impl NamedLease {
    pub fn new(client: Client, namespace: &str, name: &str) -> Self {
        NamedLease {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// The Lease as the API server has it now, if it exists.
    pub async fn get(&self) -> Result<Option<Lease>, kube::Error> {
        self.api.get_opt(&self.name).await
    }

    /// Creates the Lease, held by `holder` (AlreadyExists if another candidate was first).
    pub async fn create(&self, holder: &Holder) -> Result<Lease, kube::Error> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(holder.spec_now(None, 0)),
        };
        self.api.create(&PostParams::default(), &lease).await
    }

    /// Renews the Lease read as `lease` for `holder`, or takes it over (a new acquire time,
    /// one more transition).
    pub async fn hold(
        &self,
        mut lease: Lease,
        holder: &Holder,
        take_over: bool,
    ) -> Result<Lease, kube::Error> {
        let old = lease.spec.take().unwrap_or_default();
        let transitions = old.lease_transitions.unwrap_or(0);
        lease.spec = Some(if take_over {
            holder.spec_now(None, transitions + 1)
        } else {
            holder.spec_now(old.acquire_time, transitions)
        });
        self.replace(&lease).await
    }

    /// Clears the holder of the Lease read as `lease`, with a lease of one second, so a
    /// standby takes over at its next round instead of waiting for expiry.
    pub async fn release(&self, mut lease: Lease) -> Result<Lease, kube::Error> {
        let mut spec = lease.spec.take().unwrap_or_default();
        spec.holder_identity = None;
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        spec.lease_duration_seconds = Some(1);
        lease.spec = Some(spec);
        self.replace(&lease).await
    }

    /// PUTs `lease` with the resourceVersion it was read at.
    async fn replace(&self, lease: &Lease) -> Result<Lease, kube::Error> {
        self.api
            .replace(&self.name, &PostParams::default(), lease)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_time_has_exactly_six_fractional_digits() {
        // `.123Z` or no fraction is a 400 from the real API server.
        for ts in [
            "2026-11-30T04:27:03Z",
            "2026-11-30T04:27:03.123Z",
            "2026-11-30T04:27:03.123456789Z",
        ] {
            let t: Timestamp = ts.parse().unwrap();
            let json = serde_json::to_value(MicroTime(t)).unwrap();
            let s = json.as_str().unwrap();
            let frac = s.split('.').nth(1).expect("a fraction");
            assert_eq!(frac.len(), 7, "{s}: six digits and Z");
            assert!(frac.ends_with('Z') && frac[..6].chars().all(|c| c.is_ascii_digit()));
        }
    }
}

//! The connections a TLS server of kubeflavor (the authorization webhook, the join-token
//! API) closed before serving them, counted by each server in its own registry under one
//! family name, `kubeflavor_tls_connections_dropped_total{server,reason}`, so one alert and
//! one panel watch both for a flood. The connection layer reports them
//! (`kubeflavor_cluster::ops::connection::DropCounter`); it registers nothing itself.

use kubeflavor_cluster::ops::connection::{DropCounter, Dropped};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DroppedLabels {
    /// Which server: `authz` (the authorization webhook) or `serve` (the join-token API).
    server: &'static str,
    /// `Dropped::as_str`: pushed_out, handshake_timeout, no_slot.
    reason: &'static str,
}

/// One server's count; clones share it.
#[derive(Clone, Debug)]
pub struct DroppedConnections {
    server: &'static str,
    family: Family<DroppedLabels, Counter>,
}

impl DroppedConnections {
    /// The count of `server`, every reason at 0 from the start: an alert's `increase()`
    /// sees no increase in a series whose first sample is already above 0.
    pub fn new(server: &'static str) -> DroppedConnections {
        let family = Family::<DroppedLabels, Counter>::default();
        for why in Dropped::ALL {
            let _ = family.get_or_create(&DroppedLabels {
                server,
                reason: why.as_str(),
            });
        }
        DroppedConnections { server, family }
    }

    /// Registers the family in `r`, which must carry the `kubeflavor` prefix alone.
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "tls_connections_dropped",
            "TLS connections closed before they were served, by server (authz, serve) and reason: pushed_out (a newer connection took its place among the pending handshakes), handshake_timeout, no_slot (its handshake was accepted but no connection slot came free in time)",
            self.family.clone(),
        );
    }
}

impl DropCounter for DroppedConnections {
    fn dropped(&self, why: Dropped) {
        self.family
            .get_or_create(&DroppedLabels {
                server: self.server,
                reason: why.as_str(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(d: &DroppedConnections) -> String {
        let mut r = Registry::with_prefix("kubeflavor");
        d.register(&mut r);
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &r);
        out
    }

    #[test]
    fn each_reason_is_exposed_from_the_start_and_counted_for_its_server() {
        let d = DroppedConnections::new("authz");
        let text = render(&d);
        for why in Dropped::ALL {
            let line = format!(
                "kubeflavor_tls_connections_dropped_total{{server=\"authz\",reason=\"{}\"}} 0",
                why.as_str()
            );
            assert!(text.contains(&line), "{line} missing from\n{text}");
        }
        d.dropped(Dropped::PushedOut);
        d.dropped(Dropped::PushedOut);
        d.dropped(Dropped::NoSlot);
        let text = render(&d);
        assert!(text.contains(
            "kubeflavor_tls_connections_dropped_total{server=\"authz\",reason=\"pushed_out\"} 2"
        ));
        assert!(text.contains(
            "kubeflavor_tls_connections_dropped_total{server=\"authz\",reason=\"no_slot\"} 1"
        ));
    }
}

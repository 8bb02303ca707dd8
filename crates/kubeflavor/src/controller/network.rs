//! Where each node is on the network (P9, observed is not claimed): the owner's Sites, as
//! watched, built into core's map (`kubeflavor_core::network::Sites`), and per node name
//! with a NodeReport the report's version, observed site and whether its claims contradict
//! the observation (a few dozen bytes a node; the report itself is read when its node is
//! reconciled). The node loop reads the placement from here (`placement`) and writes the
//! report's status and the Event of a contradicting claim (`after_reconcile`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use kube::ResourceExt;
use kube::api::PatchParams;
use kube::runtime::reflector::Store;
use kubeflavor_cluster::crd::Condition;
use kubeflavor_cluster::crd::network::{
    CONDITION_CLAIM_CONSISTENT, ClaimReading, NodeReport, NodeReportStatus, Site,
};
use kubeflavor_cluster::node_reports;
use kubeflavor_cluster::ops::trail::Regarding;
use kubeflavor_core::network::{ClaimVerdict, NetworkPlacement, Sites, placement};
use serde_json::json;

use super::{Context, Error, Step};

/// What the node loop knows of one report between reconciles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ReportEntry {
    resource_version: String,
    site: Option<String>,
    contradicts: bool,
}

/// The Sites as core reads them, and the reports' index.
#[derive(Default)]
pub struct Network {
    sites: RwLock<(Arc<Sites>, u64)>,
    reports: Mutex<HashMap<String, ReportEntry>>,
}

impl Network {
    /// Builds the map again from every Site in `store` (after a Site changed); what does
    /// not read is logged. Returns the names with a report, all of which need a look.
    pub fn sites_changed(&self, store: &Store<Site>) -> Vec<String> {
        let sites = store.state();
        let (map, problems) = Sites::build(sites.iter().map(|s| s.entry()));
        for problem in problems {
            tracing::warn!(error = %problem, "a Site is left out of the site map (fix the Site: kubectl get sites)");
        }
        {
            let mut slot = self.sites.write().unwrap_or_else(|e| e.into_inner());
            if *slot.0 == map {
                return Vec::new();
            }
            slot.1 += 1;
            slot.0 = Arc::new(map);
        }
        self.lock().keys().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, ReportEntry>> {
        self.reports.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A report was listed or changed; whether its node needs a look.
    pub fn report(&self, report: &NodeReport) -> bool {
        let rv = report.resource_version().unwrap_or_default();
        let mut reports = self.lock();
        let entry = reports.entry(report.name_any()).or_default();
        let changed = entry.resource_version != rv;
        entry.resource_version = rv;
        changed
    }

    /// A report was deleted: its node needs a look (its observed labels go).
    pub fn report_gone(&self, name: &str) {
        self.lock().remove(name);
    }

    /// Whether the node `name` has a report.
    pub fn has_report(&self, name: &str) -> bool {
        self.lock().contains_key(name)
    }

    /// What of the network a node's labels depend on: its report's version and the site
    /// map's.
    pub fn version(&self, name: &str) -> String {
        let sites = self.sites.read().unwrap_or_else(|e| e.into_inner()).1;
        let report = self
            .lock()
            .get(name)
            .map(|e| e.resource_version.clone())
            .unwrap_or_default();
        format!("{sites}/{report}")
    }

    /// The placement of a node whose report (if any) is `report`.
    pub fn placement(&self, report: Option<&NodeReport>) -> NetworkPlacement {
        let Some(report) = report else {
            return NetworkPlacement::default();
        };
        let sites = self
            .sites
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone();
        let mut placement = placement(&sites, report.observed_address(), Some(&report.claim()));
        // What connecting back to the node showed, beside the site it was observed on.
        if let (Some(_), Some((verdict, round_trip))) = (&placement.site, report.probe()) {
            placement
                .labels
                .extend(kubeflavor_core::network::probe::labels(verdict, round_trip));
        }
        placement
    }

    fn note(&self, name: &str, placement: &NetworkPlacement) {
        if let Some(entry) = self.lock().get_mut(name) {
            entry.site = placement.site.clone();
            entry.contradicts = matches!(placement.verdict, Some(ClaimVerdict::Contradicts { .. }));
        }
    }

    /// Nodes per observed site (nodes with a report not yet observed are not counted).
    pub fn nodes_per_site(&self) -> BTreeMap<String, i64> {
        let mut counts = BTreeMap::new();
        for entry in self.lock().values() {
            if let Some(site) = &entry.site {
                *counts.entry(site.clone()).or_insert(0) += 1;
            }
        }
        counts
    }

    /// Nodes whose claims contradict what was observed.
    pub fn contradicting(&self) -> usize {
        self.lock().values().filter(|e| e.contradicts).count()
    }
}

/// The report's status after the controller's reading of `placement` (the observation,
/// the join-token API's, is kept as it is).
fn status_after(report: &NodeReport, placement: &NetworkPlacement) -> NodeReportStatus {
    let mut status = report.status.clone().unwrap_or_default();
    status.site = placement.site.clone();
    let (reading, condition) = match &placement.verdict {
        None => (None, None),
        Some(ClaimVerdict::Consistent) => (
            Some(ClaimReading {
                verdict: "Consistent".into(),
                message: String::new(),
            }),
            Some((
                true,
                "Consistent",
                "the node's claims agree with the site it was observed on".to_string(),
            )),
        ),
        Some(ClaimVerdict::Contradicts {
            claimed_site,
            observed_site,
            what,
        }) => {
            let message = format!(
                "the node claims {what}, on site {claimed_site}, but was observed on site {observed_site}: its claims are not copied to the Node"
            );
            (
                Some(ClaimReading {
                    verdict: "Contradicts".into(),
                    message: message.clone(),
                }),
                Some((false, "Contradicts", message)),
            )
        }
    };
    status.claim = reading;
    let previous = std::mem::take(&mut status.conditions);
    status.conditions = previous
        .iter()
        .filter(|c| c.type_ != CONDITION_CLAIM_CONSISTENT)
        .cloned()
        .collect();
    if let Some((ok, reason, message)) = condition {
        status.conditions.push(Condition::after(
            CONDITION_CLAIM_CONSISTENT,
            ok,
            reason,
            &message,
            &previous,
        ));
    }
    status
}

/// After a reconcile of a node with a report: the report's status says the site and the
/// reading of its claims (written only when it differs), and a claim that newly contradicts
/// the observation gets a Warning Event on the Node and a count.
pub async fn after_reconcile(
    ctx: &Context,
    report: &NodeReport,
    placement: &NetworkPlacement,
    node_uid: Option<&str>,
) -> Result<(), Error> {
    let name = report.name_any();
    ctx.network.note(&name, placement);
    let status = status_after(report, placement);
    if report.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let was_contradicting = report
        .status
        .as_ref()
        .and_then(|s| s.claim.as_ref())
        .is_some_and(|c| c.verdict == "Contradicts");
    let patch = json!({"status": {
        "site": status.site,
        "claim": status.claim,
        "conditions": status.conditions,
    }});
    let written = async {
        node_reports::patch_status(&ctx.client, &name, &PatchParams::default(), &patch)
            .await
            .map_err(|source| Error::ReportStatus {
                node: name.clone(),
                source,
            })
    };
    match ctx.write(&name, Step::StatusWritten, written).await {
        Ok(_) => {}
        // Deleted meanwhile: its watch event brings the node back without it.
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(e),
    }
    if let (Some(ClaimVerdict::Contradicts { .. }), false) = (&placement.verdict, was_contradicting)
    {
        ctx.metrics.contradicted_claims.inc();
        let message = status.claim.map(|c| c.message).unwrap_or_default();
        tracing::warn!(node = %name, "{message}");
        let regarding = Regarding {
            api_version: "v1",
            kind: "Node",
            name: &name,
            uid: node_uid,
        };
        ctx.record(
            regarding,
            ("Warning", "Observe", "ClaimContradicted"),
            &format!("Node {name}: {message}"),
        )
        .await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflavor_core::network::SiteEntry;

    fn report(observed: &str, prefix: &str) -> NodeReport {
        serde_json::from_value(json!({
            "apiVersion": "kubeflavor.io/v1alpha1", "kind": "NodeReport",
            "metadata": {"name": "n1", "resourceVersion": "3"},
            "spec": {"interfaces": [{"name": "eth0", "addresses": [prefix]}]},
            "status": {"observed": {"address": observed, "method": "tls-client-certificate",
                                    "observer": "serve-0", "at": "2026-12-03T00:00:00Z"}},
        }))
        .unwrap()
    }

    fn lyon_paris() -> Sites {
        let lyon = ["10.20.0.0/16".to_string()];
        let paris = ["10.30.0.0/16".to_string()];
        Sites::build([
            SiteEntry::new("lyon", &lyon),
            SiteEntry::new("paris", &paris),
        ])
        .0
    }

    #[test]
    fn the_status_says_the_site_and_a_contradiction_and_is_stable() {
        let sites = lyon_paris();
        let liar = report("10.20.0.9", "10.30.0.9/24");
        let p = placement(&sites, liar.observed_address(), Some(&liar.claim()));
        let status = status_after(&liar, &p);
        assert_eq!(status.site.as_deref(), Some("lyon"));
        assert_eq!(status.claim.as_ref().unwrap().verdict, "Contradicts");
        assert!(status.claim.as_ref().unwrap().message.contains("paris"));
        assert_eq!(status.conditions[0].status, "False");
        assert!(status.observed.is_some(), "the observation is kept");
        // Read back with that status: nothing more to write.
        let mut written = liar.clone();
        written.status = Some(status.clone());
        assert_eq!(status_after(&written, &p), status);
        // An honest report.
        let honest = report("10.20.0.9", "10.20.0.9/24");
        let p = placement(&sites, honest.observed_address(), Some(&honest.claim()));
        let status = status_after(&honest, &p);
        assert_eq!(status.claim.unwrap().verdict, "Consistent");
        assert_eq!(status.conditions[0].status, "True");
    }
}

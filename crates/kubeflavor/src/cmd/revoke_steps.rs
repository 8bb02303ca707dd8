//! The revocation of one node as the commands that revoke run it (`node revoke`,
//! `token revoke --nodes`): each step printed as it ends, and the trail's Event.

use std::io::Write;

use kubeflavor_cluster::ops::trail::{self, Regarding};
use kubeflavor_core::node::state::Revocation;

use crate::connect::Cluster;
use crate::error::{CliError, Result};
use crate::revocation;

/// Runs the revocation of `name`, printing each step as it ends (kubeadm's `[phase] ...`),
/// and records it in the trail.
pub async fn run(
    cluster: &Cluster,
    name: &str,
    why: &Revocation,
    out: &mut dyn Write,
) -> Result<()> {
    let by = kubeflavor_cluster::whoami::caller_name(&cluster.client)
        .await
        .unwrap_or_else(|| "unknown".into());
    let mut lines = Vec::new();
    let done = revocation::revoke(&cluster.client, name, why, &by, &mut |step, outcome| {
        lines.push(format!("[{}] {}", step.name(), outcome.text()));
    })
    .await;
    for line in &lines {
        writeln!(out, "{line}")?;
    }
    let done = done.map_err(|e| {
        CliError::failed(
            format!(
                "revoking node {name} stopped at step [{}]: {} ({})",
                e.step.name(),
                e.doing,
                e.source
            ),
            "fix the cause and run the command again: every step is idempotent",
        )
    })?;
    let note = done
        .iter()
        .map(|(step, outcome)| format!("[{}] {}", step.name(), outcome.text()))
        .collect::<Vec<_>>()
        .join("; ");
    let event = trail::event(
        REPORTING,
        &by,
        Regarding {
            api_version: "kubeflavor.io/v1alpha1",
            kind: "FlavorBinding",
            name,
            uid: None,
        },
        ("Warning", "Revoke", "NodeRevoked"),
        &format!("node {name} revoked by {by} ({}): {note}", why.reason()),
    );
    trail::post(&cluster.client, &event).await;
    Ok(())
}

/// Who writes the CLI's trail Events (`reportingController`): not the controller.
pub const REPORTING: &str = "kubeflavor.io/cli";

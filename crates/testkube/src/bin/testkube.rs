//! Run one testkube cluster by hand: `testkube <admin-kubeconfig-path>`, then use curl or
//! kubectl with that kubeconfig. Runs until Ctrl-C.

use anyhow::Context;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let path = std::env::args_os().nth(1).context(
        "usage: testkube <path>: the admin kubeconfig is written to <path> (e.g. testkube /tmp/testkube.kubeconfig)",
    )?;
    let cluster = testkube::TestCluster::start()
        .await
        .context("starting the test cluster")?;
    cluster
        .write_admin_kubeconfig(&path)
        .with_context(|| format!("writing the admin kubeconfig to {}", path.to_string_lossy()))?;
    println!("{}", cluster.server_url());
    eprintln!(
        "admin kubeconfig written to {}; try: kubectl --kubeconfig {} get namespaces (Ctrl-C stops)",
        path.to_string_lossy(),
        path.to_string_lossy()
    );
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    cluster.shutdown().await;
    Ok(())
}

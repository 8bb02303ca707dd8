//! A fair limit on the CSR loops' parallel reconciles.

use super::metrics::Metrics;

/// A fair limit on parallel reconciles: waiters are served in arrival order.
///
/// kube-runtime's own limit (`Config::concurrency`) parks the requests it cannot run yet in
/// a hash set and picks from it in no particular order, so under a steady stream of new
/// CSRs an early one can wait for seconds while later ones go first. The CSR loop therefore
/// lets kube-runtime start every reconcile and take a turn here (tokio's semaphore queues
/// waiters first in, first out) before it talks to the API server. (The node loop, whose
/// triggers grow with the fleet, has its own first-in first-out work queue, `queue`.)
pub struct Turns(tokio::sync::Semaphore);

impl Turns {
    pub fn new(parallel: u16) -> Self {
        Turns(tokio::sync::Semaphore::new(usize::from(parallel.max(1))))
    }

    /// Waits for a turn; the turn ends when the guard is dropped. The wait is recorded as
    /// the `queue` stage of `controller`.
    pub async fn take(
        &self,
        metrics: &Metrics,
        controller: &str,
    ) -> tokio::sync::SemaphorePermit<'_> {
        let started = std::time::Instant::now();
        let turn = self.0.acquire().await.expect("the turns are never closed");
        metrics.stage(controller, "queue", started.elapsed().as_secs_f64());
        turn
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn turns_are_served_in_arrival_order() {
        let turns = Arc::new(Turns::new(1));
        let metrics = Metrics::new();
        let first = turns.take(&metrics, "csr").await;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut waiters = Vec::new();
        for i in 0..8 {
            let (turns, tx, metrics) = (turns.clone(), tx.clone(), metrics.clone());
            waiters.push(tokio::spawn(async move {
                let _turn = turns.take(&metrics, "csr").await;
                tx.send(i).expect("receiver alive");
            }));
            // Let waiter i queue up before waiter i + 1 arrives.
            tokio::task::yield_now().await;
        }
        drop(first);
        for w in waiters {
            w.await.expect("waiter");
        }
        drop(tx);
        let mut served = Vec::new();
        while let Some(i) = rx.recv().await {
            served.push(i);
        }
        assert_eq!(served, (0..8).collect::<Vec<_>>());
    }
}

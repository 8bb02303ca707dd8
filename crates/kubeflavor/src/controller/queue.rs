//! A work queue of names, with client-go's workqueue rules: a name waits in the queue at
//! most once however often it is added, two workers never hold the same name, and a name
//! added while a worker holds it is queued again once that worker is done. Names are
//! served first in, first out; a name added with a delay joins the queue when it is due.
//!
//! The node loop keeps one entry per name it must look at, not one task per trigger: a
//! relist of 100,000 objects costs 100,000 queued names, not 100,000 parked futures.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

#[derive(Default)]
pub struct WorkQueue {
    state: Mutex<State>,
    ready: Notify,
}

#[derive(Default)]
struct State {
    /// Names waiting, in arrival order.
    fifo: VecDeque<Arc<str>>,
    /// Names waiting, or to be queued again once the worker holding them is done, with
    /// the time they were added.
    dirty: HashMap<Arc<str>, Instant>,
    /// Names a worker holds.
    running: HashSet<Arc<str>>,
    /// Names added with a delay, by due time.
    later: BinaryHeap<Reverse<(Instant, Arc<str>)>>,
    closed: bool,
}

impl State {
    fn add(&mut self, name: Arc<str>) -> bool {
        if self.closed || self.dirty.contains_key(&name) {
            return false;
        }
        self.dirty.insert(name.clone(), Instant::now());
        if self.running.contains(&name) {
            // Queued again once its worker is done (`WorkQueue::done`).
            return false;
        }
        self.fifo.push_back(name);
        true
    }

    /// Moves the delayed names that are due into the queue; true when one was queued.
    fn promote_due(&mut self, now: Instant) -> bool {
        let mut queued = false;
        while let Some(Reverse((at, _))) = self.later.peek() {
            if *at > now {
                break;
            }
            let Some(Reverse((_, name))) = self.later.pop() else {
                break;
            };
            queued |= self.add(name);
        }
        queued
    }
}

impl WorkQueue {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("work queue lock")
    }

    /// Queues `name` unless it is already waiting.
    pub fn add(&self, name: &str) {
        if self.lock().add(Arc::from(name)) {
            self.ready.notify_one();
        }
    }

    /// Queues `name` once `delay` has passed.
    pub fn add_after(&self, name: &str, delay: Duration) {
        let mut st = self.lock();
        if st.closed {
            return;
        }
        st.later
            .push(Reverse((Instant::now() + delay, Arc::from(name))));
        drop(st);
        // A worker waiting for the earliest due time may have to wait less now.
        self.ready.notify_waiters();
    }

    /// The next name to work on, held until [`WorkQueue::done`], and how long it waited;
    /// `None` once closed.
    pub async fn next(&self) -> Option<(Arc<str>, Duration)> {
        loop {
            let notified = self.ready.notified();
            tokio::pin!(notified);
            // Registered before the queue is looked at: an add after the look wakes us.
            notified.as_mut().enable();
            let due = {
                let mut st = self.lock();
                if st.closed {
                    return None;
                }
                st.promote_due(Instant::now());
                if let Some(name) = st.fifo.pop_front() {
                    let added = st.dirty.remove(&name);
                    st.running.insert(name.clone());
                    if !st.fifo.is_empty() {
                        // More waiting: let another worker take the next one.
                        self.ready.notify_one();
                    }
                    let waited = added.map(|at| at.elapsed()).unwrap_or_default();
                    return Some((name, waited));
                }
                st.later.peek().map(|Reverse((at, _))| *at)
            };
            match due {
                Some(at) => {
                    tokio::select! {
                        _ = &mut notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// The worker holding `name` is done with it: queued again if it was added meanwhile.
    pub fn done(&self, name: &Arc<str>) {
        let mut st = self.lock();
        st.running.remove(name);
        if st.dirty.contains_key(name) && !st.closed {
            st.fifo.push_back(name.clone());
            drop(st);
            self.ready.notify_one();
        }
    }

    /// Ends the queue: `next` returns `None` to every worker from now on.
    pub fn close(&self) {
        let mut st = self.lock();
        st.closed = true;
        st.fifo.clear();
        st.dirty.clear();
        st.later.clear();
        drop(st);
        self.ready.notify_waiters();
    }

    /// Names waiting now (delayed ones not counted).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().fifo.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take_now(q: &WorkQueue) -> Option<Arc<str>> {
        use futures::FutureExt;
        q.next().now_or_never().flatten().map(|(name, _)| name)
    }

    #[tokio::test]
    async fn a_name_waits_once_and_in_arrival_order() {
        let q = WorkQueue::new();
        for n in ["a", "b", "a", "c", "b"] {
            q.add(n);
        }
        assert_eq!(q.len(), 3);
        let order: Vec<String> = std::iter::from_fn(|| take_now(&q))
            .map(|n| n.to_string())
            .collect();
        assert_eq!(order, ["a", "b", "c"]);
    }

    #[tokio::test]
    async fn a_name_held_by_a_worker_is_not_handed_out_again_until_done() {
        let q = WorkQueue::new();
        q.add("a");
        let held = take_now(&q).expect("a is queued");
        q.add("a");
        assert!(take_now(&q).is_none(), "a is held: nobody else gets it");
        q.add("a");
        q.done(&held);
        let again = take_now(&q).expect("added while held: queued again when done");
        assert_eq!(&*again, "a");
        q.done(&again);
        assert!(
            take_now(&q).is_none(),
            "added twice while held: worked on once more"
        );
    }

    #[tokio::test]
    async fn a_name_not_added_while_held_is_not_queued_again() {
        let q = WorkQueue::new();
        q.add("a");
        let held = take_now(&q).expect("a");
        q.done(&held);
        assert!(take_now(&q).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_name_joins_when_due() {
        let q = Arc::new(WorkQueue::new());
        q.add_after("late", Duration::from_secs(5));
        assert!(take_now(&q).is_none(), "not due yet");
        let start = Instant::now();
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move { q.next().await })
        };
        let (got, _) = waiter.await.expect("worker").expect("queue open");
        assert_eq!(&*got, "late");
        assert!(start.elapsed() >= Duration::from_secs(5));
    }

    #[tokio::test]
    async fn a_waiting_worker_wakes_for_an_add() {
        let q = Arc::new(WorkQueue::new());
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move { q.next().await })
        };
        tokio::task::yield_now().await;
        q.add("x");
        let (got, waited) = waiter.await.expect("worker").expect("open");
        assert_eq!(&*got, "x");
        assert!(waited < Duration::from_secs(60), "{waited:?}");
    }

    #[tokio::test]
    async fn closing_ends_every_worker() {
        let q = Arc::new(WorkQueue::new());
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move { q.next().await })
            })
            .collect();
        tokio::task::yield_now().await;
        q.close();
        for w in workers {
            assert!(w.await.expect("worker").is_none());
        }
        q.add("after");
        assert!(take_now(&q).is_none(), "a closed queue takes nothing");
    }
}

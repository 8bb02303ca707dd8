//! The API server authenticates and authorizes from informer caches, so a change is not in
//! force the moment it is written, and no watch tells when it is:
//! - a bootstrap token is not usable the moment its Secret exists: a request made right after
//!   `token create` can get the ordinary 401 Unauthorized for a moment, longer on a busy
//!   server. Whoever creates a token and uses it at once retries a 401
//!   ([`retry_unauthorized`]), for a short, bounded time; a token that is really wrong still
//!   fails, only later;
//! - an RBAC grant given or taken still answers the old way for a moment.
//!
//! [`until_settled`] is the one way to wait for such a change: ask again, with growing
//! pauses, until the answer is the settled one or the time is up.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// How long a 401 is retried before it counts.
pub const TOKEN_PROPAGATION: Duration = Duration::from_secs(5);

/// The first pause between two tries; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const MAX_PAUSE: Duration = Duration::from_millis(500);

/// Runs `call` until `settled` holds for its answer, or until `within` has passed; returns
/// the last answer either way. Pauses between tries double from 10 ms up to 500 ms.
pub async fn until_settled<T, F, Fut>(
    within: Duration,
    mut call: F,
    settled: impl Fn(&T) -> bool,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    let deadline = Instant::now() + within;
    let mut pause = FIRST_PAUSE;
    loop {
        let answer = call().await;
        if settled(&answer) || Instant::now() + pause >= deadline {
            return answer;
        }
        tracing::debug!(retry_in = ?pause, "the API server's cache may not have the change yet");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// Runs `call` until it answers something other than 401, or until `within` has passed
/// (then its last answer, the 401, is returned).
pub async fn retry_unauthorized<T, F, Fut>(within: Duration, call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    until_settled(
        within,
        call,
        |answer| !matches!(answer, Err(kube::Error::Api(s)) if s.code == 401),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn status(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("x", "Unauthorized")
                .with_code(code)
                .boxed(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_401_is_retried_until_the_token_is_known() {
        let calls = AtomicU32::new(0);
        let answer = retry_unauthorized(TOKEN_PROPAGATION, || async {
            match calls.fetch_add(1, Ordering::SeqCst) {
                0..3 => Err(status(401)),
                _ => Ok("created"),
            }
        })
        .await;
        assert_eq!(answer.unwrap(), "created");
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wrong_token_fails_once_the_time_is_up() {
        let calls = AtomicU32::new(0);
        let started = Instant::now();
        let answer: Result<(), _> = retry_unauthorized(TOKEN_PROPAGATION, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(status(401))
        })
        .await;
        assert!(matches!(answer, Err(kube::Error::Api(s)) if s.code == 401));
        assert!(started.elapsed() <= TOKEN_PROPAGATION);
        assert!(calls.load(Ordering::SeqCst) > 3);
    }

    #[tokio::test(start_paused = true)]
    async fn until_settled_asks_until_the_answer_settles_or_time_is_up() {
        let calls = AtomicU32::new(0);
        let settled = until_settled(
            Duration::from_secs(10),
            || async { calls.fetch_add(1, Ordering::SeqCst) },
            |n| *n == 5,
        )
        .await;
        assert_eq!(settled, 5);
        let started = Instant::now();
        let last = until_settled(
            Duration::from_secs(1),
            || async { 403 },
            |code| *code == 200,
        )
        .await;
        assert_eq!(last, 403, "the last answer, once the time is up");
        assert!(started.elapsed() <= Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn other_errors_are_not_retried() {
        let calls = AtomicU32::new(0);
        let answer: Result<(), _> = retry_unauthorized(TOKEN_PROPAGATION, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(status(403))
        })
        .await;
        assert!(matches!(answer, Err(kube::Error::Api(s)) if s.code == 403));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}

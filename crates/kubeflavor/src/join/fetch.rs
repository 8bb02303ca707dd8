//! Reading `kube-public/cluster-info` during discovery: the two clients (unverified, then
//! verified by the discovered CA) and kubeadm's retry loop around them.
//!
//! The first read is answered by whatever listens at the endpoint, before anything is
//! verified: its body is read as it streams in and abandoned past
//! [`MAX_CLUSTER_INFO_BYTES`], so a server sending hundreds of megabytes costs this process
//! one megabyte.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use http_body_util::BodyExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::Client;
use kubeflavor_core::token::TokenId;
use tokio::time::Instant;

use super::Report;

pub use kubeflavor_core::join::discovery::{
    CLUSTER_INFO_NAME, CLUSTER_INFO_NAMESPACE, JWS_KEY_PREFIX, KUBECONFIG_KEY,
};

/// The most a cluster-info answer may hold (1 MiB). kubeadm's cluster-info is a kubeconfig
/// with one CA bundle plus one signature per signing token: a few KiB. Anything near this
/// bound is not a cluster-info, and is not read further.
pub const MAX_CLUSTER_INFO_BYTES: usize = 1 << 20;

/// [`MAX_CLUSTER_INFO_BYTES`] as the error message says it.
pub const MAX_CLUSTER_INFO: &str = "1 MiB";

/// One failed read of cluster-info.
#[derive(Debug)]
pub enum FetchError {
    /// 401/403: retrying will not help.
    Forbidden(String),
    /// 404: the ConfigMap is not there (yet).
    NotFound,
    /// The answer grew past [`MAX_CLUSTER_INFO_BYTES`]: retrying will not help.
    TooLarge,
    /// Anything else (connection refused, TLS, 5xx): retried.
    Failed(String),
}

/// Why polling stopped without a signature.
#[derive(Debug)]
pub enum PollFailure {
    Forbidden(String),
    /// An answer past [`MAX_CLUSTER_INFO_BYTES`].
    TooLarge,
    /// The deadline passed; the last problem seen.
    TimedOut(LastProblem),
}

#[derive(Debug)]
pub enum LastProblem {
    Unreachable(String),
    NoClusterInfo,
    NoSignature,
}

impl PollFailure {
    /// What went wrong, in a few words.
    pub(super) fn describe(&self) -> String {
        match self {
            PollFailure::Forbidden(m) => m.clone(),
            PollFailure::TooLarge => format!("an answer larger than {MAX_CLUSTER_INFO}"),
            PollFailure::TimedOut(LastProblem::Unreachable(cause)) => cause.clone(),
            PollFailure::TimedOut(LastProblem::NoClusterInfo) => "cluster-info disappeared".into(),
            PollFailure::TimedOut(LastProblem::NoSignature) => {
                "the token's signature disappeared".into()
            }
        }
    }
}

/// Reads cluster-info until it carries `jws-kubeconfig-<id>`, every `interval`, until
/// `deadline`. Like kubeadm, a refusal (401/403) stops at once: the cluster does not allow
/// anonymous discovery and waiting will not change that.
pub async fn poll_for_signature<F, Fut>(
    mut fetch: F,
    token_id: &TokenId,
    deadline: Instant,
    interval: Duration,
    report: &mut dyn Report,
) -> Result<BTreeMap<String, String>, PollFailure>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<BTreeMap<String, String>, FetchError>>,
{
    let jws_key = format!("{JWS_KEY_PREFIX}{}", token_id.as_str());
    let mut last: Option<LastProblem> = None;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let problem = match tokio::time::timeout(remaining, fetch()).await {
            Ok(Ok(data)) if data.contains_key(&jws_key) => return Ok(data),
            Ok(Ok(_)) => {
                report.info(&format!(
                    "[discovery] The cluster-info ConfigMap does not yet contain a JWS signature for token ID {:?}, will try again",
                    token_id.as_str()
                ));
                LastProblem::NoSignature
            }
            Ok(Err(FetchError::Forbidden(message))) => return Err(PollFailure::Forbidden(message)),
            Ok(Err(FetchError::TooLarge)) => return Err(PollFailure::TooLarge),
            Ok(Err(FetchError::NotFound)) => {
                report.info(
                    "[discovery] The cluster-info ConfigMap does not exist yet, will try again",
                );
                LastProblem::NoClusterInfo
            }
            Ok(Err(FetchError::Failed(cause))) => {
                report.info(&format!(
                    "[discovery] Failed to request cluster-info, will try again: {cause}"
                ));
                LastProblem::Unreachable(cause)
            }
            // The deadline cut this request short: what the server said before still
            // stands (a slow answer does not make a token the cluster never signed a
            // network problem).
            Err(_elapsed) => last
                .take()
                .unwrap_or_else(|| LastProblem::Unreachable("no answer before the timeout".into())),
        };
        let next = Instant::now() + interval;
        if next >= deadline {
            return Err(PollFailure::TimedOut(problem));
        }
        last = Some(problem);
        tokio::time::sleep_until(next).await;
    }
}

/// One GET of cluster-info, its body read up to [`MAX_CLUSTER_INFO_BYTES`] (error answers
/// included: kube-rs would read those whole too).
pub(super) async fn fetch_cluster_info(
    client: Client,
) -> Result<BTreeMap<String, String>, FetchError> {
    let path =
        format!("/api/v1/namespaces/{CLUSTER_INFO_NAMESPACE}/configmaps/{CLUSTER_INFO_NAME}");
    let request = http::Request::get(path)
        .header(http::header::ACCEPT, "application/json")
        .body(kube::client::Body::empty())
        .map_err(|e| FetchError::Failed(e.to_string()))?;
    let response = client
        .send(request)
        .await
        .map_err(|e| FetchError::Failed(error_chain(&e)))?;
    let status = response.status();
    let body = read_capped(response.into_body(), MAX_CLUSTER_INFO_BYTES).await?;
    if status.is_success() {
        let cm: ConfigMap = serde_json::from_slice(&body)
            .map_err(|e| FetchError::Failed(format!("the answer is not a ConfigMap: {e}")))?;
        return Ok(cm.data.unwrap_or_default());
    }
    // The message of the API server's Status, or the start of whatever else came back.
    let message = serde_json::from_slice::<Status>(&body)
        .ok()
        .and_then(|s| s.message)
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
    match status.as_u16() {
        401 | 403 => Err(FetchError::Forbidden(message)),
        404 => Err(FetchError::NotFound),
        code => Err(FetchError::Failed(format!("HTTP {code}: {message}"))),
    }
}

/// Reads a response body frame by frame, giving up as soon as it exceeds `limit` bytes (a
/// declared Content-Length above it ends the read before any of the body).
async fn read_capped(mut body: kube::client::Body, limit: usize) -> Result<Vec<u8>, FetchError> {
    if hyper::body::Body::size_hint(&body).lower() > limit as u64 {
        return Err(FetchError::TooLarge);
    }
    let mut read = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| FetchError::Failed(error_chain(&e)))?;
        if let Some(data) = frame.data_ref() {
            if read.len() + data.len() > limit {
                return Err(FetchError::TooLarge);
            }
            read.extend_from_slice(data);
        }
    }
    Ok(read)
}

/// An error with its causes, one line: kube's top-level messages ("ServiceError: client
/// error (Connect)") hide the useful part ("Connection refused").
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut parts = vec![err.to_string()];
    let mut source = err.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

/// `5m`, `30s`, `1m30s`, `250ms`: how the timeout was given.
pub fn human_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        return format!("{}ms", d.as_millis());
    }
    let (m, s) = (secs / 60, secs % 60);
    match (m, s) {
        (0, s) => format!("{s}s"),
        (m, 0) => format!("{m}m"),
        (m, s) => format!("{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::join::RecordedReport;
    use crate::join::discovery::{DiscoveryError, KUBECONFIG_KEY};

    const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\n";

    fn signed_data() -> BTreeMap<String, String> {
        BTreeMap::from([
            (KUBECONFIG_KEY.to_string(), KUBECONFIG.to_string()),
            (format!("{JWS_KEY_PREFIX}abcdef"), "eyJ..sig".to_string()),
        ])
    }

    type Answer = fn() -> Result<BTreeMap<String, String>, FetchError>;

    /// A scripted cluster-info endpoint: answers in order, the last one forever.
    fn scripted(
        answers: Vec<Answer>,
        calls: &Cell<usize>,
    ) -> impl FnMut() -> std::future::Ready<Result<BTreeMap<String, String>, FetchError>> + '_ {
        move || {
            let i = calls.get();
            calls.set(i + 1);
            std::future::ready(answers[i.min(answers.len() - 1)]())
        }
    }

    fn unsigned() -> Result<BTreeMap<String, String>, FetchError> {
        Ok(BTreeMap::from([(
            KUBECONFIG_KEY.to_string(),
            KUBECONFIG.to_string(),
        )]))
    }
    fn signed() -> Result<BTreeMap<String, String>, FetchError> {
        Ok(signed_data())
    }
    fn refused() -> Result<BTreeMap<String, String>, FetchError> {
        Err(FetchError::Failed("connection refused".into()))
    }
    fn forbidden() -> Result<BTreeMap<String, String>, FetchError> {
        Err(FetchError::Forbidden(
            "configmaps \"cluster-info\" is forbidden".into(),
        ))
    }

    async fn poll(
        answers: Vec<Answer>,
        timeout: Duration,
    ) -> (
        Result<BTreeMap<String, String>, PollFailure>,
        usize,
        RecordedReport,
    ) {
        let calls = Cell::new(0);
        let mut report = RecordedReport::default();
        let id: TokenId = "abcdef".parse().unwrap();
        let result = poll_for_signature(
            scripted(answers, &calls),
            &id,
            Instant::now() + timeout,
            Duration::from_secs(5),
            &mut report,
        )
        .await;
        (result, calls.get(), report)
    }

    #[tokio::test(start_paused = true)]
    async fn waits_until_the_bootstrapsigner_has_signed() {
        let (result, calls, report) = poll(
            vec![refused, unsigned, unsigned, signed],
            Duration::from_secs(300),
        )
        .await;
        assert!(result.unwrap().contains_key("jws-kubeconfig-abcdef"));
        assert_eq!(calls, 4);
        assert_eq!(
            report
                .lines
                .iter()
                .filter(|l| l.contains("does not yet contain a JWS signature"))
                .count(),
            2
        );
        assert!(
            report.lines[0]
                .starts_with("[discovery] Failed to request cluster-info, will try again")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn unreachable_server_retries_every_interval_then_times_out() {
        let start = Instant::now();
        let (result, calls, report) = poll(vec![refused], Duration::from_secs(30)).await;
        // Attempts at 0, 5, ..., 25 s; the next one would be at the deadline.
        assert_eq!(calls, 6);
        assert_eq!(report.lines.len(), 6);
        assert!(Instant::now() - start <= Duration::from_secs(30));
        let err = result.unwrap_err().into_error(
            "https://192.0.2.10:6443/",
            &"abcdef".parse().unwrap(),
            Duration::from_secs(30),
        );
        assert!(matches!(err, DiscoveryError::Unreachable { .. }));
        assert!(
            err.to_string().contains("within 30s: connection refused"),
            "{err}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn token_never_signed_is_invalid_or_expired() {
        let (result, _, _) = poll(vec![unsigned], Duration::from_secs(20)).await;
        let err = result.unwrap_err().into_error(
            "e",
            &"abcdef".parse().unwrap(),
            Duration::from_secs(20),
        );
        assert!(matches!(err, DiscoveryError::NoSignature { .. }));
        assert!(
            err.to_string()
                .starts_with("the token is invalid or expired"),
            "{err}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_the_deadline_cuts_short_keeps_what_the_server_said_before() {
        let calls = Cell::new(0);
        let mut report = RecordedReport::default();
        let id: TokenId = "abcdef".parse().unwrap();
        // Unsigned at once, then (the server under load) no answer before the deadline.
        let fetch = || {
            let i = calls.get();
            calls.set(i + 1);
            async move {
                if i > 0 {
                    std::future::pending::<()>().await;
                }
                unsigned()
            }
        };
        let result = poll_for_signature(
            fetch,
            &id,
            Instant::now() + Duration::from_secs(8),
            Duration::from_secs(5),
            &mut report,
        )
        .await;
        assert_eq!(calls.get(), 2);
        let err = result
            .unwrap_err()
            .into_error("e", &id, Duration::from_secs(8));
        assert!(matches!(err, DiscoveryError::NoSignature { .. }), "{err}");
        // Nothing answered at all: unreachable, as before.
        let never = || async {
            std::future::pending::<()>().await;
            unsigned()
        };
        let result = poll_for_signature(
            never,
            &id,
            Instant::now() + Duration::from_secs(8),
            Duration::from_secs(5),
            &mut report,
        )
        .await;
        let err = result
            .unwrap_err()
            .into_error("e", &id, Duration::from_secs(8));
        assert!(matches!(err, DiscoveryError::Unreachable { .. }), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn forbidden_stops_at_once() {
        let (result, calls, _) = poll(vec![forbidden, signed], Duration::from_secs(300)).await;
        assert!(matches!(result, Err(PollFailure::Forbidden(_))));
        assert_eq!(calls, 1);
    }

    #[tokio::test]
    async fn a_body_past_the_cap_is_refused_and_one_at_the_cap_read() {
        let at_cap = kube::client::Body::from(vec![b'a'; 1024]);
        assert_eq!(read_capped(at_cap, 1024).await.unwrap().len(), 1024);
        let past = kube::client::Body::from(vec![b'a'; 1025]);
        assert!(matches!(
            read_capped(past, 1024).await,
            Err(FetchError::TooLarge)
        ));
    }

    #[test]
    fn durations_read_like_the_flag() {
        assert_eq!(human_duration(Duration::from_secs(300)), "5m");
        assert_eq!(human_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(human_duration(Duration::from_secs(7)), "7s");
        assert_eq!(human_duration(Duration::from_millis(250)), "250ms");
    }
}

//! What the storm examples share: a Flavor and its tokens, one node's join driven as a
//! kubelet drives it (the CSR as the bootstrap identity, the certificate awaited, the Node
//! registered as the node), and figures about processes and latencies.

// Each example uses part of this module.
#![allow(dead_code)]

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use kube::api::PostParams;
use kube::config::Kubeconfig;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use kubeflavor_cluster::crd::Flavor;
use kubeflavor_core::flavor::FlavorName;
use kubeflavor_core::token::BootstrapToken;
use kubeflavor_core::token::secret::flavored_token_secret;

/// The label kubeflavor puts on a flavored Node, naming its flavor.
pub const FLAVOR_LABEL: &str = "kubeflavor.node-restriction.kubernetes.io/flavor";

pub async fn client_from(yaml: &str) -> Client {
    kubeflavor::join::client_from_kubeconfig(yaml)
        .await
        .expect("kubeconfig usable")
}

/// A kubeconfig like `base` (same server and CA) with another user.
pub fn kubeconfig_with_user(base: &str, user: &str) -> String {
    let kc = Kubeconfig::from_yaml(base).expect("kubeconfig");
    let cluster = kc.clusters[0].cluster.clone().expect("cluster");
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n{user}",
        cluster.server.expect("server"),
        cluster.certificate_authority_data.expect("CA data"),
    )
}

/// The CSR a kubelet files for `node` (the same shape `kubeflavor join` sends), and its key.
pub fn csr_for(node: &str) -> (CertificateSigningRequest, String) {
    let generated = kubeflavor_core::csr::kubelet::generate_kubelet_csr(node).expect("kubelet CSR");
    let csr = kubeflavor::join::tls_bootstrap::kubelet_csr_object(Some(node), generated.csr_pem());
    let key = String::from_utf8(generated.key_pem().to_vec()).expect("PEM is ASCII");
    (csr, key)
}

/// Creates the Flavor `name`, whose nodes get one restricted label.
pub async fn create_flavor(admin: &Client, name: &str) {
    let flavor: Flavor = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubeflavor.io/v1alpha1", "kind": "Flavor",
        "metadata": {"name": name},
        "spec": {"labels": {"tier.node-restriction.kubernetes.io/class": "gold"}, "trustLevel": 50},
    }))
    .expect("a Flavor");
    Api::<Flavor>::all(admin.clone())
        .create(&PostParams::default(), &flavor)
        .await
        .expect("flavor created");
}

/// Deletes what a storm made on a cluster that outlives it: the Nodes, CSRs and
/// FlavorBindings named `<prefix>*` and the Flavor `flavor`, then waits until they are
/// gone, so the next storm's names are free. (Used-up tokens the controller retired
/// itself; a token left unused expires.)
pub async fn clean_up(admin: &Client, flavor: &str, prefix: &str) {
    use kube::api::{DeleteParams, ListParams};
    use kube::runtime::wait::{await_condition, conditions};
    use kubeflavor_cluster::crd::FlavorBinding;
    /// Deletes the objects whose names `pick` picks; returns how many, after waiting (on a
    /// watch) for those whose finalizers kept them.
    async fn delete_named<K>(api: Api<K>, pick: impl Fn(&str) -> bool) -> usize
    where
        K: kube::Resource<DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + Sync
            + 'static,
    {
        let names: Vec<String> = api
            .list_metadata(&ListParams::default())
            .await
            .expect("list for clean-up")
            .items
            .into_iter()
            .map(|m| m.metadata.name.unwrap_or_default())
            .filter(|n| pick(n))
            .collect();
        let count = names.len();
        futures::stream::iter(names)
            .for_each_concurrent(16, |n| {
                let api = api.clone();
                async move {
                    match api.delete(&n, &DeleteParams::default()).await {
                        // Kept by a finalizer: gone when its uid is.
                        Ok(deleted) if deleted.is_left() => {
                            let uid = deleted.left().and_then(|k| k.uid()).unwrap_or_default();
                            tokio::time::timeout(
                                Duration::from_secs(120),
                                await_condition(api, &n, conditions::is_deleted(&uid)),
                            )
                            .await
                            .unwrap_or_else(|_| {
                                panic!("{n} still there 2 minutes after its delete")
                            })
                            .expect("watch for its deletion");
                        }
                        Ok(_) => {}
                        Err(kube::Error::Api(s)) if s.code == 404 => {}
                        Err(e) => panic!("delete {n}: {e}"),
                    }
                }
            })
            .await;
        count
    }
    let ours = |n: &str| n.starts_with(prefix);
    let nodes = delete_named(Api::<Node>::all(admin.clone()), ours).await;
    let csrs = delete_named(Api::<CertificateSigningRequest>::all(admin.clone()), ours).await;
    let bindings = delete_named(Api::<FlavorBinding>::all(admin.clone()), ours).await;
    delete_named(Api::<Flavor>::all(admin.clone()), |n| n == flavor).await;
    if nodes + csrs + bindings > 0 {
        eprintln!(
            "clean-up: deleted {nodes} Nodes, {csrs} CSRs and {bindings} FlavorBindings named {prefix}*"
        );
    }
}

/// Mints `n` single-node tokens of `flavor`, `parallel` at a time. Token ids are six
/// characters: among 100,000 tokens two draws of the same id are to be expected, so an id
/// already taken is drawn again, as `kubeflavor token create` does.
pub async fn mint_tokens(
    admin: &Client,
    flavor: &str,
    n: usize,
    parallel: usize,
) -> Vec<BootstrapToken> {
    let name: FlavorName = flavor.parse().expect("a flavor name");
    futures::stream::iter(0..n)
        .map(|_| {
            let name = name.clone();
            async move {
                let draw = || {
                    let name = name.clone();
                    async move {
                        let t = BootstrapToken::generate().expect("randomness");
                        // An hour to live: within a Flavor's default limits (24h, 1
                        // node), which the controller holds each token to.
                        let expiration =
                            jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1);
                        let obj = flavored_token_secret(
                            &t,
                            &name,
                            Some(expiration),
                            NonZeroU32::MIN,
                            &Default::default(),
                        );
                        let s = kubeflavor_cluster::token_secrets::to_secret(&obj);
                        Ok::<_, kube::Error>(Some((t, s)))
                    }
                };
                kubeflavor_cluster::token_secrets::create_with_fresh_id(admin, 8, draw, |e| e)
                    .await
                    .expect("token")
                    .expect("a free token id within 8 draws")
                    .token
            }
        })
        .buffer_unordered(parallel)
        .collect()
        .await
}

/// When each object (by name) first reached some state.
pub type Times = Arc<Mutex<HashMap<String, Instant>>>;

/// Records the first time each object satisfies `done`, until `n` have.
pub fn record_first<K, F>(
    api: Api<K>,
    times: Times,
    n: usize,
    done: F,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    F: Fn(&K) -> bool + Send + 'static,
{
    tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default()).applied_objects();
        futures::pin_mut!(stream);
        while let Some(obj) = stream.next().await {
            let Ok(obj) = obj else { continue };
            if done(&obj) {
                let mut t = times.lock().unwrap();
                t.entry(obj.name_any()).or_insert_with(Instant::now);
                if t.len() >= n {
                    return;
                }
            }
        }
    })
}

/// Whether the CSR carries the Approved condition.
pub fn is_approved(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|x| x.type_ == "Approved"))
}

/// One node's join, as a kubelet does it: the CSR filed with the bootstrap token, the
/// certificate awaited (as the admin watches it), the Node registered with that
/// certificate. `created` and `registered` get the node's times.
pub async fn join(
    admin_yaml: &str,
    csrs: &Api<CertificateSigningRequest>,
    token: &BootstrapToken,
    node: &str,
    created: &Times,
    registered: &Times,
) {
    let boot = client_from(&kubeconfig_with_user(
        admin_yaml,
        &format!("    token: {}\n", token.expose().as_str()),
    ))
    .await;
    let (csr, key) = csr_for(node);
    // A token minted a moment ago may get 401 until the API server's cache has it.
    let (boot_csrs, params) = (
        Api::<CertificateSigningRequest>::all(boot),
        PostParams::default(),
    );
    kubeflavor_cluster::cache_lag::retry_unauthorized(
        kubeflavor_cluster::cache_lag::TOKEN_PROPAGATION,
        || boot_csrs.create(&params, &csr),
    )
    .await
    .expect("CSR created");
    // From the moment the CSR exists: the bootstrap client's own TLS handshake and request
    // are not the controller's latency.
    created
        .lock()
        .unwrap()
        .insert(node.to_string(), Instant::now());
    let issued = kube::runtime::wait::await_condition(
        csrs.clone(),
        node,
        |c: Option<&CertificateSigningRequest>| {
            c.and_then(|c| c.status.as_ref())
                .and_then(|s| s.certificate.as_ref())
                .is_some()
        },
    )
    .await
    .expect("watch")
    .expect("CSR");
    let cert = String::from_utf8(issued.status.unwrap().certificate.unwrap().0).unwrap();
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let user = format!(
        "    client-certificate-data: {}\n    client-key-data: {}\n",
        b64(&cert),
        b64(&key)
    );
    let kubelet = client_from(&kubeconfig_with_user(admin_yaml, &user)).await;
    let node_obj: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": node},
        "spec": {"taints": [{"key": "kubeflavor.io/unverified", "effect": "NoSchedule"}]},
    }))
    .unwrap();
    Api::<Node>::all(kubelet)
        .create(&PostParams::default(), &node_obj)
        .await
        .expect("node registers");
    registered
        .lock()
        .unwrap()
        .insert(node.to_string(), Instant::now());
}

/// Peak resident memory (VmHWM) of a process, in KiB.
pub fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// CPU time (user + system) the process has used so far, all its threads included, from
/// `/proc/PID/stat` fields 14 and 15, in clock ticks of USER_HZ (100 per second on Linux).
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from the
    // last ')', after which field 3 is the first.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// The processes of this machine whose command name (`/proc/PID/comm`) is one of
/// `names`, with their CPU time so far: a control plane on the same machine (etcd,
/// kube-apiserver, kube-controller-manager), to see what it spent during a run.
pub fn cpu_by_command(names: &[&str]) -> std::collections::BTreeMap<String, Duration> {
    let mut out: std::collections::BTreeMap<String, Duration> = Default::default();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for pid in dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
        let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm")) else {
            continue;
        };
        let comm = comm.trim();
        if names.contains(&comm)
            && let Some(t) = cpu_time(pid)
        {
            *out.entry(comm.to_string()).or_default() += t;
        }
    }
    out
}

pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// For each name in `to`, the time from its entry in `from`, sorted.
pub fn latencies(from: &Times, to: &Times) -> Vec<Duration> {
    let from = from.lock().unwrap();
    let to = to.lock().unwrap();
    let mut v: Vec<Duration> = to
        .iter()
        .filter_map(|(k, t)| from.get(k).map(|f| t.saturating_duration_since(*f)))
        .collect();
    v.sort();
    v
}

/// One histogram of a Prometheus text exposition: its sum, count and cumulative buckets.
#[derive(Clone, Debug, Default)]
pub struct Histogram {
    pub sum: f64,
    pub count: u64,
    /// (upper bound, cumulative count), in the exposition's order.
    pub buckets: Vec<(f64, u64)>,
}

impl Histogram {
    /// The upper bound of the bucket holding quantile `q` (an upper estimate).
    pub fn quantile(&self, q: f64) -> f64 {
        let want = (self.count as f64 * q).ceil() as u64;
        self.buckets
            .iter()
            .find(|(_, c)| *c >= want.max(1))
            .map_or(f64::INFINITY, |(le, _)| *le)
    }
}

/// The value of `name{labels}` (labels written as in the exposition, e.g.
/// `controller="csr",stage="read"`), summed over series whose labels contain them.
pub fn metric_sum(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, rest) = series.split_once('{').unwrap_or((series, "}"));
            (n == name && rest.contains(labels)).then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

/// The histogram `name` of the series whose labels contain `labels`.
pub fn histogram(text: &str, name: &str, labels: &str) -> Histogram {
    let mut h = Histogram {
        sum: metric_sum(text, &format!("{name}_sum"), labels),
        count: metric_sum(text, &format!("{name}_count"), labels) as u64,
        buckets: Vec::new(),
    };
    let bucket = format!("{name}_bucket{{");
    for l in text.lines() {
        let Some(rest) = l.strip_prefix(&bucket) else {
            continue;
        };
        if !rest.contains(labels) {
            continue;
        }
        let le = rest
            .split("le=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .and_then(|v| match v {
                "+Inf" => Some(f64::INFINITY),
                v => v.parse().ok(),
            });
        let count = l.rsplit_once(' ').and_then(|(_, v)| v.parse::<u64>().ok());
        if let (Some(le), Some(count)) = (le, count) {
            h.buckets.push((le, count));
        }
    }
    h
}

/// Every series of counter `name` that counted something, by its label text (e.g.
/// `controller="csr",error="bind"`). The controller exposes every loop and stage from the
/// start at 0 (for its alerts); those zeros are left out.
pub fn counter_series(text: &str, name: &str) -> std::collections::BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix('{')?;
            let (labels, value) = rest.rsplit_once("} ")?;
            Some((labels.to_string(), value.trim().parse::<f64>().ok()? as u64))
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// The labels of one exposition line's series, `{k="v",...}`, as pairs (escapes undone).
fn labels_of(series: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Some(body) = series
        .split_once('{')
        .and_then(|(_, r)| r.strip_suffix('}'))
    else {
        return out;
    };
    let mut chars = body.chars().peekable();
    loop {
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() || chars.next() != Some('"') {
            return out;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => value.extend(chars.next()),
                '"' => break,
                c => value.push(c),
            }
        }
        out.push((key.trim_start_matches(',').to_string(), value));
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
}

/// Every histogram `name` in `text`, grouped by the values of the labels `keys` (joined
/// with a space) and summed over its other labels.
pub fn histograms_by(
    text: &str,
    name: &str,
    keys: &[&str],
) -> std::collections::BTreeMap<String, Histogram> {
    let mut out: std::collections::BTreeMap<String, Histogram> = Default::default();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Some(part) = series
            .split_once('{')
            .and_then(|(n, _)| n.strip_prefix(name))
        else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let labels = labels_of(series);
        let get = |k: &str| labels.iter().find(|(l, _)| l == k).map(|(_, v)| v.as_str());
        let key = keys
            .iter()
            .map(|k| get(k).unwrap_or(""))
            .collect::<Vec<_>>()
            .join(" ");
        let h = out.entry(key).or_default();
        match part {
            "_sum" => h.sum += value,
            "_count" => h.count += value as u64,
            "_bucket" => {
                let le = match get("le") {
                    Some("+Inf") => f64::INFINITY,
                    Some(v) => match v.parse() {
                        Ok(v) => v,
                        Err(_) => continue,
                    },
                    None => continue,
                };
                match h.buckets.iter_mut().find(|(b, _)| *b == le) {
                    Some((_, c)) => *c += value as u64,
                    None => {
                        h.buckets.push((le, value as u64));
                        h.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

impl Histogram {
    /// What was observed between `before` and `self` (two scrapes of one counter).
    pub fn since(&self, before: &Histogram) -> Histogram {
        let earlier = |le: f64| {
            before
                .buckets
                .iter()
                .find(|(b, _)| *b == le)
                .map_or(0, |(_, c)| *c)
        };
        Histogram {
            sum: self.sum - before.sum,
            count: self.count.saturating_sub(before.count),
            buckets: self
                .buckets
                .iter()
                .map(|(le, c)| (*le, c.saturating_sub(earlier(*le))))
                .collect(),
        }
    }
}

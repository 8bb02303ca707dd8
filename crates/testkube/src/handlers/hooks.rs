//! What the real server does around a write of particular types, synchronously: the
//! apiextensions controller establishing a new CRD (its resource is served at once; the
//! real server needs under 0.4 s), dropping the custom resources of a
//! deleted CRD, a new Service's cluster IP, and a new namespace's `default`
//! ServiceAccount.

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::resources::{ResourceInfo, crd_key};
use crate::store::{StoreState, format_time, meta_str};
use crate::types::ResourceKey;

fn is_crd(info: &ResourceInfo) -> bool {
    !info.custom && info.key() == crd_key()
}

/// The storage version of a CRD (the one marked `storage: true`).
fn storage_version(crd: &Value) -> Option<String> {
    let versions = crd["spec"]["versions"].as_array()?;
    versions
        .iter()
        .find(|v| v["storage"].as_bool() == Some(true))
        .or(versions.first())?["name"]
        .as_str()
        .map(String::from)
}

pub fn before_create(info: &ResourceInfo, obj: &mut Value) {
    if is_crd(info) {
        let stored: Vec<String> = storage_version(obj).into_iter().collect();
        obj["status"]["storedVersions"] = json!(stored);
    }
}

/// The Service CIDR kubeadm configures by default (`--service-cluster-ip-range`).
const SERVICE_CIDR: (std::net::Ipv4Addr, u32) = (std::net::Ipv4Addr::new(10, 96, 0, 0), 12);

/// A Service created without `spec.clusterIP` gets an unused address of the Service CIDR in
/// `spec.clusterIP` and `spec.clusterIPs`, as the real server's allocator does (it draws one
/// at random; here the lowest unused one, past the network address and the range's first
/// address, which the real server gives to the `kubernetes` Service). A headless Service
/// (`None`) or one asking for an address keeps it, with `clusterIPs` set to match.
pub fn allocate(st: &StoreState, info: &ResourceInfo, obj: &mut Value) {
    if info.custom || info.key() != ResourceKey::new("", "services") {
        return;
    }
    if !obj["spec"].is_object() {
        obj["spec"] = json!({});
    }
    let asked = obj["spec"]["clusterIP"].as_str().unwrap_or("").to_string();
    if !asked.is_empty() {
        if obj["spec"]["clusterIPs"]
            .as_array()
            .is_none_or(|a| a.is_empty())
        {
            obj["spec"]["clusterIPs"] = json!([asked]);
        }
        return;
    }
    let used: std::collections::BTreeSet<String> = st
        .list_objects(&info.storage, None)
        .into_iter()
        .filter_map(|s| s["spec"]["clusterIP"].as_str().map(str::to_string))
        .collect();
    let (base, prefix) = SERVICE_CIDR;
    let base = u32::from(base);
    let size = 1u32 << (32 - prefix);
    let free = (2..size - 1)
        .map(|i| std::net::Ipv4Addr::from(base + i).to_string())
        .find(|ip| !used.contains(ip));
    if let Some(ip) = free {
        obj["spec"]["clusterIP"] = json!(ip);
        obj["spec"]["clusterIPs"] = json!([ip]);
    }
}

pub fn after_create(st: &mut StoreState, info: &ResourceInfo, stored: &Value, now: Timestamp) {
    if !info.custom && info.key() == ResourceKey::new("", "namespaces") {
        default_service_account(st, meta_str(stored, "name"), now);
        return;
    }
    if !is_crd(info) {
        return;
    }
    let mut established = stored.clone();
    let t = format_time(now);
    established["status"]["conditions"] = json!([
        {"type": "NamesAccepted", "status": "True", "lastTransitionTime": t, "reason": "NoConflicts",
         "message": "no conflicts found"},
        {"type": "Established", "status": "True", "lastTransitionTime": t, "reason": "InitialNamesAccepted",
         "message": "the initial names have been accepted"},
    ]);
    established["status"]["acceptedNames"] = stored["spec"]["names"].clone();
    st.replace(&crd_key(), established);
}

pub fn after_delete(st: &mut StoreState, info: &ResourceInfo, old: &Value) {
    if !is_crd(info) {
        return;
    }
    let group = old["spec"]["group"].as_str().unwrap_or("");
    let plural = old["spec"]["names"]["plural"].as_str().unwrap_or("");
    let key = ResourceKey::new(group, plural);
    let victims: Vec<(String, String)> = st
        .list_objects(&key, None)
        .into_iter()
        .map(|o| {
            (
                meta_str(o, "namespace").to_string(),
                meta_str(o, "name").to_string(),
            )
        })
        .collect();
    for (ns, name) in victims {
        st.remove(&key, &ns, &name);
    }
}

/// kube-controller-manager's serviceaccounts controller: every namespace has a
/// ServiceAccount `default`, which the ServiceAccount admission plugin gives to pods that
/// name none. Here at once; on a real server a moment after the namespace (the plugin
/// looks a missing `default` up again for about a second).
pub fn default_service_account(st: &mut StoreState, namespace: &str, now: Timestamp) {
    use crate::admission::service_account::DEFAULT_SERVICE_ACCOUNT;
    let key = ResourceKey::new("", "serviceaccounts");
    if st
        .get_object(&key, namespace, DEFAULT_SERVICE_ACCOUNT)
        .is_some()
    {
        return;
    }
    let sa = json!({
        "kind": "ServiceAccount",
        "apiVersion": "v1",
        "metadata": {"name": DEFAULT_SERVICE_ACCOUNT, "namespace": namespace},
    });
    st.insert(&key, sa, now);
}

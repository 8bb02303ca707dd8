//! The resource registry: the built-in types testkube serves, and the custom resources of
//! every stored CustomResourceDefinition (served as soon as the CRD exists).

use std::sync::OnceLock;

use serde_json::{Value, json};

use crate::types::{ObjectReader, ResourceKey};

/// How `metadata.name` is validated for a type (k8s.io/apimachinery validation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// RFC 1123 subdomain: most types.
    Subdomain,
    /// RFC 1123 label: namespaces.
    Label,
    /// Any path segment (no `/`, `%`, not `.`/`..`): RBAC objects such as
    /// `system:node-bootstrapper`.
    PathSegment,
}

/// What a create does with a client-sent `status`.
#[derive(Clone, Debug, PartialEq)]
pub enum StatusOnCreate {
    Keep,
    Drop,
    Reset(Value),
}

/// One served resource (one group/version/resource).
#[derive(Clone, Debug)]
pub struct ResourceInfo {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub kind: String,
    pub list_kind: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    /// Subresources besides the main one: `status`, `approval`.
    pub subresources: Vec<String>,
    pub verbs: Vec<&'static str>,
    /// A custom resource (unstructured: items keep kind/apiVersion, keys are alphabetical).
    pub custom: bool,
    /// The storage the objects live in (events.k8s.io Events share core Events' storage).
    pub storage: ResourceKey,
    pub name_rule: NameRule,
    pub has_generation: bool,
    /// PUT of a missing object creates it (Events, RBAC).
    pub create_on_update: bool,
    /// PUT without `metadata.resourceVersion` is allowed (false for custom resources).
    pub unconditional_update: bool,
    pub status_on_create: StatusOnCreate,
    /// Known top-level fields of a built-in type; others are dropped with a warning.
    pub known_fields: Option<&'static [&'static str]>,
    /// `additionalPrinterColumns` of a CRD version.
    pub printer_columns: Vec<Value>,
    /// The `openAPIV3Schema` of a CRD version (custom resources pruned and validated by it).
    pub schema: Option<std::sync::Arc<Value>>,
}

const RW_VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

impl ResourceInfo {
    pub fn key(&self) -> ResourceKey {
        ResourceKey::new(&self.group, &self.resource)
    }

    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `secrets` or `certificatesigningrequests.certificates.k8s.io`, as error messages name it.
    pub fn qualified_resource(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

    /// `Secret` or `CertificateSigningRequest.certificates.k8s.io`.
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    pub fn has_subresource(&self, sub: &str) -> bool {
        self.subresources.iter().any(|s| s == sub)
    }

    /// What a subresource serves, as discovery lists it: (group, version, kind, verbs).
    /// `serviceaccounts/token` takes a TokenRequest and only `create`; the
    /// others (`status`, `approval`) are the object itself with get/patch/update.
    pub fn subresource_meta(&self, sub: &str) -> (&str, &str, &str, Vec<&'static str>) {
        if !self.custom && self.resource == "serviceaccounts" && sub == "token" {
            return (
                "authentication.k8s.io",
                "v1",
                "TokenRequest",
                vec!["create"],
            );
        }
        if !self.custom && self.resource == "pods" && sub == "binding" {
            return ("", "", "Binding", vec!["create"]);
        }
        ("", "", self.kind.as_str(), vec!["get", "patch", "update"])
    }

    /// The internal (hub) version name used in conversion error messages: `core` for the
    /// legacy group, the first DNS label of the group otherwise.
    pub fn internal_group(&self) -> &str {
        if self.group.is_empty() {
            "core"
        } else {
            self.group.split('.').next().unwrap_or("")
        }
    }
}

struct Def {
    group: &'static str,
    version: &'static str,
    resource: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    subs: &'static [&'static str],
    known: &'static [&'static str],
}

fn builtin(d: Def) -> ResourceInfo {
    ResourceInfo {
        group: d.group.into(),
        version: d.version.into(),
        resource: d.resource.into(),
        kind: d.kind.into(),
        list_kind: format!("{}List", d.kind),
        singular: d.kind.to_lowercase(),
        namespaced: d.namespaced,
        short_names: d.short.iter().map(|s| s.to_string()).collect(),
        subresources: d.subs.iter().map(|s| s.to_string()).collect(),
        verbs: RW_VERBS.to_vec(),
        custom: false,
        storage: ResourceKey::new(d.group, d.resource),
        name_rule: NameRule::Subdomain,
        has_generation: false,
        create_on_update: false,
        unconditional_update: true,
        status_on_create: StatusOnCreate::Keep,
        known_fields: Some(d.known),
        printer_columns: Vec::new(),
        schema: None,
    }
}

const CORE_EVENT_FIELDS: &[&str] = &[
    "involvedObject",
    "reason",
    "message",
    "source",
    "firstTimestamp",
    "lastTimestamp",
    "count",
    "type",
    "eventTime",
    "series",
    "action",
    "related",
    "reportingComponent",
    "reportingInstance",
];
const EVENTS_V1_FIELDS: &[&str] = &[
    "eventTime",
    "series",
    "reportingController",
    "reportingInstance",
    "action",
    "reason",
    "regarding",
    "related",
    "note",
    "type",
    "deprecatedSource",
    "deprecatedFirstTimestamp",
    "deprecatedLastTimestamp",
    "deprecatedCount",
];

fn builtins() -> &'static [ResourceInfo] {
    static BUILTINS: OnceLock<Vec<ResourceInfo>> = OnceLock::new();
    BUILTINS.get_or_init(|| {
        let mut all = Vec::new();
        let core = |resource, kind, namespaced, short, subs, known| Def {
            group: "",
            version: "v1",
            resource,
            kind,
            namespaced,
            short,
            subs,
            known,
        };
        let mut ns = builtin(core(
            "namespaces",
            "Namespace",
            false,
            &["ns"],
            &["status"],
            &["spec", "status"],
        ));
        ns.name_rule = NameRule::Label;
        ns.verbs = vec![
            "create", "delete", "get", "list", "patch", "update", "watch",
        ];
        ns.status_on_create = StatusOnCreate::Reset(json!({"phase": "Active"}));
        all.push(ns);
        all.push(builtin(core(
            "nodes",
            "Node",
            false,
            &["no"],
            &["status"],
            &["spec", "status"],
        )));
        all.push(builtin(core(
            "secrets",
            "Secret",
            true,
            &[],
            &[],
            &["data", "stringData", "type", "immutable"],
        )));
        all.push(builtin(core(
            "configmaps",
            "ConfigMap",
            true,
            &["cm"],
            &[],
            &["data", "binaryData", "immutable"],
        )));
        let mut events = builtin(core(
            "events",
            "Event",
            true,
            &["ev"],
            &[],
            CORE_EVENT_FIELDS,
        ));
        events.create_on_update = true;
        all.push(events);
        all.push(builtin(core(
            "serviceaccounts",
            "ServiceAccount",
            true,
            &["sa"],
            &["token"],
            &[
                "secrets",
                "imagePullSecrets",
                "automountServiceAccountToken",
            ],
        )));
        // Pods are stored as written (no scheduler, no kubelet runs them, as on the tests'
        // real control plane): a test binds one to a node with spec.nodeName.
        all.push(builtin(core(
            "pods",
            "Pod",
            true,
            &["po"],
            &["status", "binding"],
            &["spec", "status"],
        )));
        // The legacy way to bind a pod (`POST .../namespaces/<ns>/bindings`, the pod named in
        // the body): nothing is stored, the pod is bound.
        let mut bindings = builtin(core("bindings", "Binding", true, &[], &[], &["target"]));
        bindings.verbs = vec!["create"];
        all.push(bindings);
        let mut services = builtin(core(
            "services",
            "Service",
            true,
            &["svc"],
            &["status"],
            &["spec", "status"],
        ));
        // A new Service's status is an empty load balancer (a ClusterIP Service keeps it so).
        services.status_on_create = StatusOnCreate::Reset(json!({"loadBalancer": {}}));
        all.push(services);
        all.push(builtin(Def {
            group: "apps",
            version: "v1",
            resource: "deployments",
            kind: "Deployment",
            namespaced: true,
            short: &["deploy"],
            subs: &["status"],
            known: &["spec", "status"],
        }));
        let mut apps = all.pop().expect("just pushed");
        apps.has_generation = true;
        apps.status_on_create = StatusOnCreate::Reset(json!({}));
        all.push(apps);
        let mut pdb = builtin(Def {
            group: "policy",
            version: "v1",
            resource: "poddisruptionbudgets",
            kind: "PodDisruptionBudget",
            namespaced: true,
            short: &["pdb"],
            subs: &["status"],
            known: &["spec", "status"],
        });
        pdb.has_generation = true;
        // The counters are not omitempty: a new budget shows them as 0.
        pdb.status_on_create = StatusOnCreate::Reset(json!({
            "currentHealthy": 0,
            "desiredHealthy": 0,
            "disruptionsAllowed": 0,
            "expectedPods": 0,
        }));
        all.push(pdb);
        let mut ev1 = builtin(Def {
            group: "events.k8s.io",
            version: "v1",
            resource: "events",
            kind: "Event",
            namespaced: true,
            short: &["ev"],
            subs: &[],
            known: EVENTS_V1_FIELDS,
        });
        ev1.storage = ResourceKey::new("", "events");
        ev1.create_on_update = true;
        all.push(ev1);
        let mut ssr = builtin(Def {
            group: "authentication.k8s.io",
            version: "v1",
            resource: "selfsubjectreviews",
            kind: "SelfSubjectReview",
            namespaced: false,
            short: &[],
            subs: &[],
            known: &["status"],
        });
        ssr.verbs = vec!["create"];
        all.push(ssr);
        // Reviews: nothing is stored, the answer is computed.
        for (group, resource, kind) in [
            ("authentication.k8s.io", "tokenreviews", "TokenReview"),
            (
                "authorization.k8s.io",
                "subjectaccessreviews",
                "SubjectAccessReview",
            ),
        ] {
            let mut review = builtin(Def {
                group,
                version: "v1",
                resource,
                kind,
                namespaced: false,
                short: &[],
                subs: &[],
                known: &["spec", "status"],
            });
            review.verbs = vec!["create"];
            all.push(review);
        }
        let mut csr = builtin(Def {
            group: "certificates.k8s.io",
            version: "v1",
            resource: "certificatesigningrequests",
            kind: "CertificateSigningRequest",
            namespaced: false,
            short: &["csr"],
            subs: &["approval", "status"],
            known: &["spec", "status"],
        });
        csr.status_on_create = StatusOnCreate::Reset(json!({}));
        all.push(csr);
        for (resource, kind, namespaced, known) in [
            (
                "clusterrolebindings",
                "ClusterRoleBinding",
                false,
                &["subjects", "roleRef"][..],
            ),
            (
                "clusterroles",
                "ClusterRole",
                false,
                &["rules", "aggregationRule"][..],
            ),
            (
                "rolebindings",
                "RoleBinding",
                true,
                &["subjects", "roleRef"][..],
            ),
            ("roles", "Role", true, &["rules"][..]),
        ] {
            let mut rbac = builtin(Def {
                group: "rbac.authorization.k8s.io",
                version: "v1",
                resource,
                kind,
                namespaced,
                short: &[],
                subs: &[],
                known,
            });
            rbac.name_rule = NameRule::PathSegment;
            rbac.create_on_update = true;
            all.push(rbac);
        }
        // Stored, and enforced by admission::validating_policy. A new policy's status is
        // the empty struct (upstream's type checker fills it in later); no defaults are
        // filled in.
        let mut policy = builtin(Def {
            group: "admissionregistration.k8s.io",
            version: "v1",
            resource: "validatingadmissionpolicies",
            kind: "ValidatingAdmissionPolicy",
            namespaced: false,
            short: &[],
            subs: &["status"],
            known: &["spec", "status"],
        });
        policy.has_generation = true;
        policy.status_on_create = StatusOnCreate::Reset(json!({}));
        all.push(policy);
        let mut policy_binding = builtin(Def {
            group: "admissionregistration.k8s.io",
            version: "v1",
            resource: "validatingadmissionpolicybindings",
            kind: "ValidatingAdmissionPolicyBinding",
            namespaced: false,
            short: &[],
            subs: &[],
            known: &["spec"],
        });
        policy_binding.has_generation = true;
        all.push(policy_binding);
        // Stored, and applied by admission::mutating_policy (v1 has no status).
        for (resource, kind) in [
            ("mutatingadmissionpolicies", "MutatingAdmissionPolicy"),
            (
                "mutatingadmissionpolicybindings",
                "MutatingAdmissionPolicyBinding",
            ),
        ] {
            let mut mutating = builtin(Def {
                group: "admissionregistration.k8s.io",
                version: "v1",
                resource,
                kind,
                namespaced: false,
                short: &[],
                subs: &[],
                known: &["spec"],
            });
            mutating.has_generation = true;
            all.push(mutating);
        }
        let mut crd = builtin(Def {
            group: "apiextensions.k8s.io",
            version: "v1",
            resource: "customresourcedefinitions",
            kind: "CustomResourceDefinition",
            namespaced: false,
            short: &["crd", "crds"],
            subs: &["status"],
            known: &["spec", "status"],
        });
        crd.has_generation = true;
        crd.status_on_create = StatusOnCreate::Reset(json!({
            "conditions": null,
            "acceptedNames": {"plural": "", "kind": ""},
            "storedVersions": [],
        }));
        all.push(crd);
        all.push(builtin(Def {
            group: "coordination.k8s.io",
            version: "v1",
            resource: "leases",
            kind: "Lease",
            namespaced: true,
            short: &[],
            subs: &[],
            known: &["spec"],
        }));
        all
    })
}

/// The built-in groups in the real server's priority order (as `GET /apis` lists them),
/// then CRD groups.
const GROUP_ORDER: &[&str] = &[
    "apps",
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "certificates.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "coordination.k8s.io",
];

pub fn crd_key() -> ResourceKey {
    ResourceKey::new("apiextensions.k8s.io", "customresourcedefinitions")
}

/// The ResourceInfos a stored CRD defines, one per served version.
pub fn from_crd(crd: &Value) -> Vec<ResourceInfo> {
    let spec = &crd["spec"];
    let (Some(group), Some(plural), Some(kind)) = (
        spec["group"].as_str(),
        spec["names"]["plural"].as_str(),
        spec["names"]["kind"].as_str(),
    ) else {
        return Vec::new();
    };
    let names = &spec["names"];
    let list_kind = names["listKind"]
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| format!("{kind}List"));
    let singular = names["singular"]
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| kind.to_lowercase());
    let short_names: Vec<String> = names["shortNames"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let namespaced = spec["scope"].as_str() == Some("Namespaced");
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    versions
        .iter()
        .filter(|v| v["served"].as_bool().unwrap_or(false))
        .filter_map(|v| {
            let version = v["name"].as_str()?;
            let mut subresources = Vec::new();
            if v["subresources"]["status"].is_object() {
                subresources.push("status".to_string());
            }
            Some(ResourceInfo {
                group: group.into(),
                version: version.into(),
                resource: plural.into(),
                kind: kind.into(),
                list_kind: list_kind.clone(),
                singular: singular.clone(),
                namespaced,
                short_names: short_names.clone(),
                subresources,
                verbs: RW_VERBS.to_vec(),
                custom: true,
                storage: ResourceKey::new(group, plural),
                name_rule: NameRule::Subdomain,
                has_generation: true,
                create_on_update: false,
                unconditional_update: false,
                status_on_create: if v["subresources"]["status"].is_object() {
                    StatusOnCreate::Drop
                } else {
                    StatusOnCreate::Keep
                },
                known_fields: None,
                printer_columns: v["additionalPrinterColumns"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default(),
                schema: v["schema"]["openAPIV3Schema"]
                    .as_object()
                    .map(|s| std::sync::Arc::new(Value::Object(s.clone()))),
            })
        })
        .collect()
}

/// Every served resource: built-ins, then those of the stored CRDs.
pub fn all(reader: &dyn ObjectReader) -> Vec<ResourceInfo> {
    let mut out: Vec<ResourceInfo> = builtins().to_vec();
    for crd in reader.list(&crd_key(), None) {
        if crd_established(crd) {
            out.extend(built(crd).iter().cloned());
        }
    }
    out
}

/// The served resource of a kind (`apiVersion` and `kind`, as a policy's `paramKind`
/// names one): a built-in, else a version of an established CRD.
pub fn by_kind(reader: &dyn ObjectReader, api_version: &str, kind: &str) -> Option<ResourceInfo> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    if let Some(found) = builtins()
        .iter()
        .find(|r| r.group == group && r.version == version && r.kind == kind)
    {
        return Some(found.clone());
    }
    reader
        .list(&crd_key(), None)
        .into_iter()
        .filter(|crd| crd["spec"]["group"] == group && crd["spec"]["names"]["kind"] == kind)
        .filter(|crd| crd_established(crd))
        .find_map(|crd| built(crd).iter().find(|r| r.version == version).cloned())
}

/// A CRD's resources, built once per CRD revision: requests to custom resources resolve
/// them, and building clones the CRD's schemas.
fn built(crd: &Value) -> std::sync::Arc<Vec<ResourceInfo>> {
    type Built = std::collections::HashMap<(String, String), std::sync::Arc<Vec<ResourceInfo>>>;
    static BUILT: std::sync::OnceLock<std::sync::Mutex<Built>> = std::sync::OnceLock::new();
    let key = (
        crd["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        crd["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    );
    let mut built = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if built.len() > 256 {
        built.clear();
    }
    built
        .entry(key)
        .or_insert_with(|| std::sync::Arc::new(from_crd(crd)))
        .clone()
}

/// A CRD is served once the apiextensions controller marked it Established.
pub fn crd_established(crd: &Value) -> bool {
    crd["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
    })
}

pub fn resolve(
    reader: &dyn ObjectReader,
    group: &str,
    version: &str,
    resource: &str,
) -> Option<ResourceInfo> {
    if let Some(found) = builtins()
        .iter()
        .find(|r| r.group == group && r.version == version && r.resource == resource)
    {
        return Some(found.clone());
    }
    if builtins().iter().any(|r| r.group == group) {
        return None;
    }
    let crd = reader.get(&crd_key(), None, &format!("{resource}.{group}"))?;
    if !crd_established(crd) {
        return None;
    }
    built(crd).iter().find(|r| r.version == version).cloned()
}

/// Groups with their versions, in discovery order: built-ins by priority, then CRD groups
/// alphabetically.
pub fn groups(reader: &dyn ObjectReader) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut all = all(reader);
    all.sort_by_key(|r| {
        let rank = GROUP_ORDER
            .iter()
            .position(|g| *g == r.group)
            .unwrap_or(GROUP_ORDER.len());
        (rank, r.group.clone())
    });
    for r in all.iter().filter(|r| !r.group.is_empty()) {
        match out.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, versions)) => {
                if !versions.contains(&r.version) {
                    versions.push(r.version.clone());
                }
            }
            None => out.push((r.group.clone(), vec![r.version.clone()])),
        }
    }
    out
}

/// The resources of one group/version, sorted by name as the real discovery lists them.
pub fn resources_in(reader: &dyn ObjectReader, group: &str, version: &str) -> Vec<ResourceInfo> {
    let mut list: Vec<ResourceInfo> = all(reader)
        .into_iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    list.sort_by(|a, b| a.resource.cmp(&b.resource));
    list
}

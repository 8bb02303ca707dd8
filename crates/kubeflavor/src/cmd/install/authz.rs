//! The authorization webhook's part of the install (P7, revocation that cuts off): with
//! `--authz-webhook`, every controller replica serves it and a Service fronts them; with
//! `--authz-config`, the API server's side: the `AuthorizationConfiguration` entry, the
//! kubeconfig it names, and how to set both with kubeadm.

use k8s_openapi::api::core::v1::{
    SecretVolumeSource, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::pods::selector_of;
use super::{Document, object_meta};
use crate::output::yaml::comment;

/// The webhook's container port.
pub const AUTHZ_PORT: i32 = 8443;
/// The Service in front of every replica.
pub const AUTHZ_SERVICE: &str = "kubeflavor-authz";
/// The Secret the operator creates: `tls.crt`, `tls.key` (the webhook's serving
/// certificate) and `client-ca.crt` (the CA of the API server's client certificate).
pub const AUTHZ_TLS_SECRET: &str = "kubeflavor-authz-tls";
/// kubeadm's API server client certificate for kubelets, which the webhook kubeconfig
/// re-uses: signed by the cluster CA, present on every control-plane node.
pub const KUBEADM_CLIENT_CN: &str = "kube-apiserver-kubelet-client";
const MOUNT: &str = "/etc/kubeflavor/authz";
const VOLUME: &str = "authz-tls";
/// The controller pods' selector component.
const COMPONENT: &str = "controller";

/// The controller's flags that serve the webhook.
pub fn args() -> Vec<String> {
    vec![
        format!("--authz-address=0.0.0.0:{AUTHZ_PORT}"),
        format!("--authz-tls-cert-file={MOUNT}/tls.crt"),
        format!("--authz-tls-key-file={MOUNT}/tls.key"),
        format!("--authz-client-ca-file={MOUNT}/client-ca.crt"),
        format!("--authz-client-cn={KUBEADM_CLIENT_CN}"),
    ]
}

pub fn volume() -> Volume {
    Volume {
        name: VOLUME.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(AUTHZ_TLS_SECRET.into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn mount() -> VolumeMount {
    VolumeMount {
        name: VOLUME.into(),
        mount_path: MOUNT.into(),
        read_only: Some(true),
        ..Default::default()
    }
}

/// What the controller's flags add with `--authz-webhook`.
pub fn args_note() -> String {
    format!(
        " --authz-*: every replica, leader or not, serves the authorization webhook on port \
         {AUTHZ_PORT} with the certificate of Secret {AUTHZ_TLS_SECRET} (tls.crt, tls.key, which \
         you create), and answers only a client certificate signed by its client-ca.crt with CN \
         {KUBEADM_CLIENT_CN}: kubeadm's API server client certificate, signed by the cluster CA \
         that also signs every kubelet's, so the CN is what keeps nodes from asking."
    )
}

/// The Service the API server calls: every replica answers, ready or not.
pub fn service(namespace: &str) -> Document {
    let service = Service {
        metadata: object_meta(AUTHZ_SERVICE, Some(namespace), COMPONENT),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(selector_of(COMPONENT)),
            publish_not_ready_addresses: Some(true),
            ports: Some(vec![ServicePort {
                name: Some("authz".into()),
                port: 443,
                target_port: Some(IntOrString::String("authz".into())),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    };
    Document::new(
        "The authorization webhook in front of every controller replica (each answers from its \
         own index, leader or not). kube-apiserver runs on the host network and resolves names \
         with the host's resolver, not cluster DNS: its webhook kubeconfig names this Service's \
         ClusterIP (kubectl get svc kubeflavor-authz -n <namespace> -o \
         jsonpath='{.spec.clusterIP}'), which kube-proxy routes on control-plane nodes; the \
         serving certificate in Secret kubeflavor-authz-tls must carry that IP as a SAN. See \
         kubeflavor install --authz-config.",
        &service,
    )
    .note(
        "spec.publishNotReadyAddresses",
        "The webhook has its own readiness: a replica answers 503 until its index has synced, \
         and the API server then applies the failurePolicy. The pod's /readyz speaks of the \
         CSR approver (not ready while another approver competes, or while a new leader's \
         caches sync); were the Service to follow it, the webhook could lose every replica at \
         once and revoked nodes would get the failurePolicy's answer instead of a denial.",
    )
    .note(
        "spec.ports",
        &format!("443 to the pods' authz port ({AUTHZ_PORT})."),
    )
}

/// The API server's side, printed by `install --authz-config`. Long as one text literal:
/// the three documents as the operator reads them, comments included.
pub fn config(namespace: &str) -> String {
    let mut text = comment(
        &format!(
            "kubeflavor {}: the API server's side of the authorization webhook (P7, revocation \
             that cuts off). Install the webhook first (kubeflavor install --apply \
             --authz-webhook, and the Secret {AUTHZ_TLS_SECRET} in {namespace}), then put the \
             first document on every control-plane node as \
             /etc/kubernetes/authorization-config.yaml and the second as \
             /etc/kubernetes/kubeflavor-authz.kubeconfig, and start kube-apiserver with \
             --authorization-config=/etc/kubernetes/authorization-config.yaml instead of \
             --authorization-mode (the two exclude each other). The third document does it with \
             kubeadm.",
            env!("CARGO_PKG_VERSION")
        ),
        "",
    );
    text.push_str(&format!(
        r#"---
apiVersion: apiserver.config.k8s.io/v1
kind: AuthorizationConfiguration
authorizers:
# First, before Node and RBAC: an authorizer that says "deny" ends the decision, so
# kubeflavor's denial of a revoked node wins over the Node authorizer's allow. kubeflavor
# never allows: for everything else it has no opinion and Node, then RBAC, decide as before.
- type: Webhook
  name: kubeflavor
  webhook:
    # Each replica answers from memory (tens of microseconds unloaded, see the README);
    # 2 s covers a replica that is busy or a connection to open.
    timeout: 2s
    subjectAccessReviewVersion: v1
    matchConditionSubjectAccessReviewVersion: v1
    # Caching: kubeflavor answers "no opinion" with allowed=false, which the API server
    # caches for unauthorizedTTL. A node revoked while an answer about one of its requests
    # is cached keeps that access until the entry expires, so the cut-off bound is the
    # controller's watch delay (milliseconds) plus unauthorizedTTL. 0s, with caching off,
    # makes it the watch delay alone at the price of one webhook call per kubelet request;
    # a few seconds bounds both. authorizedTTL does not matter: kubeflavor never allows.
    authorizedTTL: 0s
    cacheAuthorizedRequests: false
    unauthorizedTTL: 0s
    cacheUnauthorizedRequests: false
    # What a request of a node gets when no replica answers (all down, not ready, timeout):
    # - NoOpinion: Node and RBAC decide as if there were no webhook; revoked nodes are back
    #   in until a replica answers again (the cluster is as it is without kubeflavor's
    #   webhook). A request that Node and RBAC would not allow fails with 500.
    # - Deny: every node is refused (403): kubelets cannot post status, renew leases or
    #   read their pods' Secrets, and nodes go NotReady after the node-monitor grace period.
    #   Choose Deny only with replicas spread over failure domains.
    failurePolicy: NoOpinion
    connectionInfo:
      type: KubeConfigFile
      kubeConfigFile: /etc/kubernetes/kubeflavor-authz.kubeconfig
    matchConditions:
    # Only kubelets are asked about: every other request (users, controllers, the
    # controller itself) never reaches the webhook, so it can neither slow nor break them.
    - expression: "'system:nodes' in request.groups"
- type: Node
  name: node
- type: RBAC
  name: rbac
---
# The webhook kubeconfig. server: the ClusterIP of Service {AUTHZ_SERVICE} in {namespace}
# (the API server does not resolve cluster DNS names). The client certificate is kubeadm's
# apiserver-kubelet-client (CN {KUBEADM_CLIENT_CN}, signed by the cluster CA): put the
# cluster CA in the Secret's client-ca.crt.
apiVersion: v1
kind: Config
clusters:
- name: kubeflavor-authz
  cluster:
    server: https://<ClusterIP of {AUTHZ_SERVICE}>:443/authorize
    # The CA that signed the webhook's serving certificate (tls.crt of {AUTHZ_TLS_SECRET}).
    certificate-authority: /etc/kubernetes/pki/kubeflavor-authz-ca.crt
users:
- name: kube-apiserver
  user:
    client-certificate: /etc/kubernetes/pki/apiserver-kubelet-client.crt
    client-key: /etc/kubernetes/pki/apiserver-kubelet-client.key
contexts:
- name: kubeflavor-authz
  context:
    cluster: kubeflavor-authz
    user: kube-apiserver
current-context: kubeflavor-authz
---
# With kubeadm: merge into your ClusterConfiguration (kubeadm init --config, or kubectl
# edit cm kubeadm-config -n kube-system then kubeadm upgrade apply/node on each
# control-plane node). kubeadm then starts kube-apiserver with --authorization-config and
# without --authorization-mode, and mounts the files read-only into its static Pod.
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
apiServer:
  extraArgs:
  - name: authorization-config
    value: /etc/kubernetes/authorization-config.yaml
  extraVolumes:
  - name: authorization-config
    hostPath: /etc/kubernetes/authorization-config.yaml
    mountPath: /etc/kubernetes/authorization-config.yaml
    readOnly: true
    pathType: File
  - name: kubeflavor-authz-kubeconfig
    hostPath: /etc/kubernetes/kubeflavor-authz.kubeconfig
    mountPath: /etc/kubernetes/kubeflavor-authz.kubeconfig
    readOnly: true
    pathType: File
"#
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::super::{Mode, default_image, documents};
    use super::*;

    #[test]
    fn authz_webhook_runs_in_every_controller_replica_behind_a_service() {
        let mode = Mode {
            authz: true,
            ..Mode::default_install()
        };
        let docs = documents("kubeflavor", &default_image(), 2, mode);
        let deployment = docs
            .iter()
            .find(|d| d.kind() == "Deployment" && d.name() == "kubeflavor-controller")
            .unwrap();
        let pod = &deployment.object["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        let args: Vec<&str> = c["args"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|a| a.as_str())
            .collect();
        for flag in args_owned() {
            assert!(args.contains(&flag.as_str()), "{flag} in {args:?}");
        }
        assert!(
            args.contains(&"--leader-elect"),
            "the same replicas elect a leader"
        );
        assert_eq!(c["ports"][1]["name"], "authz");
        assert_eq!(pod["volumes"][0]["secret"]["secretName"], AUTHZ_TLS_SECRET);
        assert_eq!(c["volumeMounts"][0]["mountPath"], MOUNT);
        let service = docs.iter().find(|d| d.name() == AUTHZ_SERVICE).unwrap();
        assert_eq!(service.kind(), "Service");
        assert_eq!(
            service.object["spec"]["selector"],
            deployment.object["spec"]["selector"]["matchLabels"]
        );
        // The pods' readiness is the CSR approver's: a strict controller facing a competing
        // approver is not ready on any replica, and the webhook must still answer.
        assert_eq!(service.object["spec"]["publishNotReadyAddresses"], true);
        assert!(service.render().is_ok());
        assert!(deployment.render().is_ok());

        let plain = documents("kubeflavor", &default_image(), 2, Mode::default_install());
        assert!(plain.iter().all(|d| d.name() != AUTHZ_SERVICE));
    }

    fn args_owned() -> Vec<String> {
        args()
    }

    #[test]
    fn every_document_of_the_authz_config_parses() {
        let text = config("kubeflavor");
        let docs: Vec<serde_json::Value> = text
            .split("\n---\n")
            .skip(1)
            .map(|d| serde_saphyr::from_str(d).unwrap())
            .collect();
        assert_eq!(docs.len(), 3);
        let webhook = &docs[0]["authorizers"][0];
        assert_eq!(webhook["type"], "Webhook");
        assert_eq!(docs[0]["authorizers"][1]["type"], "Node");
        assert_eq!(docs[0]["authorizers"][2]["type"], "RBAC");
        assert_eq!(
            webhook["webhook"]["matchConditions"][0]["expression"],
            "'system:nodes' in request.groups"
        );
        assert_eq!(webhook["webhook"]["failurePolicy"], "NoOpinion");
        assert_eq!(docs[1]["kind"], "Config");
        assert_eq!(
            docs[2]["apiServer"]["extraArgs"][0]["name"],
            "authorization-config"
        );
    }
}

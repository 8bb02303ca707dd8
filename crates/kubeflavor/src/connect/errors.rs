//! From kube-rs errors to the one line a user reads. The API server's Status carries what
//! matters (reason, message); transport errors mean the server was not reached at all.

use kube::core::Status;

use super::Origin;
use crate::error::CliError;
use crate::exit::ExitCode;

/// `doing` completes "cannot ..." (for example "create the token Secret").
pub(super) fn to_cli_error(origin: &Origin, doing: &str, err: kube::Error) -> CliError {
    match err {
        kube::Error::Api(status) => status_error(origin, doing, &status),
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::RustlsTls(_) => {
            CliError::bare(
                ExitCode::Unreachable,
                format!(
                    "cannot reach the cluster at {} ({origin}): {}",
                    origin.server,
                    root_cause(&err)
                ),
            )
        }
        kube::Error::Auth(_) => CliError::new(
            ExitCode::Forbidden,
            format!(
                "cannot get credentials for {} ({origin}): {}",
                origin.server,
                root_cause(&err)
            ),
            "fix the user entry of the kubeconfig",
        ),
        other => CliError::failed(
            format!("cannot {doing}: {}", root_cause(&other)),
            format!("server {} ({origin})", origin.server),
        ),
    }
}

fn status_error(origin: &Origin, doing: &str, status: &Status) -> CliError {
    match status.code {
        401 => CliError::new(
            ExitCode::Forbidden,
            format!(
                "the cluster at {} rejected the credentials ({origin}): 401 Unauthorized",
                origin.server
            ),
            "the token or certificate is wrong or expired; refresh the kubeconfig",
        ),
        403 => forbidden(status),
        404 if status.reason != "NotFound" => CliError::not_found(
            format!(
                "cannot {doing}: the API server does not serve this resource ({})",
                status.message
            ),
            "are the kubeflavor CRDs installed? run 'kubeflavor install --apply'",
        ),
        404 => CliError::not_found(
            format!("cannot {doing}: {}", status.message),
            "check the name",
        ),
        422 => CliError::refused(
            format!(
                "cannot {doing}: the API server rejected it: {}",
                status.message
            ),
            "fix the value it names",
        ),
        409 => CliError::failed(
            format!("cannot {doing}: {}", status.message),
            "it changed or exists already; retry or pick another name",
        ),
        code => CliError::failed(
            format!(
                "cannot {doing}: {} {} {}",
                code, status.reason, status.message
            ),
            format!("server {} ({origin})", origin.server),
        ),
    }
}

/// An RBAC 403 names the user, verb, resource, group and scope: turn that into the
/// permission to ask for.
fn forbidden(status: &Status) -> CliError {
    match Denial::parse(&status.message) {
        Some(d) => {
            let group = if d.group.is_empty() {
                "core".to_string()
            } else {
                d.group.clone()
            };
            let scope = match &d.namespace {
                Some(ns) => format!("in namespace {ns}"),
                None => "cluster-wide".to_string(),
            };
            CliError::new(
                ExitCode::Forbidden,
                format!(
                    "forbidden: user {} may not {} {} {scope}",
                    d.user, d.verb, d.resource
                ),
                format!(
                    "ask a cluster admin for RBAC permission '{}' on '{}' (API group {group}) {scope}, \
                     or use a kubeconfig that has it",
                    d.verb, d.resource
                ),
            )
        }
        None => CliError::new(
            ExitCode::Forbidden,
            format!("forbidden: {}", status.message),
            "ask a cluster admin for the permission it names",
        ),
    }
}

/// The parts of `User "u" cannot <verb> resource "<r>" in API group "<g>" [in the namespace
/// "<ns>"|at the cluster scope]`.
#[derive(Debug, PartialEq, Eq)]
struct Denial {
    user: String,
    verb: String,
    resource: String,
    group: String,
    namespace: Option<String>,
}

impl Denial {
    fn parse(message: &str) -> Option<Denial> {
        let rest = &message[message.find("User \"")? + 6..];
        let (user, rest) = rest.split_once("\" cannot ")?;
        let (verb, rest) = rest.split_once(" resource \"")?;
        let (resource, rest) = rest.split_once('"')?;
        let rest = rest.strip_prefix(" in API group \"")?;
        let (group, rest) = rest.split_once('"')?;
        let namespace = rest
            .strip_prefix(" in the namespace \"")
            .and_then(|r| r.split_once('"'))
            .map(|(ns, _)| ns.to_string());
        Some(Denial {
            user: user.into(),
            verb: verb.into(),
            resource: resource.into(),
            group: group.into(),
            namespace,
        })
    }
}

/// The innermost cause of a transport error ("Connection refused (os error 111)").
fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut last = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        last = inner.to_string();
        source = inner.source();
    }
    last.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin() -> Origin {
        Origin {
            server: "https://127.0.0.1:6443".into(),
            kubeconfig: "/k/config".into(),
            context: "admin".into(),
        }
    }

    fn status(code: u16, reason: &str, message: &str) -> kube::Error {
        let mut s = Status::failure(message, reason).with_code(code);
        s.reason = reason.into();
        kube::Error::Api(Box::new(s))
    }

    #[test]
    fn namespaced_rbac_denial_names_the_permission() {
        // Message exactly as kube-apiserver's RBAC authorizer words it.
        let err = status(
            403,
            "Forbidden",
            "secrets is forbidden: User \"system:bootstrap:abcdef\" cannot list resource \"secrets\" \
             in API group \"\" in the namespace \"kube-system\"",
        );
        let e = to_cli_error(&origin(), "list tokens", err);
        assert_eq!(e.code, ExitCode::Forbidden);
        assert_eq!(
            e.message,
            "forbidden: user system:bootstrap:abcdef may not list secrets in namespace kube-system \
             (ask a cluster admin for RBAC permission 'list' on 'secrets' (API group core) in \
             namespace kube-system, or use a kubeconfig that has it)"
        );
    }

    #[test]
    fn cluster_scoped_rbac_denial_says_cluster_wide() {
        let err = status(
            403,
            "Forbidden",
            "nodes is forbidden: User \"system:bootstrap:abcdef\" cannot list resource \"nodes\" in \
             API group \"\" at the cluster scope",
        );
        let e = to_cli_error(&origin(), "list nodes", err);
        assert!(e.message.starts_with(
            "forbidden: user system:bootstrap:abcdef may not list nodes cluster-wide"
        ));
    }

    #[test]
    fn unparsable_denial_keeps_the_server_message() {
        let e = to_cli_error(
            &origin(),
            "x",
            status(403, "Forbidden", "nodes \"a\" is forbidden: odd"),
        );
        assert_eq!(e.code, ExitCode::Forbidden);
        assert!(e.message.contains("odd"));
    }

    #[test]
    fn plain_text_404_points_at_missing_crds() {
        let e = to_cli_error(
            &origin(),
            "get flavor sweet",
            status(404, "Failed to parse error data", "404 page not found"),
        );
        assert_eq!(e.code, ExitCode::NotFound);
        assert!(e.message.contains("kubeflavor install --apply"), "{e}");
    }

    #[test]
    fn unauthorized_is_a_forbidden_exit() {
        let e = to_cli_error(&origin(), "x", status(401, "Unauthorized", "Unauthorized"));
        assert_eq!(e.code, ExitCode::Forbidden);
        assert!(e.message.contains("https://127.0.0.1:6443"));
        assert!(e.message.contains("/k/config"));
    }
}

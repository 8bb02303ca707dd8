//! The ValidatingAdmissionPolicy (and its binding) keeping the controller's trail the
//! controller's: an Event that names `kubeflavor.io/controller` as its reporter is refused
//! unless the controller's ServiceAccount writes it (kubeflavor_core::admission::trail).

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, ValidatingAdmissionPolicy, ValidatingAdmissionPolicySpec,
};
use kubeflavor_core::admission::trail::{self, CONTROLLER_REPORTER, EventApi};

use super::rbac::CONTROLLER_SA;
use super::{Document, object_meta};

const COMPONENT: &str = "controller";

/// The controller's ServiceAccount, as the API server names its requests.
fn controller_user(namespace: &str) -> String {
    format!("system:serviceaccount:{namespace}:{CONTROLLER_SA}")
}

/// Each Event API's policy and its binding.
pub fn documents(namespace: &str) -> Vec<Document> {
    EventApi::ALL
        .into_iter()
        .flat_map(|api| policy(namespace, api))
        .collect()
}

/// The policy on `api`'s Events and its binding.
fn policy(namespace: &str, api: EventApi) -> [Document; 2] {
    let (expression, message) = trail::rule(api);
    let name = api.policy_name();
    let policy = ValidatingAdmissionPolicy {
        metadata: object_meta(name, None, COMPONENT),
        spec: Some(ValidatingAdmissionPolicySpec {
            match_conditions: Some(vec![MatchCondition {
                name: "not-the-controller".into(),
                expression: trail::applies_to(&controller_user(namespace)),
            }]),
            validations: Some(super::admission::validations([(expression, message)])),
            ..super::admission::matching(
                &[api.group()],
                &["v1"],
                &["CREATE", "UPDATE"],
                &["events"],
            )
        }),
        status: None,
    };
    [
        Document::new(
            &format!(
                "The trail is the controller's alone. RBAC lets the controller and the join-token \
                 API create Events but cannot say which; this policy refuses any Event whose \
                 reporter (events.k8s.io reportingController or deprecatedSource.component, core \
                 reportingComponent or source.component) is {CONTROLLER_REPORTER} unless the \
                 controller's ServiceAccount writes it, so a stolen join-token API token cannot \
                 write \"approved\" into the trail. Readers of the trail select the controller's \
                 Events by that field."
            ),
            &policy,
        )
        .note(
            "spec.failurePolicy",
            "Fail: a rule that cannot be evaluated refuses the request.",
        )
        .note(
            "spec.matchConstraints",
            "Creates and updates of Events in this API. core/v1 and events.k8s.io/v1 are the \
             same objects, each API judged by its own policy (the API server type-checks a rule \
             against each API it matches, and each names the reporter in its own fields).",
        )
        .note(
            "spec.matchConditions",
            "Everyone but the controller's ServiceAccount and system:masters (which bypasses \
             authorization and could delete this policy; an admin kubeconfig running the \
             controller outside the cluster carries it).",
        )
        .note(
            "spec.validations",
            "The Event, and on an update the Event it replaces, names another reporter.",
        ),
        super::admission::deny_binding(
            name,
            COMPONENT,
            None,
            "Makes the API server enforce the policy above on every matching request.",
        ),
    ]
}

//! Who may write the controller's trail. The trail (Events in kube-system) is where an admin
//! reads why kubeflavor approved or denied a node, so an Event that says it comes from the
//! controller must come from the controller. RBAC grants `create events` to the controller
//! and to the join-token API alike and cannot say which Events; `install` ships these rules
//! as a ValidatingAdmissionPolicy: an Event naming the controller as its reporter, in
//! either API (events.k8s.io/v1 `reportingController` or `deprecatedSource.component`,
//! core/v1 `reportingComponent` or `source.component`), is refused unless the controller's
//! ServiceAccount writes it (one policy per API, see [`EventApi`]). The trail's readers select the controller's Events by the
//! same field ([`is_controllers`]).
//!
//! `system:masters` passes too: that group bypasses authorization and can delete the
//! policy anyway, and it is what an admin kubeconfig carries when the controller runs
//! outside the cluster (`kubeflavor --kubeconfig admin.conf controller`).

/// The controller's name in its Events' reporting fields.
pub const CONTROLLER_REPORTER: &str = "kubeflavor.io/controller";
/// The Event APIs, each judged by its own ValidatingAdmissionPolicy (and binding): the API
/// server type-checks a rule against the schema of each API it matches, and each API names
/// the reporter in fields the other lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventApi {
    /// events.k8s.io/v1: `reportingController`, `deprecatedSource.component`.
    Events,
    /// core/v1: `reportingComponent`, `source.component`.
    Core,
}

impl EventApi {
    pub const ALL: [EventApi; 2] = [EventApi::Events, EventApi::Core];

    /// The API group ("" for core).
    pub fn group(self) -> &'static str {
        match self {
            EventApi::Events => "events.k8s.io",
            EventApi::Core => "",
        }
    }

    /// The policy's (and its binding's) name.
    pub fn policy_name(self) -> &'static str {
        match self {
            EventApi::Events => POLICY_NAME,
            EventApi::Core => CORE_POLICY_NAME,
        }
    }

    /// The fields that name who reports the Event: (field, subfield).
    fn reporter_fields(self) -> [(&'static str, Option<&'static str>); 2] {
        match self {
            EventApi::Events => [
                ("reportingController", None),
                ("deprecatedSource", Some("component")),
            ],
            EventApi::Core => [("reportingComponent", None), ("source", Some("component"))],
        }
    }
}

/// The ValidatingAdmissionPolicy (and its binding) on events.k8s.io/v1 Events.
pub const POLICY_NAME: &str = "kubeflavor-controller-events";
/// The one on core/v1 Events.
pub const CORE_POLICY_NAME: &str = "kubeflavor-controller-core-events";
/// The group allowed besides the controller (see the module documentation).
pub const MASTERS_GROUP: &str = "system:masters";

/// `s` as a CEL string literal.
fn cel_string(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The CEL condition selecting the requests the policy judges: everyone's but the
/// controller's (`controller_user`, its ServiceAccount's username) and system:masters'.
pub fn applies_to(controller_user: &str) -> String {
    format!(
        "request.userInfo.username != {} && !({} in request.userInfo.groups)",
        cel_string(controller_user),
        cel_string(MASTERS_GROUP)
    )
}

/// CEL: `obj` names the controller in any reporter field of `api`.
fn names_controller(api: EventApi, obj: &str) -> String {
    let reporter = cel_string(CONTROLLER_REPORTER);
    api.reporter_fields()
        .iter()
        .map(|(field, sub)| match sub {
            None => format!("(has({obj}.{field}) && {obj}.{field} == {reporter})"),
            Some(sub) => format!(
                "(has({obj}.{field}) && has({obj}.{field}.{sub}) && {obj}.{field}.{sub} == {reporter})"
            ),
        })
        .collect::<Vec<_>>()
        .join(" || ")
}

/// The rule: the Event (as written, and as it was on an update) does not name the
/// controller; and its message.
pub fn rule(api: EventApi) -> (String, String) {
    (
        format!(
            "!({}) && (oldObject == null || !({}))",
            names_controller(api, "object"),
            names_controller(api, "oldObject")
        ),
        format!(
            "only the kubeflavor controller's ServiceAccount may write Events reported by {CONTROLLER_REPORTER}"
        ),
    )
}

/// Whether an Event is the controller's, by its reporter (events.k8s.io/v1
/// `reportingController`): what the trail's readers select on.
pub fn is_controllers(reporting_controller: Option<&str>) -> bool {
    reporting_controller == Some(CONTROLLER_REPORTER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_judges_everyone_but_the_controller_and_masters() {
        let c = applies_to("system:serviceaccount:kubeflavor:kubeflavor-controller");
        assert_eq!(
            c,
            "request.userInfo.username != 'system:serviceaccount:kubeflavor:kubeflavor-controller' \
             && !('system:masters' in request.userInfo.groups)"
        );
        assert_eq!(
            applies_to("a'b"),
            "request.userInfo.username != 'a\\'b' && !('system:masters' in request.userInfo.groups)"
        );
    }

    #[test]
    fn the_rule_reads_every_reporter_field_of_both_apis_old_and_new() {
        let (rule, message) = rule(EventApi::Events);
        for field in [
            "object.reportingController == 'kubeflavor.io/controller'",
            "object.deprecatedSource.component == 'kubeflavor.io/controller'",
            "oldObject.reportingController == 'kubeflavor.io/controller'",
            "oldObject.deprecatedSource.component == 'kubeflavor.io/controller'",
        ] {
            assert!(rule.contains(field), "{field} missing from {rule}");
        }
        assert!(!rule.contains("reportingComponent"), "{rule}");
        assert!(message.contains("kubeflavor.io/controller"));
        let (rule, _) = super::rule(EventApi::Core);
        for field in [
            "object.reportingComponent == 'kubeflavor.io/controller'",
            "object.source.component == 'kubeflavor.io/controller'",
            "oldObject.source.component == 'kubeflavor.io/controller'",
        ] {
            assert!(rule.contains(field), "{field} missing from {rule}");
        }
        assert!(!rule.contains("reportingController"), "{rule}");
    }

    #[test]
    fn readers_select_by_reporter() {
        assert!(is_controllers(Some("kubeflavor.io/controller")));
        assert!(!is_controllers(Some("kubeflavor.io/serve")));
        assert!(!is_controllers(None));
    }
}

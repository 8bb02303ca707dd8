//! The controller's trail is its own: the join-token API's identity (which RBAC lets create
//! Events in kube-system) cannot write an Event that says it comes from the controller, in
//! either Event API, while its own Events and an admin's pass. Every write is a dry run:
//! it goes through admission and stores nothing.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use kubeflavor::cmd::install::SERVE;
use kubeflavor_cluster::ops::trail::{self, Regarding, TRAIL_NAMESPACE};
use kubeflavor_core::admission::trail::{CONTROLLER_REPORTER, CORE_POLICY_NAME, POLICY_NAME};

use crate::harness::*;
use crate::support::portal::service_account_token;

/// How long a real API server may take to enforce a policy just applied (its admission
/// plugin reads policies from an informer).
const POLICY_PROPAGATION: Duration = Duration::from_secs(30);

fn dry() -> PostParams {
    PostParams {
        dry_run: true,
        ..Default::default()
    }
}

/// An events.k8s.io Event about a CSR of this run, reported by `reporter`.
fn event(h: &Harness, reporter: &str) -> Event {
    trail::event(
        reporter,
        "forged",
        Regarding {
            api_version: "certificates.k8s.io/v1",
            kind: "CertificateSigningRequest",
            name: &h.name("csr"),
            uid: None,
        },
        ("Normal", "Approve", "CSRApproved"),
        "approved by kubeflavor",
    )
}

/// A core/v1 Event about the same CSR, its reporter in `reportingComponent` or in
/// `source.component`.
fn core_event(h: &Harness, reporting_component: Option<&str>, source: Option<&str>) -> CoreEvent {
    CoreEvent {
        metadata: ObjectMeta {
            name: Some(h.name("core-event")),
            namespace: Some(TRAIL_NAMESPACE.into()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("certificates.k8s.io/v1".into()),
            kind: Some("CertificateSigningRequest".into()),
            name: Some(h.name("csr")),
            ..Default::default()
        },
        reason: Some("CSRApproved".into()),
        message: Some("approved by kubeflavor".into()),
        type_: Some("Normal".into()),
        reporting_component: reporting_component.map(str::to_string),
        reporting_instance: reporting_component.map(|_| "forged".to_string()),
        source: source.map(|c| EventSource {
            component: Some(c.into()),
            host: None,
        }),
        ..Default::default()
    }
}

fn refused_by_policy<T: std::fmt::Debug>(answer: Result<T, kube::Error>, what: &str) {
    refused(answer, what, false)
}

/// Refused by the policy, or (`rbac_will_do`) by RBAC.
fn refused<T: std::fmt::Debug>(answer: Result<T, kube::Error>, what: &str, rbac_will_do: bool) {
    match answer {
        Err(kube::Error::Api(s)) if rbac_will_do && s.code == 403 => {}
        // Either of the trail's two policies: a real API server also hands an
        // events.k8s.io Event to the core/v1 one, converted (its `matchPolicy` is
        // Equivalent), and reports whichever it evaluated first.
        Err(kube::Error::Api(s))
            if s.code == 422
                && (s.message.contains(POLICY_NAME) || s.message.contains(CORE_POLICY_NAME)) =>
        {
            assert!(
                s.message.contains(CONTROLLER_REPORTER),
                "{what}: {}",
                s.message
            )
        }
        other => panic!("{what}: expected the policy's 422, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_serve_identity_cannot_write_events_as_the_controller() {
    let h = Harness::start().await;
    h.env
        .kf(&["install", "--apply", "--serve", "--replicas", "0"])
        .await
        .expect_ok();
    let own = service_account_token(&h.admin, "kubeflavor", SERVE, 600).await;
    let as_serve = h.env.token_client(&own).await;
    let events = Api::<Event>::namespaced(as_serve.clone(), TRAIL_NAMESPACE);
    let forged = event(&h, CONTROLLER_REPORTER);
    let params = dry();
    // Wait until the API server enforces the policy. Without it this gives up and the
    // assertion below fails: RBAC alone lets this identity create the Event.
    let answer = kubeflavor_cluster::cache_lag::until_settled(
        POLICY_PROPAGATION,
        || events.create(&params, &forged),
        |answer| matches!(answer, Err(kube::Error::Api(s)) if s.code == 422),
    )
    .await;
    refused_by_policy(answer, "events.k8s.io reportingController");

    // The same in the core API, by either field that names the reporter: RBAC grants this
    // identity events.k8s.io only (403); should a grant of core Events appear, the policy
    // refuses them as well (422).
    let core = Api::<CoreEvent>::namespaced(as_serve, TRAIL_NAMESPACE);
    let by_component = core_event(&h, Some(CONTROLLER_REPORTER), None);
    refused(
        core.create(&dry(), &by_component).await,
        "core reportingComponent",
        true,
    );
    let by_source = core_event(&h, None, Some(CONTROLLER_REPORTER));
    refused(
        core.create(&dry(), &by_source).await,
        "core source.component",
        true,
    );

    // Its own Events still pass, and an admin is not affected.
    events
        .create(&dry(), &event(&h, kubeflavor::serve::REPORTING_CONTROLLER))
        .await
        .expect("the join-token API's own Events pass");
    Api::<Event>::namespaced(h.admin.clone(), TRAIL_NAMESPACE)
        .create(&dry(), &forged)
        .await
        .expect("system:masters is not judged");
}

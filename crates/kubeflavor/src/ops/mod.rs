//! What the controller and the join-token API both stand on to be operated: the operations
//! endpoint (`/metrics`, `/healthz`, `/readyz`) and the admin trail (Events in kube-system).

pub mod http;
pub mod trail;

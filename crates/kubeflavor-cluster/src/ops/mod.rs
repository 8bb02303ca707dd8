//! What the controller, the join-token API and the authorization webhook stand on to be
//! operated: the operations endpoint (`/metrics`, `/healthz`, `/readyz`), the admin trail
//! (Events in kube-system), and what their TLS servers share (reloading certificates,
//! connection limits and timeouts).

pub mod connection;
pub mod http;
pub mod text_format;
pub mod tls;
pub mod trail;

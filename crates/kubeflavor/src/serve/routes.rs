//! Which answer a request gets: the OpenAPI document, a portal's mint, a node
//! administrator's mint, or a Status naming the paths there are.

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use super::Server;
use super::api::{Body, mint_for, respond, status};

/// Answers one request.
pub async fn handle(server: &Server, req: Request<Incoming>) -> Response<Body> {
    let path: Vec<String> = req
        .uri()
        .path()
        .trim_matches('/')
        .split('/')
        .map(str::to_string)
        .collect();
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    if let Some(portal) = server.portal.clone()
        && super::portal::serves(req.method(), &path)
    {
        let response = super::portal::handle(server, &portal, req, &path).await;
        server.metrics.response(response.status().as_u16());
        return response;
    }
    let response = match (req.method(), path.as_slice()) {
        (&Method::GET, ["openapi.json"]) => respond(
            StatusCode::OK,
            "application/json",
            super::openapi::document().to_string(),
        ),
        (&Method::POST, ["v1", "jointokens"]) => {
            super::administrators::mint_for_administrator(server, req).await
        }
        (_, ["v1", "jointokens"]) => status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "only POST is served here: POST /v1/jointokens",
            None,
        ),
        (&Method::POST, ["v1", "observations"]) => super::observe::observe(server, req).await,
        (_, ["v1", "observations"]) => status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "only POST is served here: POST /v1/observations, with the node's client certificate",
            None,
        ),
        (&Method::POST, ["v1", "flavors", flavor, "jointokens"]) => {
            let flavor = flavor.to_string();
            mint_for(server, &flavor, req).await
        }
        (_, ["v1", "flavors", _, "jointokens"]) => status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "only POST is served here: POST /v1/flavors/{flavor}/jointokens",
            None,
        ),
        _ => status(
            StatusCode::NOT_FOUND,
            "NotFound",
            "no such path: the API is POST /v1/flavors/{flavor}/jointokens for portals and POST /v1/jointokens for node administrators (see /openapi.json)",
            None,
        ),
    };
    server.metrics.response(response.status().as_u16());
    response
}

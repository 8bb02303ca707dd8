//! The API's OpenAPI 3 document, served at `/openapi.json`.

use serde_json::{Value, json};

use kubeflavor_cluster::crd::schema::NON_EMPTY_LABEL_VALUE_PATTERN;
use kubeflavor_core::flavor::input_labels::{INPUT_LABEL_PREFIX, MAX_INPUT_KEYS};
use kubeflavor_core::flavor::token_limits::{
    ALLOW_NEVER_EXPIRING_FIELD, MAX_NODES_FIELD, MAX_TTL_FIELD,
};
use kubeflavor_core::mint::request::{ADMINISTRATOR_FIELDS, MAX_BODY_BYTES};
use kubeflavor_core::mint::ssh_key::{
    MAX_COMMENT_CHARS, MAX_LINE_BYTES, MAX_RSA_BITS, MAX_SSH_KEYS, MIN_RSA_BITS,
};
use kubeflavor_core::token::meta::ISSUED_TO_MAX_CHARS;

fn status_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Status"}}}
    })
}

/// The whole document: what the API is, its one operation, and the schemas it names.
pub fn document() -> Value {
    json!({
        "openapi": "3.0.3",
        "info": info(),
        "components": {
            "securitySchemes": {
                "kubernetesToken": {"type": "http", "scheme": "bearer", "description": "A Kubernetes ServiceAccount token, e.g. from `kubectl create token`."},
                "idToken": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT", "description": "An OpenID Connect ID token of an issuer the server trusts (serve --oidc-issuer)."}
            },
            "schemas": {
                "JoinTokenRequest": join_token_request(),
                "AdministratorJoinTokenRequest": administrator_request(),
                "JoinToken": join_token(),
                "Status": status(),
            }
        },
        "paths": {
            "/v1/flavors/{flavor}/jointokens": {
                "post": create_join_token()
            },
            "/v1/jointokens": {
                "post": create_administrator_join_token()
            }
        }
    })
}

/// Who may call the API and how it answers.
fn info() -> Value {
    json!({
        "title": "kubeflavor join-token API",
        "version": env!("CARGO_PKG_VERSION"),
        "description": format!(
            "Mints kubeflavor join tokens of one flavor for a caller that authenticates with a Kubernetes bearer token (checked by TokenReview) and may `create` `flavors/jointoken` of API group `kubeflavor.io` named after the flavor (checked by SubjectAccessReview). Bodies are at most {MAX_BODY_BYTES} bytes; errors are Kubernetes Status objects."
        ),
    })
}

/// The request body: every field the server accepts, with the limits it checks.
fn join_token_request() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["issuedTo"],
        "properties": {
            "issuedTo": {"type": "string", "minLength": 1, "maxLength": ISSUED_TO_MAX_CHARS, "description": "On whose behalf the token is minted (e.g. acme-corp/alice); kept with the token and copied into the binding of every node that joins with it. Visible text only: no control or format characters (Unicode Cc, Cf: text-direction overrides and isolates, zero-width characters, the byte-order mark), no line or paragraph separators, no white space at either end.", "example": "acme-corp/alice"},
            "ttl": {"type": "string", "description": format!("Lifetime like kubeadm's --ttl: 24h, 90m, 1h30m. Default: the flavor's, else 24h. At most the flavor's {MAX_TTL_FIELD} (default: its default TTL, else 24h). 0 (never expires) is refused whatever the flavor's {ALLOW_NEVER_EXPIRING_FIELD} says: the API mints only tokens that expire, and the API server's admission policy refuses this API any token Secret without an expiration."), "example": "24h"},
            "maxNodes": {"type": "integer", "minimum": 1, "maximum": 4294967295u64, "description": format!("How many node names the token may bind. Default: the flavor's, else 1. At most the flavor's {MAX_NODES_FIELD} (default: its default maxNodes, else 1).")},
            "output": {"type": "string", "enum": ["json", "cloud-init"], "default": "json", "description": "cloud-init: the answer also carries a cloud-init user-data document that joins the machine on first boot."},
            "labels": {
                "type": "object",
                "maxProperties": MAX_INPUT_KEYS,
                "additionalProperties": {"type": "string", "minLength": 1, "maxLength": 63, "pattern": NON_EMPTY_LABEL_VALUE_PATTERN},
                "description": format!("Input labels: what the node's administrator says about the node (e.g. a site, a network segment), key to value, keys without a prefix. Only the keys and values the flavor's spec.inputLabels allows are taken, and at most its maxLabels; anything else is refused (422, one cause per key, field labels[<key>], the same answer for a key the flavor does not take and a value it does not allow). They are kept in the token Secret's metadata, which the token's holder cannot read, so tokens with and without input labels look the same to their holders; kubeflavor's controller, never the kubelet, puts them on the Node as {INPUT_LABEL_PREFIX}<key> (a key the kubelet cannot write) while the node is flavored, and records them in the node's FlavorBinding."),
                "example": {"site": "berlin"}
            },
            "sshAuthorizedKeys": {
                "type": "array",
                "maxItems": MAX_SSH_KEYS,
                "items": {"type": "string", "maxLength": MAX_LINE_BYTES, "description": "One OpenSSH public key as ssh-keygen writes it: <type> <base64> [comment]."},
                "description": format!("OpenSSH public keys the cloud-init document installs for the image's default user (cloud-init's ssh_authorized_keys), so the node's administrator can log in; used whenever the answer carries the document (output cloud-init, or Accept: text/cloud-config). Plain keys only (no options such as command=): ssh-ed25519, ecdsa-sha2-nistp256/384/521, ssh-rsa of {MIN_RSA_BITS} to {MAX_RSA_BITS} bits, sk-ssh-ed25519@openssh.com, sk-ecdsa-sha2-nistp256@openssh.com; the key blob is checked whole; each key once; a comment of at most {MAX_COMMENT_CHARS} visible characters. The document carries each key rebuilt from its parsed parts. Keys are not stored in the cluster. Refused entries: 422, field sshAuthorizedKeys[<index>]."),
                "example": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq... alice@laptop"]
            }
        }
    })
}

/// The minted token, as the 201 answer carries it.
fn join_token() -> Value {
    json!({
        "type": "object",
        "required": ["kind", "apiVersion", "token", "id", "flavor", "maxNodes", "issuedTo", "issuedBy", "joinCommand"],
        "properties": {
            "kind": {"type": "string", "enum": ["JoinToken"]},
            "apiVersion": {"type": "string", "enum": ["kubeflavor.io/v1alpha1"]},
            "token": {"type": "string", "pattern": "^[a-z0-9]{6}\\.[a-z0-9]{16}$", "description": "The bootstrap token. Shown once; keep it secret."},
            "id": {"type": "string", "pattern": "^[a-z0-9]{6}$"},
            "flavor": {"type": "string"},
            "expiration": {"type": "string", "format": "date-time", "description": "When the token expires (always set)."},
            "maxNodes": {"type": "integer"},
            "issuedTo": {"type": "string"},
            "issuedBy": {"type": "string", "description": "The Kubernetes user who asked for the token (the caller, as its TokenReview names it). The token Secret records it as kubeflavor.io/requested-by; its kubeflavor.io/issued-by is the join-token API's own identity, the only name the API server lets that identity write there."},
            "joinCommand": {"type": "string", "description": "kubeadm join <server> --token <token> --discovery-token-ca-cert-hash sha256:<pin>"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}, "description": "The input labels the token carries (present when the request gave some)."},
            "cloudInit": {"type": "string", "description": "Present with output cloud-init."}
        }
    })
}

/// The error body: a Kubernetes Status.
fn status() -> Value {
    json!({
        "type": "object",
        "description": "A Kubernetes Status (kind Status, apiVersion v1).",
        "properties": {
            "kind": {"type": "string"},
            "apiVersion": {"type": "string"},
            "status": {"type": "string"},
            "message": {"type": "string"},
            "reason": {"type": "string"},
            "code": {"type": "integer"},
            "details": {"type": "object", "properties": {"causes": {"type": "array", "items": {"type": "object", "properties": {
                "reason": {"type": "string"}, "message": {"type": "string"}, "field": {"type": "string"}
            }}}}}
        }
    })
}

/// `POST /v1/flavors/{flavor}/jointokens`: its parameter, body and every answer.
fn create_join_token() -> Value {
    json!({
        "operationId": "createJoinToken",
        "summary": "Mint a join token of a flavor",
        "security": [{"kubernetesToken": []}],
        "parameters": [{"name": "flavor", "in": "path", "required": true, "schema": {"type": "string"}}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/JoinTokenRequest"}}}},
        "responses": {
            "201": {
                "description": "Minted. With `Accept: text/cloud-config` the body is the cloud-init document alone.",
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/JoinToken"}},
                    "text/cloud-config": {"schema": {"type": "string"}}
                }
            },
            "400": status_response("The body is not a JSON object, or repeats a key (at any depth; details.causes names it, reason FieldValueDuplicate)."),
            "401": status_response("No bearer token, or one the Kubernetes API does not accept."),
            "403": status_response("The caller may not mint tokens of this flavor."),
            "404": status_response("No such flavor (only said to callers allowed to mint it)."),
            "409": status_response("The flavor's definition is invalid."),
            "408": status_response("The body did not arrive in time (serve --request-timeout)."),
            "413": status_response("The body is larger than the limit."),
            "422": status_response("A field is invalid, asks for more than the flavor's tokenLimits allow, or names an input label the flavor does not allow; details.causes names each field (labels[<key>] for a label), and the limit it breaks."),
            "429": status_response("Too many requests from this caller; see Retry-After."),
            "503": status_response("The Kubernetes API could not be reached; retry.")
        }
    })
}

/// A node administrator's body: the fields of [`ADMINISTRATOR_FIELDS`], as a portal sends
/// them.
fn administrator_request() -> Value {
    let portal = join_token_request();
    let properties: serde_json::Map<String, Value> = ADMINISTRATOR_FIELDS
        .iter()
        .map(|f| (f.to_string(), portal["properties"][*f].clone()))
        .collect();
    json!({
        "type": "object",
        "description": "What a node administrator may ask: who they are comes from their ID token, how long and how many from the owner's Roster; issuedTo, ttl and maxNodes are refused by name.",
        "properties": properties,
        "additionalProperties": false,
    })
}

/// `POST /v1/jointokens`: a node administrator's mint; the Roster decides the flavor, and
/// the answer never names it.
fn create_administrator_join_token() -> Value {
    json!({
        "operationId": "createAdministratorJoinToken",
        "summary": "Mint a join token for the signed-in node administrator (the owner's Roster decides its flavor, which the answer does not name)",
        "security": [{"idToken": []}],
        "requestBody": {"required": false, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AdministratorJoinTokenRequest"}}}},
        "responses": {
            "201": {
                "description": "Minted: token, id, expiration, issuedTo, labels, joinCommand (and cloudInit); never the flavor or max nodes. With `Accept: text/cloud-config` the body is the cloud-init document alone.",
                "content": {
                    "application/json": {"schema": {"type": "object"}},
                    "text/cloud-config": {"schema": {"type": "string"}}
                }
            },
            "400": status_response("The body is not a JSON object, or repeats a key."),
            "401": status_response("No ID token, or one that is not valid here (expired, another audience or issuer, a signature that does not verify)."),
            "403": status_response("No join token for this sign-in (one answer for every cause), or a per-administrator limit reached (the message says which)."),
            "404": status_response("This server takes no node administrators' sign-ins (no serve --oidc-issuer)."),
            "408": status_response("The body did not arrive in time (serve --request-timeout)."),
            "413": status_response("The body is larger than the limit."),
            "422": status_response("A field is invalid or not one an administrator may send, or an input label the Roster does not take; details.causes names each."),
            "429": status_response("Too many requests from this administrator; see Retry-After."),
            "503": status_response("The Kubernetes API or the identity provider could not be reached; retry.")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflavor_core::flavor::token_limits::LimitExceeded;
    use kubeflavor_core::mint::request::FIELDS;

    #[test]
    fn the_administrators_body_is_described_field_by_field() {
        let doc = document();
        let properties =
            doc["components"]["schemas"]["AdministratorJoinTokenRequest"]["properties"]
                .as_object()
                .expect("properties");
        let mut described: Vec<&str> = properties.keys().map(String::as_str).collect();
        described.sort();
        let mut accepted = ADMINISTRATOR_FIELDS.to_vec();
        accepted.sort();
        assert_eq!(described, accepted);
        assert!(
            properties
                .values()
                .all(|p| p.is_object() && !p.as_object().unwrap().is_empty())
        );
        assert!(doc["paths"]["/v1/jointokens"]["post"]["responses"]["403"].is_object());
    }

    #[test]
    fn the_document_describes_the_fields_the_server_accepts() {
        let doc = document();
        let request = &doc["components"]["schemas"]["JoinTokenRequest"];
        let mut described: Vec<&str> = request["properties"]
            .as_object()
            .expect("properties")
            .keys()
            .map(String::as_str)
            .collect();
        described.sort();
        let mut accepted = FIELDS.to_vec();
        accepted.sort();
        assert_eq!(described, accepted);
        assert_eq!(request["required"], serde_json::json!(["issuedTo"]));
        // Each limit a request can break is described on the field the core names.
        let n = std::num::NonZeroU32::MIN;
        for exceeded in [
            LimitExceeded::NeverExpiring,
            LimitExceeded::Ttl {
                asked_secs: 2,
                max_secs: 1,
                stated: true,
            },
            LimitExceeded::MaxNodes {
                asked: n,
                max: n,
                stated: true,
            },
        ] {
            let description = request["properties"][exceeded.field()]["description"]
                .as_str()
                .expect("described");
            assert!(
                description.contains(exceeded.limit()),
                "{}: {description}",
                exceeded.field()
            );
        }
        assert!(
            doc["paths"]["/v1/flavors/{flavor}/jointokens"]["post"]["responses"]["201"].is_object()
        );
    }
}

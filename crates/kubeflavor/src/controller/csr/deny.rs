//! A denial's writes before the Denied condition (P1 (hidden flavor), P4 (rejection that
//! ends)). The token's fate is settled first, the CSR's Denied condition last: a decided
//! CSR is never looked at again, so whatever must follow a denial has to happen before it.
//! A crash in between leaves the CSR pending, and the next run denies it again, counting
//! that denial a second time: the limit errs towards ending the token, and no denial goes
//! uncounted.

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Secret;
use kubeflavor_cluster::ops::trail::Regarding;
use kubeflavor_cluster::token_secrets;
use kubeflavor_core::approval::client::{DenyCause, TokenFate, token_fate};

use super::facts::CsrFactsRead;
use crate::controller::{Context, Error, Options, Step};

/// Carries out the token's `fate` and records the denial in the admin trail. `Ok` means:
/// write the Denied condition.
pub async fn prepare(
    ctx: &Context,
    csr: &CertificateSigningRequest,
    facts: &CsrFactsRead,
    cause: DenyCause,
    fate: TokenFate,
) -> Result<(), Error> {
    let deleted = settle_token(ctx, facts, cause, fate).await?;
    // The cause goes to the trail before the CSR is decided (a crash before the condition
    // only records it twice).
    ctx.may_write(Step::Denied)?;
    record_denial(ctx, csr, facts, cause, deleted).await;
    Ok(())
}

/// Core's fate for a token Secret as it is now, for one more denial for `cause`: the
/// controller asks again on a fresh copy when a count loses a race, so the limit is judged
/// on the count as it is, not as it was read. Only a readable kubeflavor token has one.
fn current_token_fate(secret: &Secret, cause: DenyCause, opts: &Options) -> TokenFate {
    token_secrets::kubeflavor_meta(secret).map_or(TokenFate::Keep, |meta| {
        token_fate(cause, meta.denials, opts.policy().denial_limit)
    })
}

/// The denial's admin trail: a log line and an Event carry the exact cause, which never
/// goes on the CSR (P1 (hidden flavor)).
async fn record_denial(
    ctx: &Context,
    csr: &CertificateSigningRequest,
    facts: &CsrFactsRead,
    cause: DenyCause,
    deleted: bool,
) {
    let name = facts.csr.name.as_str();
    let description = facts.describe(cause);
    let token_id = facts.csr.bootstrap_token_id().unwrap_or("-");
    let node = facts.parsed.as_ref().map_or("-", |p| p.node_name.as_str());
    let cause = cause.as_str();
    tracing::info!(csr = %name, node, token = token_id, cause, token_deleted = deleted, "denied: {description}");
    let deleted = if deleted {
        "; the token Secret was deleted"
    } else {
        ""
    };
    let regarding = Regarding {
        api_version: "certificates.k8s.io/v1",
        kind: "CertificateSigningRequest",
        name,
        uid: csr.metadata.uid.as_deref(),
    };
    let note = format!(
        "denied CSR {name} for node {node} (token {token_id}): {cause}: {description}{deleted}"
    );
    ctx.record(regarding, ("Warning", "Deny", "CSRDenied"), &note)
        .await;
}

/// How often settling a token is tried again after losing a resourceVersion race.
const SETTLE_ATTEMPTS: usize = 16;

/// Carries out a denial's fate for the token (P4 (rejection that ends)): delete it, or
/// raise its denial count with a resourceVersion precondition. The Secret the decision read
/// may be stale by now: other CSRs of the same token (a kubelet files a new CSR on every
/// retry, and CSRs are decided concurrently) were denied or reserved a use in between. A
/// 409 then means "read the current Secret and let core judge its fate again": the count
/// is raised from the current value, and the limit is judged on it, so a burst of denials
/// ends the token at the limit and no count is lost. A token deleted or re-created under
/// the same name (other uid) meanwhile is left alone. Returns whether the token was
/// deleted.
async fn settle_token(
    ctx: &Context,
    facts: &CsrFactsRead,
    cause: DenyCause,
    fate: TokenFate,
) -> Result<bool, Error> {
    let Some(mut secret) = facts.token_secret.clone() else {
        return Ok(false);
    };
    let mut fate = fate;
    for _ in 0..SETTLE_ATTEMPTS {
        let Some(write) = TokenWrite::of(&secret, fate) else {
            return Ok(false);
        };
        let deleted = matches!(write, TokenWrite::Delete { .. });
        match ctx
            .write(&facts.csr.name, write.step(), write.send(ctx))
            .await
        {
            Ok(()) => return Ok(deleted),
            Err(e) if e.is_not_found() => return Ok(false),
            // A delete's uid precondition failing is a 409 too: a new token of that name.
            Err(e) if e.is_conflict() => {}
            Err(e) => return Err(e),
        }
        let fresh = token_secrets::reread(&ctx.client, &secret)
            .await
            .map_err(|source| Error::TokenAfterDenial {
                token: secret.metadata.name.clone().unwrap_or_default(),
                source,
            })?;
        let Some(fresh) = fresh else {
            return Ok(false);
        };
        tracing::debug!(token = ?fresh.metadata.name, "token changed since it was read; settling the denial on the current copy");
        fate = current_token_fate(&fresh, cause, &ctx.opts);
        secret = fresh;
    }
    Err(Error::Changed {
        csr: facts.csr.name.clone(),
        node: "-".to_string(),
    })
}

/// The write that carries out a token fate.
enum TokenWrite {
    /// Delete the Secret, with a uid precondition: never a token re-created under the
    /// same name.
    Delete { name: String, uid: Option<String> },
    /// PUT the Secret with its denial count raised (resourceVersion precondition).
    Count(Box<Secret>),
}

impl TokenWrite {
    fn of(secret: &Secret, fate: TokenFate) -> Option<TokenWrite> {
        match fate {
            TokenFate::Keep => None,
            TokenFate::Delete => Some(TokenWrite::Delete {
                name: secret.metadata.name.clone().unwrap_or_default(),
                uid: secret.metadata.uid.clone(),
            }),
            TokenFate::Count => {
                token_secrets::with_denial(secret).map(|s| TokenWrite::Count(Box::new(s)))
            }
        }
    }

    fn step(&self) -> Step {
        match self {
            TokenWrite::Delete { .. } => Step::TokenDeleted,
            TokenWrite::Count(_) => Step::DenialCounted,
        }
    }

    async fn send(&self, ctx: &Context) -> Result<(), Error> {
        let (name, written) = match self {
            TokenWrite::Delete { name, uid } => {
                let deleted =
                    token_secrets::delete_instance(&ctx.client, name, uid.clone(), None).await;
                (name.clone(), deleted)
            }
            TokenWrite::Count(secret) => {
                let name = secret.metadata.name.clone().unwrap_or_default();
                let put = token_secrets::replace(&ctx.client, secret).await;
                (name, put.map(|_| ()))
            }
        };
        written.map_err(|source| Error::TokenAfterDenial {
            token: name,
            source,
        })?;
        if let TokenWrite::Delete { .. } = self {
            ctx.metrics.tokens_deleted.inc();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflavor_cluster::testing::flavored_secret as token_secret;

    #[test]
    fn a_raced_denial_is_judged_on_the_current_count() {
        let mut opts = Options::new("ns", "me");
        opts.denial_limit = 2;
        let cause = DenyCause::FlavorMissing;
        let mut s = token_secret("");
        assert_eq!(current_token_fate(&s, cause, &opts), TokenFate::Count);
        let counted = token_secrets::with_denial(&s).expect("a kubeflavor token");
        assert_eq!(
            current_token_fate(&counted, cause, &opts),
            TokenFate::Delete
        );
        s.metadata.labels = None;
        assert_eq!(current_token_fate(&s, cause, &opts), TokenFate::Keep);
    }
}

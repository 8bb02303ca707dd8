//! An approval's writes before the Approved condition (P3 (binding), P6 (nothing lost)),
//! each visible in API state so the next run finishes a half-done approval: reserve a use
//! on the token, create the binding; then a last look at what the approval rests on.

use kubeflavor_cluster::crd::FlavorBinding;
use kubeflavor_cluster::{bindings, nodes, token_secrets};
use kubeflavor_core::approval::client::BindingStep;
use kubeflavor_core::names::NodeName;
use kubeflavor_core::token::TokenId;

use super::facts::CsrFactsRead;
use crate::controller::{Context, Error, Step};

/// Makes the writes core's `binding` step asks for before `node`'s CSR is approved, then
/// reads once more what the approval rests on. `Ok` means: write the Approved condition.
pub async fn prepare(
    ctx: &Context,
    facts: &CsrFactsRead,
    node: &NodeName,
    binding: &BindingStep,
    now: jiff::Timestamp,
) -> Result<(), Error> {
    let mut last_look = LastLook::new(facts, node);
    if let BindingStep::Create {
        token,
        flavor,
        reserve_use,
        custody,
        input_labels,
    } = binding
    {
        if *reserve_use {
            reserve(ctx, facts, node, token).await?;
        }
        let new = facts.new_binding(node, token, flavor, custody, input_labels, now);
        let created = bind(ctx, node, new);
        last_look.binding_version = ctx.write(&facts.csr.name, Step::Bound, created).await?;
    }
    let looking = std::time::Instant::now();
    let looked = last_look.check(ctx).await;
    ctx.metrics
        .stage("csr", "read", looking.elapsed().as_secs_f64());
    looked
}

/// Reserves a use of `token` for `node`: the token Secret with the name added to its bound
/// names, PUT with the resourceVersion it was read at, so a concurrent reservation of the
/// same token makes this a 409 and the CSR is decided again with the new count.
async fn reserve(
    ctx: &Context,
    facts: &CsrFactsRead,
    node: &NodeName,
    token: &TokenId,
) -> Result<(), Error> {
    // Core reserves only on the readable kubeflavor token the facts hold.
    let updated = facts
        .token_secret
        .as_ref()
        .and_then(|s| token_secrets::with_reservation(s, node))
        .ok_or_else(|| Error::Changed {
            csr: facts.csr.name.clone(),
            node: node.to_string(),
        })?;
    let put = async {
        token_secrets::replace(&ctx.client, &updated)
            .await
            .map(|written| ctx.own_token_writes.wrote(&written, &facts.csr.name))
            .map_err(|source| Error::Reserve {
                token: token.to_string(),
                node: node.to_string(),
                source,
            })
    };
    ctx.write(&facts.csr.name, Step::Reserved, put).await
}

/// Creates the FlavorBinding of `node` and returns its resourceVersion. AlreadyExists:
/// someone bound the name since we read. It counts as a conflict: the CSR is decided again
/// with that binding in the facts (same token: idempotent approval; another token: denial).
async fn bind(
    ctx: &Context,
    node: &NodeName,
    binding: FlavorBinding,
) -> Result<Option<String>, Error> {
    let created = bindings::create(&ctx.client, &binding)
        .await
        .map_err(|source| Error::Bind {
            node: node.to_string(),
            source,
        })?;
    Ok(created.metadata.resource_version)
}

/// What an approval rests on, read once more right before the approval is written: the
/// facts were read before the reservation and the binding, and under load a CSR can wait
/// a while between the two. If the binding changed since (revoked, re-made, another
/// token's) or the Node of the name appeared or went, the CSR goes back to be decided
/// again from fresh facts: core decides, this only notices the change (P3 (binding), and
/// "a revoked binding never leads to an approval"). What happens after this read happens
/// to a joined node: a revocation then removes the flavor and taints the Node, as for any
/// joined node.
struct LastLook<'a> {
    node: &'a str,
    csr: &'a str,
    /// The binding's resourceVersion as read, or as this reconcile created it.
    binding_version: Option<String>,
    node_exists: bool,
}

impl<'a> LastLook<'a> {
    fn new(facts: &'a CsrFactsRead, node: &'a NodeName) -> Self {
        LastLook {
            node: node.as_str(),
            csr: &facts.csr.name,
            binding_version: facts
                .binding
                .as_ref()
                .and_then(|b| b.metadata.resource_version.clone()),
            node_exists: facts.node_exists,
        }
    }

    async fn check(&self, ctx: &Context) -> Result<(), Error> {
        let (binding, node) = tokio::try_join!(
            bindings::get_metadata(&ctx.client, self.node),
            nodes::get_metadata(&ctx.client, self.node),
        )?;
        let binding_version = binding.and_then(|b| b.metadata.resource_version);
        if binding_version != self.binding_version || node.is_some() != self.node_exists {
            return Err(Error::Changed {
                csr: self.csr.to_string(),
                node: self.node.to_string(),
            });
        }
        Ok(())
    }
}

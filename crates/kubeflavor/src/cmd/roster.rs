//! `kubeflavor roster`: the owner's list of node administrators (a Roster): show its
//! rules, add or remove one, and ask which flavor an identity would get, and why.

use std::io::Write;
use std::num::NonZeroU32;

use clap::{Args, Subcommand};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use kubeflavor_cluster::crd::roster::{
    DEFAULT_ROSTER, Roster, RosterRule, RosterSpec, rules_from_roster,
};
use kubeflavor_core::flavor::FlavorName;
use kubeflavor_core::mint::roster::{Identity, Outcome, explain};

use crate::connect::Cluster;
use crate::error::{CliError, Result};
use crate::exit::ExitCode;
use crate::output::{self, Format, Table};

#[derive(Debug, Subcommand)]
pub enum RosterCommand {
    /// Show a Roster's rules in the order they are read.
    Get(RosterGetArgs),
    /// Add a rule (at the end, or --at a position); creates the Roster when missing.
    AddRule(RosterAddRuleArgs),
    /// Remove a rule by name.
    RemoveRule(RosterRemoveRuleArgs),
    /// Which flavor an identity would get, and why: each rule read until the one that
    /// decides, with what did not match.
    Test(RosterTestArgs),
}

#[derive(Debug, Args)]
pub struct RosterGetArgs {
    /// The Roster (serve --roster).
    #[arg(long, value_name = "NAME", default_value = DEFAULT_ROSTER)]
    pub roster: String,
    #[arg(short, long, value_enum)]
    pub output: Option<Format>,
}

#[derive(Debug, Args)]
pub struct RosterAddRuleArgs {
    /// The rule's name (lowercase letters, digits and '-'), unique in the Roster.
    pub name: String,
    #[arg(long, value_name = "NAME", default_value = DEFAULT_ROSTER)]
    pub roster: String,
    /// The identity provider's issuer, exactly as its ID tokens' `iss`.
    #[arg(long, value_name = "URL")]
    pub issuer: String,
    /// Match the ID token's `sub`.
    #[arg(long, value_name = "SUB")]
    pub subject: Option<String>,
    /// Match one verified e-mail address.
    #[arg(long, value_name = "ADDRESS")]
    pub email: Option<String>,
    /// Match verified e-mail addresses of one domain (not its subdomains).
    #[arg(long, value_name = "DOMAIN")]
    pub email_domain: Option<String>,
    /// Match a value of the group claim.
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
    /// The Flavor the rule gives.
    #[arg(
        long,
        value_name = "FLAVOR",
        required_unless_present = "no_token",
        conflicts_with = "no_token"
    )]
    pub flavor: Option<FlavorName>,
    /// The rule gives nothing: whom it matches gets no token, whatever later rules say.
    #[arg(long)]
    pub no_token: bool,
    /// The most nodes one administrator may have bound under this rule.
    #[arg(long, value_name = "N")]
    pub max_nodes: Option<NonZeroU32>,
    /// The most join tokens one administrator may hold at once under this rule.
    #[arg(long, value_name = "N")]
    pub max_live_tokens: Option<NonZeroU32>,
    /// Where the rule goes, 1 being first (default: last).
    #[arg(long, value_name = "POSITION")]
    pub at: Option<NonZeroU32>,
}

#[derive(Debug, Args)]
pub struct RosterRemoveRuleArgs {
    pub name: String,
    #[arg(long, value_name = "NAME", default_value = DEFAULT_ROSTER)]
    pub roster: String,
}

#[derive(Debug, Args)]
pub struct RosterTestArgs {
    #[arg(long, value_name = "NAME", default_value = DEFAULT_ROSTER)]
    pub roster: String,
    /// The identity's issuer.
    #[arg(long, value_name = "URL")]
    pub issuer: String,
    /// Its subject (`sub`).
    #[arg(long, value_name = "SUB", default_value = "")]
    pub subject: String,
    /// Its e-mail, taken as verified unless --email-unverified.
    #[arg(long, value_name = "ADDRESS")]
    pub email: Option<String>,
    /// The provider did not verify the e-mail.
    #[arg(long, requires = "email")]
    pub email_unverified: bool,
    /// A group the identity is in (repeat for more).
    #[arg(long = "group", value_name = "GROUP")]
    pub groups: Vec<String>,
}

pub async fn execute(command: RosterCommand, cluster: &Cluster, out: &mut dyn Write) -> Result<()> {
    match command {
        RosterCommand::Get(args) => get(cluster, &args, out).await,
        RosterCommand::AddRule(args) => add_rule(cluster, &args, out).await,
        RosterCommand::RemoveRule(args) => remove_rule(cluster, &args, out).await,
        RosterCommand::Test(args) => test(cluster, &args, out).await,
    }
}

async fn read(cluster: &Cluster, name: &str) -> Result<Option<Roster>> {
    Api::<Roster>::all(cluster.client.clone())
        .get_opt(name)
        .await
        .map_err(|e| cluster.error(&format!("get Roster {name}"), e))
}

async fn must_read(cluster: &Cluster, name: &str) -> Result<Roster> {
    read(cluster, name).await?.ok_or_else(|| {
        CliError::not_found(
            format!("Roster {name} does not exist"),
            "add a rule with 'kubeflavor roster add-rule', or name another with --roster",
        )
    })
}

/// What a rule matches, in words.
fn conditions(rule: &RosterRule) -> String {
    let mut parts = Vec::new();
    for (what, value) in [
        ("subject", &rule.subject),
        ("email", &rule.email),
        ("emailDomain", &rule.email_domain),
        ("group", &rule.group),
    ] {
        if let Some(v) = value {
            parts.push(format!("{what}={v}"));
        }
    }
    parts.join(",")
}

fn gives(rule: &RosterRule) -> String {
    match (&rule.flavor, rule.no_token.unwrap_or(false)) {
        (Some(flavor), false) => flavor.clone(),
        _ => "<no token>".into(),
    }
}

async fn get(cluster: &Cluster, args: &RosterGetArgs, out: &mut dyn Write) -> Result<()> {
    let roster = must_read(cluster, &args.roster).await?;
    match args.output.unwrap_or_default() {
        Format::Table | Format::Wide => {
            if roster.spec.rules.is_empty() {
                writeln!(
                    out,
                    "Roster {} has no rules: nobody gets a token.",
                    args.roster
                )?;
                return Ok(());
            }
            let mut t = Table::new(&[
                "#",
                "rule",
                "issuer",
                "matches",
                "gives",
                "max-nodes",
                "grants",
                "administrators",
                "last-match",
            ]);
            let now = jiff::Timestamp::now();
            let status = roster.status.clone().unwrap_or_default();
            for (i, rule) in roster.spec.rules.iter().enumerate() {
                let matched = status.rule_matches.iter().find(|m| m.name == rule.name);
                t.row(vec![
                    (i + 1).to_string(),
                    rule.name.clone(),
                    rule.issuer.clone(),
                    conditions(rule),
                    gives(rule),
                    rule.max_nodes
                        .map_or_else(|| "<none>".into(), |n| n.to_string()),
                    matched.map_or(0, |m| m.grants).to_string(),
                    matched.map_or(0, |m| m.administrators).to_string(),
                    matched
                        .and_then(|m| m.last_matched)
                        .map_or_else(|| "<never>".into(), |at| output::age(Some(at), now)),
                ]);
            }
            write!(out, "{}", t.render())?;
            Ok(())
        }
        Format::Json => output::write_json(out, &roster),
        Format::Yaml => output::write_yaml(out, &roster),
        Format::Name => {
            writeln!(out, "roster/{}", args.roster)?;
            Ok(())
        }
    }
}

/// Writes `roster` back (created when `create`), refusing a concurrent change (the write
/// carries the resourceVersion read).
async fn write_back(cluster: &Cluster, roster: &Roster, create: bool) -> Result<()> {
    let api = Api::<Roster>::all(cluster.client.clone());
    let name = roster.metadata.name.clone().unwrap_or_default();
    let written = if create {
        api.create(&PostParams::default(), roster).await
    } else {
        api.replace(&name, &PostParams::default(), roster).await
    };
    match written {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Err(CliError::new(
            ExitCode::Error,
            format!("Roster {name} changed while this command ran"),
            "run it again",
        )),
        Err(e) => Err(cluster.error(&format!("write Roster {name}"), e)),
    }
}

async fn add_rule(cluster: &Cluster, args: &RosterAddRuleArgs, out: &mut dyn Write) -> Result<()> {
    let (mut roster, create) = match read(cluster, &args.roster).await? {
        Some(roster) => (roster, false),
        None => (
            Roster {
                metadata: ObjectMeta {
                    name: Some(args.roster.clone()),
                    ..ObjectMeta::default()
                },
                spec: RosterSpec::default(),
                status: None,
            },
            true,
        ),
    };
    if roster.spec.rules.iter().any(|r| r.name == args.name) {
        return Err(CliError::new(
            ExitCode::Refused,
            format!("Roster {} already has a rule {}", args.roster, args.name),
            "remove it first, or choose another name",
        ));
    }
    let rule = RosterRule {
        name: args.name.clone(),
        issuer: args.issuer.clone(),
        subject: args.subject.clone(),
        email: args.email.clone(),
        email_domain: args.email_domain.clone(),
        group: args.group.clone(),
        flavor: args.flavor.as_ref().map(|f| f.to_string()),
        no_token: args.no_token.then_some(true),
        max_nodes: args.max_nodes.map(NonZeroU32::get),
        max_live_tokens: args.max_live_tokens.map(NonZeroU32::get),
    };
    let at = args.at.map_or(roster.spec.rules.len(), |p| {
        (p.get() as usize - 1).min(roster.spec.rules.len())
    });
    roster.spec.rules.insert(at, rule);
    // The core's checks, before the API server's: one message naming the rule and the fix.
    rules_from_roster(&roster.spec)
        .map_err(|e| CliError::new(ExitCode::Refused, e, "fix the flags"))?;
    write_back(cluster, &roster, create).await?;
    writeln!(
        out,
        "rule {} added to roster {} at position {}",
        args.name,
        args.roster,
        at + 1
    )?;
    Ok(())
}

async fn remove_rule(
    cluster: &Cluster,
    args: &RosterRemoveRuleArgs,
    out: &mut dyn Write,
) -> Result<()> {
    let mut roster = must_read(cluster, &args.roster).await?;
    let before = roster.spec.rules.len();
    roster.spec.rules.retain(|r| r.name != args.name);
    if roster.spec.rules.len() == before {
        return Err(CliError::not_found(
            format!("Roster {} has no rule {}", args.roster, args.name),
            "see 'kubeflavor roster get'",
        ));
    }
    write_back(cluster, &roster, false).await?;
    writeln!(
        out,
        "rule {} removed from roster {}",
        args.name, args.roster
    )?;
    Ok(())
}

async fn test(cluster: &Cluster, args: &RosterTestArgs, out: &mut dyn Write) -> Result<()> {
    let roster = must_read(cluster, &args.roster).await?;
    let rules = rules_from_roster(&roster.spec).map_err(|e| {
        CliError::new(
            ExitCode::Refused,
            format!("Roster {} cannot be used: {e}", args.roster),
            "fix the rule; meanwhile node administrators get no token",
        )
    })?;
    let identity = Identity {
        issuer: args.issuer.clone(),
        subject: args.subject.clone(),
        email: args.email.clone(),
        email_verified: args.email.is_some() && !args.email_unverified,
        groups: args.groups.clone(),
        name: None,
    };
    let steps = explain(&identity, &rules);
    let mut t = Table::new(&["#", "rule", "result"]);
    for (i, (rule, verdict)) in steps.iter().enumerate() {
        let result = match verdict {
            Ok(()) => "matches: decides".to_string(),
            Err(why) => format!("no match: {why}"),
        };
        t.row(vec![(i + 1).to_string(), rule.name.clone(), result]);
    }
    if !steps.is_empty() {
        write!(out, "{}", t.render())?;
    }
    let decided = steps.iter().find(|(_, v)| v.is_ok()).map(|(r, _)| *r);
    match decided.map(|r| (&r.name, &r.outcome)) {
        Some((name, Outcome::Flavor(flavor))) => {
            writeln!(out, "gets flavor {flavor} (rule {name})")?
        }
        Some((name, Outcome::NoToken)) => writeln!(out, "gets no token (rule {name} refuses)")?,
        None => writeln!(out, "gets no token (no rule matches)")?,
    }
    Ok(())
}

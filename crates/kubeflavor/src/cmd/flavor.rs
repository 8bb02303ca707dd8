//! `kubeflavor flavor create|apply|list|get|delete`.

use std::io::{Read, Write};
use std::path::PathBuf;

use jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, PatchParams};
use kubeflavor_cluster::crd::{Flavor, effect_str, flavor_from_rules, rules_from_flavor};
use kubeflavor_cluster::status::{is_api_reason, is_not_found};
use kubeflavor_cluster::{bindings, flavors, token_secrets};
use kubeflavor_core::flavor::{
    FlavorName, FlavorRules, FlavorSpec as CoreSpec, TaintSpec, TokenLimitsSpec,
};
use serde_json::Value;

use clap::{Args, Subcommand};
use kubeflavor_core::flavor::{Taint, TokenTtl};

use super::unknown_flavor;
use crate::cli::{FlavorLabel, KeyValue, MaxNodes, TrustLevelArg};
use crate::connect::{Cluster, FIELD_MANAGER};
use crate::error::{CliError, Result};
use crate::output::{self, Format, List, Table};
use kubeflavor_core::flavor::input_labels::{InputKeySpec, InputLabelsSpec};

#[derive(Debug, Subcommand)]
pub enum FlavorCommand {
    /// Create a Flavor from flags.
    Create(FlavorCreateArgs),
    /// Create or update Flavors from a YAML/JSON file (`-` for stdin), server-side applied.
    Apply(FlavorApplyArgs),
    /// List Flavors.
    List(FlavorListArgs),
    /// Show one Flavor.
    Get(FlavorGetArgs),
    /// Delete a Flavor. Refused while live tokens or node bindings use it, unless --force.
    Delete(FlavorDeleteArgs),
}

#[derive(Debug, Args)]
pub struct FlavorCreateArgs {
    /// The Flavor's name (a DNS name of at most 63 characters; it becomes a label value).
    pub name: FlavorName,
    /// A node label `key=value`. The key must be one a kubelet cannot write, e.g.
    /// `kubeflavor.node-restriction.kubernetes.io/tier=gold` or `node-role.kubernetes.io/edge=`.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<FlavorLabel>,
    /// A node taint `key=value:Effect` or `key:Effect` (NoSchedule, PreferNoSchedule, NoExecute).
    #[arg(long = "taint", value_name = "KEY=VALUE:EFFECT")]
    pub taints: Vec<Taint>,
    /// Trust level 0..=100, published on nodes as the label
    /// kubeflavor.node-restriction.kubernetes.io/trust-level.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub trust_level: Option<TrustLevelArg>,
    /// Default TTL of this flavor's tokens (24h, 90m, 0 for never).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub ttl: Option<TokenTtl>,
    /// Default number of node names one token of this flavor may bind.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_nodes: Option<MaxNodes>,
    /// The longest TTL a token of this flavor may be minted with (tokenLimits.maxTTL), through
    /// the join-token API or `token create`. Default: the flavor's default TTL, else 24h.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub max_ttl: Option<TokenTtl>,
    /// The largest max-nodes a token of this flavor may be minted with
    /// (tokenLimits.maxNodes). Default: the flavor's default max-nodes, else 1.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_nodes_limit: Option<MaxNodes>,
    /// Allow tokens of this flavor that never expire (TTL 0) (tokenLimits.allowNeverExpiring;
    /// refused without it).
    #[arg(long)]
    pub allow_never_expiring: bool,
    /// An IP range (e.g. 10.20.0.0/16) a node of this flavor may name in its kubelet
    /// serving certificate (spec.servingAddresses; repeat the flag for more). None: the
    /// controller approves no serving certificate that names an IP address.
    #[arg(long = "serving-address", value_name = "CIDR")]
    pub serving_addresses: Vec<String>,
    /// A Site a node of this flavor must be observed on to take workloads (spec.allowedSites;
    /// repeat for more). A node observed elsewhere, or not yet observed, is tainted
    /// kubeflavor.io/site-not-allowed:NoSchedule. `unknown` allows addresses no Site holds.
    #[arg(long = "allowed-site", value_name = "SITE")]
    pub allowed_sites: Vec<String>,
    /// An input label a portal may attach to this flavor's tokens, with the values it
    /// allows: `site=berlin,paris` (spec.inputLabels; repeat for more keys). Nodes get it as
    /// input.kubeflavor.node-restriction.kubernetes.io/<key>, set by the controller.
    #[arg(long = "input-label", value_name = "KEY=VALUE,...")]
    pub input_labels: Vec<KeyValue>,
    /// An input label whose values match a regular expression (RE2 syntax, matched whole):
    /// `segment=seg-[0-9]{1,4}`.
    #[arg(long = "input-label-pattern", value_name = "KEY=REGEX")]
    pub input_label_patterns: Vec<KeyValue>,
    /// How many input labels one token may carry (default: as many as there are keys).
    #[arg(long, value_name = "N")]
    pub max_input_labels: Option<u32>,
}

impl FlavorCreateArgs {
    /// `--input-label`, `--input-label-pattern` and `--max-input-labels` as core's spec;
    /// `None` when none is given.
    fn input_labels(&self) -> Option<InputLabelsSpec> {
        let listed = self.input_labels.iter().map(|kv| InputKeySpec {
            key: kv.key.clone(),
            values: Some(kv.value.split(',').map(str::to_owned).collect()),
            pattern: None,
        });
        let patterned = self.input_label_patterns.iter().map(|kv| InputKeySpec {
            key: kv.key.clone(),
            values: None,
            pattern: Some(kv.value.clone()),
        });
        let keys: Vec<InputKeySpec> = listed.chain(patterned).collect();
        (!keys.is_empty() || self.max_input_labels.is_some()).then(|| InputLabelsSpec {
            max_labels: self.max_input_labels.map(i64::from),
            keys,
        })
    }
}

#[derive(Debug, Args)]
pub struct FlavorApplyArgs {
    /// A file of Flavor objects (YAML documents separated by `---`, or JSON); `-` reads stdin.
    #[arg(short = 'f', long = "filename", value_name = "FILE", required = true)]
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct FlavorListArgs {
    #[arg(short, long, value_enum)]
    pub output: Option<Format>,
}

#[derive(Debug, Args)]
pub struct FlavorGetArgs {
    pub name: FlavorName,
    #[arg(short, long, value_enum)]
    pub output: Option<Format>,
}

#[derive(Debug, Args)]
pub struct FlavorDeleteArgs {
    pub name: FlavorName,
    /// Delete even if live tokens or node bindings still use the flavor (their nodes lose
    /// nothing now, but the controller can no longer restore their labels).
    #[arg(long)]
    pub force: bool,
}

/// Runs one `flavor` command.
pub async fn execute(command: FlavorCommand, cluster: &Cluster, out: &mut dyn Write) -> Result<()> {
    match command {
        FlavorCommand::Create(args) => create(cluster, &args, out).await,
        FlavorCommand::Apply(args) => apply(cluster, &args, out).await,
        FlavorCommand::List(args) => list(cluster, &args, out).await,
        FlavorCommand::Get(args) => get(cluster, &args, out).await,
        FlavorCommand::Delete(args) => delete(cluster, &args, out).await,
    }
}

pub async fn create(cluster: &Cluster, args: &FlavorCreateArgs, out: &mut dyn Write) -> Result<()> {
    let spec = CoreSpec {
        labels: args
            .labels
            .iter()
            .map(|l| (l.key.to_string(), l.value.to_string()))
            .collect(),
        taints: args
            .taints
            .iter()
            .map(|t| TaintSpec {
                key: t.key.to_string(),
                value: (!t.value.as_str().is_empty()).then(|| t.value.to_string()),
                effect: t.effect.to_string(),
            })
            .collect(),
        trust_level: args.trust_level.map(|t| i64::from(t.0.get())),
        token_ttl: args.ttl.map(|t| t.to_string()),
        max_nodes: args.max_nodes.map(|m| i64::from(m.0.get())),
        token_limits: (args.max_ttl.is_some()
            || args.max_nodes_limit.is_some()
            || args.allow_never_expiring)
            .then(|| TokenLimitsSpec {
                max_ttl: args.max_ttl.map(|t| t.to_string()),
                max_nodes: args.max_nodes_limit.map(|m| i64::from(m.0.get())),
                allow_never_expiring: args.allow_never_expiring.then_some(true),
            }),
        serving_addresses: args.serving_addresses.clone(),
        input_labels: args.input_labels(),
        allowed_sites: args.allowed_sites.clone(),
    };
    // Duplicate taints and the like are only visible on the whole set.
    let rules = FlavorRules::from_spec(&spec)
        .and_then(|rules| rules.check_defaults_within_limits().map(|()| rules))
        .map_err(|e| {
            CliError::refused(
                e,
                "fix the flags and retry (--max-ttl, --max-nodes-limit and --allow-never-expiring set the limits; --serving-address takes an IP range such as 10.20.0.0/16; --allowed-site a Site's name; --input-label takes site=berlin,paris and --input-label-pattern site=REGEX)",
            )
        })?;
    let flavor = flavor_from_rules(&args.name, &rules);
    match flavors::create(&cluster.client, &flavor).await {
        Ok(_) => {
            writeln!(out, "flavor.kubeflavor.io/{} created", args.name)?;
            Ok(())
        }
        Err(err) if is_api_reason(&err, "AlreadyExists") => Err(CliError::failed(
            format!("flavor {} already exists", args.name),
            "change it with 'kubeflavor flavor apply -f FILE', or delete it first",
        )),
        Err(err) => Err(cluster.error(&format!("create flavor {}", args.name), err)),
    }
}

pub async fn apply(cluster: &Cluster, args: &FlavorApplyArgs, out: &mut dyn Write) -> Result<()> {
    let shown = args.file.display().to_string();
    let text = read_input(&args.file)?;
    let parsed = parse_flavors(&text, &shown)?;
    if parsed.is_empty() {
        return Err(CliError::refused(
            format!("{shown} holds no Flavor"),
            "write at least one kind: Flavor document",
        ));
    }
    // Every document is checked before the first write: a bad file changes nothing.
    let mut checked = Vec::new();
    for flavor in &parsed {
        let (name, rules) = rules_from_flavor(flavor)
            .map_err(|e| e.to_string())
            .and_then(|(name, rules)| match rules.check_defaults_within_limits() {
                Ok(()) => Ok((name, rules)),
                Err(e) => Err(format!("flavor {name}: {e}")),
            })
            .map_err(|e| {
                CliError::refused(format!("{shown}: {e}"), "fix the file and apply again")
            })?;
        // The applied object is rebuilt from the validated rules; the file's own labels and
        // annotations are kept, server-set metadata (uid, resourceVersion...) is not.
        let mut object = flavor_from_rules(&name, &rules);
        object.metadata.labels = flavor.metadata.labels.clone();
        object.metadata.annotations = flavor.metadata.annotations.clone();
        checked.push((name.clone(), object));
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for (name, flavor) in checked {
        flavors::apply(&cluster.client, name.as_str(), &params, &flavor)
            .await
            .map_err(|e| cluster.error(&format!("apply flavor {name}"), e))?;
        writeln!(out, "flavor.kubeflavor.io/{name} applied")?;
    }
    Ok(())
}

fn read_input(path: &std::path::Path) -> Result<String> {
    let shown = path.display();
    let mut text = String::new();
    let read = if path.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::read_to_string(path).map(|t| text = t)
    };
    read.map_err(|e| {
        CliError::failed(
            format!("cannot read {shown}: {e}"),
            "check the path given to -f",
        )
    })?;
    Ok(text)
}

/// Flavor objects from YAML documents (JSON is YAML too). `kind: List` documents are
/// unpacked, as kubectl does.
pub fn parse_flavors(text: &str, shown: &str) -> Result<Vec<Flavor>> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| {
        CliError::refused(
            format!("{shown} is not valid YAML or JSON: {e}"),
            "fix the syntax",
        )
    })?;
    let mut objects = Vec::new();
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        match doc.get("kind").and_then(Value::as_str) {
            Some("List") => objects.extend(
                doc.get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
            ),
            _ => objects.push(doc),
        }
    }
    objects
        .into_iter()
        .enumerate()
        .map(|(i, obj)| {
            let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
            let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
            if api_version != "kubeflavor.io/v1alpha1" || kind != "Flavor" {
                return Err(CliError::refused(
                    format!(
                        "{shown}: document {} is {kind:?} of {api_version:?}, not a Flavor",
                        i + 1
                    ),
                    "flavor apply takes only apiVersion: kubeflavor.io/v1alpha1, kind: Flavor",
                ));
            }
            serde_json::from_value::<Flavor>(obj).map_err(|e| {
                CliError::refused(
                    format!("{shown}: document {} is not a valid Flavor: {e}", i + 1),
                    "fix the field it names",
                )
            })
        })
        .collect()
}

pub async fn list(cluster: &Cluster, args: &FlavorListArgs, out: &mut dyn Write) -> Result<()> {
    let api = flavors::api(&cluster.client);
    let mut items = api
        .list(&ListParams::default())
        .await
        .map_err(|e| cluster.error("list flavors", e))?
        .items;
    items.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    print_flavors(&items, args.output.unwrap_or_default(), out)
}

pub async fn get(cluster: &Cluster, args: &FlavorGetArgs, out: &mut dyn Write) -> Result<()> {
    let api = flavors::api(&cluster.client);
    let flavor = match api.get(args.name.as_str()).await {
        Ok(f) => f,
        Err(err) if is_not_found(&err) => return Err(unknown_flavor(cluster, &args.name).await),
        Err(err) => return Err(cluster.error(&format!("get flavor {}", args.name), err)),
    };
    match args.output.unwrap_or_default() {
        Format::Json => output::write_json(out, &for_display(flavor)),
        Format::Yaml => output::write_yaml(out, &for_display(flavor)),
        other => print_flavors(std::slice::from_ref(&flavor), other, out),
    }
}

/// kubectl hides managedFields unless asked; so do we.
fn for_display(mut flavor: Flavor) -> Flavor {
    flavor.metadata.managed_fields = None;
    flavor
}

fn print_flavors(items: &[Flavor], format: Format, out: &mut dyn Write) -> Result<()> {
    match format {
        Format::Json => output::write_json(
            out,
            &List::of(&items.iter().cloned().map(for_display).collect::<Vec<_>>()),
        ),
        Format::Yaml => output::write_yaml(
            out,
            &List::of(&items.iter().cloned().map(for_display).collect::<Vec<_>>()),
        ),
        Format::Name => {
            for f in items {
                writeln!(
                    out,
                    "flavor.kubeflavor.io/{}",
                    f.metadata.name.as_deref().unwrap_or("")
                )?;
            }
            Ok(())
        }
        Format::Table | Format::Wide => print_table(items, format == Format::Wide, out),
    }
}

/// The table of `flavor list` (`-o wide` adds the token defaults and the bound count).
fn print_table(items: &[Flavor], wide: bool, out: &mut dyn Write) -> Result<()> {
    if items.is_empty() {
        writeln!(out, "No flavors found.")?;
        return Ok(());
    }
    let mut header = vec!["name", "trust", "labels", "taints"];
    if wide {
        header.extend([
            "token ttl",
            "max nodes",
            "ttl limit",
            "nodes limit",
            "never expiring",
            "bound",
        ]);
    }
    header.push("age");
    let mut table = Table::new(&header);
    let now = Timestamp::now();
    for f in items {
        let mut row = vec![
            f.metadata.name.clone().unwrap_or_default(),
            f.spec
                .trust_level
                .map_or("<none>".into(), |t| t.to_string()),
            join_or_none(f.spec.labels.iter().map(|(k, v)| format!("{k}={v}"))),
            join_or_none(f.spec.taints.iter().map(|t| {
                if t.value.is_empty() {
                    format!("{}:{}", t.key, effect_str(t.effect))
                } else {
                    format!("{}={}:{}", t.key, t.value, effect_str(t.effect))
                }
            })),
        ];
        if wide {
            row.extend(wide_columns(f));
        }
        row.push(output::age(output::created(&f.metadata), now));
        table.row(row);
    }
    out.write_all(table.render().as_bytes())?;
    Ok(())
}

/// TOKEN TTL, MAX NODES (the defaults), the limits in force (stated, else from the
/// defaults; `<invalid>` for a Flavor kubeflavor cannot read) and BOUND.
fn wide_columns(f: &Flavor) -> [String; 6] {
    let defaults = f.spec.token_defaults.clone().unwrap_or_default();
    let limits = rules_from_flavor(f)
        .ok()
        .map(|(_, rules)| rules.effective_token_limits());
    let limit =
        |show: &dyn Fn(&kubeflavor_core::flavor::token_limits::EffectiveLimits) -> String| {
            limits.as_ref().map_or("<invalid>".into(), show)
        };
    [
        defaults.ttl.unwrap_or_else(|| "<default>".into()),
        defaults
            .max_nodes
            .map_or("<default>".into(), |n| n.to_string()),
        limit(&|l| TokenTtl::Seconds(l.max_ttl_secs).to_string()),
        limit(&|l| l.max_nodes.to_string()),
        limit(&|l| {
            if l.allow_never_expiring {
                "allowed"
            } else {
                "refused"
            }
            .into()
        }),
        f.status
            .as_ref()
            .and_then(|s| s.bound_nodes)
            .map_or("<none>".into(), |n| n.to_string()),
    ]
}

fn join_or_none(items: impl Iterator<Item = String>) -> String {
    let joined: Vec<String> = items.collect();
    if joined.is_empty() {
        "<none>".into()
    } else {
        joined.join(",")
    }
}

pub async fn delete(cluster: &Cluster, args: &FlavorDeleteArgs, out: &mut dyn Write) -> Result<()> {
    let api = flavors::api(&cluster.client);
    if let Err(err) = api.get_metadata(args.name.as_str()).await {
        return Err(if is_not_found(&err) {
            unknown_flavor(cluster, &args.name).await
        } else {
            cluster.error(&format!("get flavor {}", args.name), err)
        });
    }
    if !args.force {
        let users = flavor_users(cluster, &args.name).await?;
        if !users.is_empty() {
            return Err(CliError::refused(
                format!("flavor {} is in use by {}", args.name, users.describe()),
                "delete those tokens (kubeflavor token delete) and wait for their nodes to go, or pass --force",
            ));
        }
    }
    match api
        .delete(args.name.as_str(), &DeleteParams::default())
        .await
    {
        Ok(_) => {
            writeln!(out, "flavor.kubeflavor.io/{} deleted", args.name)?;
            Ok(())
        }
        Err(err) if is_not_found(&err) => Err(unknown_flavor(cluster, &args.name).await),
        Err(err) => Err(cluster.error(&format!("delete flavor {}", args.name), err)),
    }
}

/// Live tokens and node bindings of a flavor.
#[derive(Debug, Default)]
struct FlavorUsers {
    tokens: Vec<String>,
    bindings: Vec<String>,
}

impl FlavorUsers {
    fn is_empty(&self) -> bool {
        self.tokens.is_empty() && self.bindings.is_empty()
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.tokens.is_empty() {
            parts.push(format!(
                "{} live token(s): {}",
                self.tokens.len(),
                self.tokens.join(", ")
            ));
        }
        if !self.bindings.is_empty() {
            parts.push(format!(
                "{} node binding(s): {}",
                self.bindings.len(),
                self.bindings.join(", ")
            ));
        }
        parts.join(" and ")
    }
}

async fn flavor_users(cluster: &Cluster, name: &FlavorName) -> Result<FlavorUsers> {
    let now = Timestamp::now();
    let tokens = token_secrets::list(&cluster.client, Some(name))
        .await
        .map_err(|e| cluster.error("list the token Secrets in kube-system", e))?;
    let mut users = FlavorUsers {
        // The tokens the API server would authenticate now.
        tokens: tokens
            .into_iter()
            .filter_map(|t| t.record.ok())
            .filter(|r| r.authentication_at(now).is_ok())
            .map(|r| r.id.to_string())
            .collect(),
        ..Default::default()
    };
    users.bindings = bindings::names_of_flavor(&cluster.client, name)
        .await
        .map_err(|err| cluster.error("list flavorbindings", err))?;
    users.tokens.sort();
    Ok(users)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_document_yaml_and_lists_are_read() {
        let text = "\
apiVersion: kubeflavor.io/v1alpha1
kind: Flavor
metadata: {name: sweet}
spec:
  trustLevel: 80
---
apiVersion: v1
kind: List
items:
- apiVersion: kubeflavor.io/v1alpha1
  kind: Flavor
  metadata: {name: sour}
  spec: {}
";
        let flavors = parse_flavors(text, "f.yaml").unwrap();
        let names: Vec<_> = flavors
            .iter()
            .map(|f| f.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["sweet", "sour"]);
        assert_eq!(flavors[0].spec.trust_level, Some(80));
    }

    #[test]
    fn other_kinds_are_refused_by_document_number() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n";
        let err = parse_flavors(text, "f.yaml").unwrap_err();
        assert_eq!(err.code, crate::exit::ExitCode::Refused);
        assert!(err.message.contains("document 1"), "{err}");
    }

    #[test]
    fn json_is_accepted() {
        let text = r#"{"apiVersion":"kubeflavor.io/v1alpha1","kind":"Flavor","metadata":{"name":"j"},"spec":{"trustLevel":1}}"#;
        assert_eq!(
            parse_flavors(text, "f.json").unwrap()[0].spec.trust_level,
            Some(1)
        );
    }
}

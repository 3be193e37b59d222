//! `--variables-file PATH` of `gantry run` and `gantry lint`: the project's CI/CD variables
//! for a local run (what
//! GitLab keeps in Settings › CI/CD › Variables, and gitlab-ci-local in
//! `.gitlab-ci-local-variables.yml`). They go into the run's project exactly as
//! `POST /projects/:id/variables` puts them on the server, so precedence, file variables,
//! masking, protection and environment scopes are the coordinator's.
//!
//! ```yaml
//! API_URL: https://staging.example.com        # a plain variable (string, number or boolean)
//! DEPLOY_KEY:                                 # with GitLab's attributes
//!   value: "-----BEGIN OPENSSH PRIVATE KEY-----..."
//!   type: file                                # env_var (default) or file
//!   masked: false
//!   hidden: false                             # true (with masked): the server never shows the value again
//!   protected: false                          # true: only in pipelines of protected refs (the default branch)
//!   raw: false                                # true: `$` is not expanded
//!   environment_scope: "*"                    # or `production`, `review/*`
//!   description: the key the deploy job uses
//! DB_URL:                                     # one key for several environment scopes
//!   - { value: "postgres://staging", environment_scope: "staging" }
//!   - { value: "postgres://prod", environment_scope: "production" }
//! ```
//!
//! Besides the files given, a run reads two when they exist, first: yours,
//! `$XDG_CONFIG_HOME/gantry/variables.yml` (else `~/.config/gantry/variables.yml`: tokens
//! every project of yours uses), then the checkout's `.gantry/variables.yml` (the
//! project's; `.gantry/` stays out of the jobs' copy of the tree). `--variables-file`s
//! come after them, so they win.
//!
//! `gantry variable import --instance` reads the same format for the server's instance
//! variables, which have no `environment_scope` (an attribute or a list of values for one
//! key is an error there).
//!
//! Limits: the file is at most 2 MiB of YAML (the pipeline loader's limit); each variable
//! follows the coordinator's rules (`gantry_server::coordinator::variables`). Every error
//! names `file:line:column` and the key.
//!
//! `default_files` are read first when they exist; every file's variables are checked by
//! the coordinator's `variables::validate`. `gantry run` stores them through
//! `Settings::create_variable`, as the server's API does; `gantry variable import` (in
//! `variable.rs`) sends the same file to a server, to a project's or, with `--instance`,
//! the instance's variables.

use std::path::{Path, PathBuf};

use gantry_pipeline::yaml::{FileId, Limits, Node, Value, parse_documents};
use gantry_pipeline::{Context, PipelineInfo};
use gantry_server::coordinator::variables::{for_creation, validate};
use gantry_store::{InstanceVariable, ProjectVariable};

const ATTRIBUTES: &str =
    "value, type (env_var or file), masked, hidden, protected, raw, environment_scope, description";
const INSTANCE_ATTRIBUTES: &str =
    "value, type (env_var or file), masked, protected, raw, description";

/// `ctx` with the variables pipeline creation sees (`rules`, `include`): scope `*`, and
/// protected ones only on the protected ref (the default branch, as the coordinator has it).
pub(crate) fn creation_context(
    ctx: Context,
    info: &PipelineInfo,
    vars: &[ProjectVariable],
) -> Context {
    let protected = !info.is_tag && info.ref_name == info.default_branch;
    let layered: Vec<(usize, ProjectVariable)> = vars.iter().map(|v| (0, v.clone())).collect();
    ctx.with_settings_variables(&for_creation(&layered, protected))
}

/// The variables files read without being named (see the module docs), those that exist,
/// in the order they are read.
pub(crate) fn default_files(root: &Path) -> Vec<PathBuf> {
    let user = crate::env::user_dir("XDG_CONFIG_HOME", ".config")
        .map(|dir| dir.join("gantry").join("variables.yml"));
    user.into_iter()
        .chain([root.join(".gantry").join("variables.yml")])
        .filter(|path| path.is_file())
        .collect()
}

/// The default files, then `given`: every variables file a run or lint reads, in order.
pub(crate) fn with_defaults(root: &Path, given: &[PathBuf]) -> Vec<PathBuf> {
    let mut paths = default_files(root);
    paths.extend(given.iter().cloned());
    paths
}

/// Reads and checks variables files in order: a later file's variable replaces an earlier
/// one's of the same key and environment scope (a team file, then your own).
pub(crate) fn read_all(paths: &[PathBuf]) -> Result<Vec<ProjectVariable>, String> {
    let mut out: Vec<ProjectVariable> = Vec::new();
    for path in paths {
        for v in read(path)? {
            match out
                .iter_mut()
                .find(|o| o.key == v.key && o.environment_scope == v.environment_scope)
            {
                Some(slot) => *slot = v,
                None => out.push(v),
            }
        }
    }
    Ok(out)
}

/// Reads and checks a variables file.
pub(crate) fn read(path: &Path) -> Result<Vec<ProjectVariable>, String> {
    let shown = path.display().to_string();
    parse(&read_text(path)?, &shown, Owner::Project)
}

/// Reads and checks a variables file of instance variables (`gantry variable import
/// --instance`): the same format without environment scopes (an instance variable has
/// none: one value per key).
pub(crate) fn read_instance(path: &Path) -> Result<Vec<InstanceVariable>, String> {
    let shown = path.display().to_string();
    let vars = parse(&read_text(path)?, &shown, Owner::Instance)?;
    Ok(vars
        .into_iter()
        .map(|v| InstanceVariable {
            key: v.key,
            value: v.value,
            variable_type: v.variable_type,
            protected: v.protected,
            masked: v.masked,
            raw: v.raw,
            description: v.description,
        })
        .collect())
}

fn read_text(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the variables file {}: {e}", path.display()))
}

/// Whose variables a file holds: a project's may have environment scopes, the instance's not.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Owner {
    Project,
    Instance,
}

fn parse(text: &str, file: &str, owner: Owner) -> Result<Vec<ProjectVariable>, String> {
    let at = |node: &Node| format!("{file}:{}:{}", node.pos.line, node.pos.col);
    let documents = parse_documents(text, FileId(0), Limits::default()).map_err(|e| {
        format!(
            "{file}:{}:{}: {} (the variables file must be YAML)",
            e.pos.line, e.pos.col, e.message
        )
    })?;
    let root = match documents.as_slice() {
        [] => return Ok(Vec::new()),
        [root] if root.is_null() => return Ok(Vec::new()),
        [root] => root,
        [_, second, ..] => {
            return Err(format!(
                "{}: the variables file holds more than one YAML document: keep one mapping of KEY: value",
                at(second)
            ));
        }
    };
    let Some(map) = root.as_map() else {
        return Err(format!(
            "{}: the variables file must be a mapping of KEY: value (or KEY: {{{ATTRIBUTES}}})",
            at(root)
        ));
    };
    let mut out = Vec::new();
    for (key, node) in map.iter() {
        match &node.value {
            Value::Seq(_) if owner == Owner::Instance => {
                return Err(format!(
                    "{}: `{key}`: an instance variable has one value (no environment scopes): give it as `{key}: value` or a mapping of {INSTANCE_ATTRIBUTES}",
                    at(node)
                ));
            }
            Value::Seq(items) => {
                for item in items.iter() {
                    out.push(variable(key, item, &at, owner)?);
                }
            }
            _ => out.push(variable(key, node, &at, owner)?),
        }
    }
    let mut seen = std::collections::HashSet::new();
    for v in &out {
        if !seen.insert((v.key.as_str(), v.environment_scope.as_str())) {
            return Err(format!(
                "{file}: `{}` is given twice for environment scope `{}`: keep one",
                v.key, v.environment_scope
            ));
        }
    }
    Ok(out)
}

fn variable(
    key: &str,
    node: &Node,
    at: &dyn Fn(&Node) -> String,
    owner: Owner,
) -> Result<ProjectVariable, String> {
    let mut v = ProjectVariable::new(key, "");
    if let Some(map) = node.as_map() {
        let mut has_value = false;
        for (attr, value) in map.iter() {
            let text = || {
                value
                    .scalar_to_string()
                    .ok_or_else(|| format!("{}: `{key}`: {attr} must be a string", at(value)))
            };
            let flag = || {
                value
                    .as_bool()
                    .ok_or_else(|| format!("{}: `{key}`: {attr} must be true or false", at(value)))
            };
            match attr {
                "value" => {
                    v.value = text()?;
                    has_value = true;
                }
                "type" | "variable_type" => v.variable_type = text()?,
                "masked" => v.masked = flag()?,
                "hidden" if owner == Owner::Project => v.hidden = flag()?,
                "protected" => v.protected = flag()?,
                "raw" => v.raw = flag()?,
                "expand" => v.raw = !flag()?,
                "environment_scope" if owner == Owner::Instance => {
                    return Err(format!(
                        "{}: `{key}`: an instance variable has no environment_scope: remove it (every job of every project gets an instance variable; scope a project variable instead)",
                        at(value)
                    ));
                }
                "environment_scope" => v.environment_scope = text()?,
                "description" => v.description = Some(text()?),
                other => {
                    let known = match owner {
                        Owner::Project => ATTRIBUTES,
                        Owner::Instance => INSTANCE_ATTRIBUTES,
                    };
                    return Err(format!(
                        "{}: `{key}`: unknown attribute `{other}`: use {known}",
                        at(value)
                    ));
                }
            }
        }
        if !has_value {
            return Err(format!(
                "{}: `{key}`: value is missing: give it as `value: ...`",
                at(node)
            ));
        }
    } else {
        v.value = node.scalar_to_string().ok_or_else(|| {
            format!(
                "{}: `{key}`: a variable is a string, number or boolean, or a mapping of {ATTRIBUTES}",
                at(node)
            )
        })?;
    }
    validate(&v).map_err(|e| format!("{}: {e}", at(node)))?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_values_attributes_and_scopes() {
        let vars = parse(
            "A: one\nN: 42\nB: true\nK:\n  value: secret-value-1\n  type: file\n  masked: true\n  protected: true\n  expand: false\nS:\n  - {value: s, environment_scope: staging}\n  - {value: p, environment_scope: production}\n",
            "vars.yml",
            Owner::Project,
        )
        .unwrap();
        let got: Vec<_> = vars
            .iter()
            .map(|v| {
                (
                    v.key.as_str(),
                    v.value.as_str(),
                    v.variable_type.as_str(),
                    v.masked,
                    v.protected,
                    v.raw,
                    v.environment_scope.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("A", "one", "env_var", false, false, false, "*"),
                ("N", "42", "env_var", false, false, false, "*"),
                ("B", "true", "env_var", false, false, false, "*"),
                ("K", "secret-value-1", "file", true, true, true, "*"),
                ("S", "s", "env_var", false, false, false, "staging"),
                ("S", "p", "env_var", false, false, false, "production"),
            ]
        );
        assert!(parse("", "v.yml", Owner::Project).unwrap().is_empty());
        // `hidden` (project variables only, with masked).
        let hidden = parse(
            "H: {value: secret-value-1, masked: true, hidden: true}\n",
            "v.yml",
            Owner::Project,
        )
        .unwrap();
        assert!(hidden[0].hidden && hidden[0].masked);
        assert!(
            parse(
                "H: {value: secret-value-1, hidden: true}\n",
                "v.yml",
                Owner::Project
            )
            .unwrap_err()
            .contains("a hidden variable is masked too"),
        );
        assert!(
            parse(
                "H: {value: secret-value-1, masked: true, hidden: true}\n",
                "v.yml",
                Owner::Instance
            )
            .unwrap_err()
            .contains("unknown attribute `hidden`"),
        );
    }

    #[test]
    fn a_later_file_replaces_an_earlier_ones_variable_of_the_same_key_and_scope() {
        let dir = tempfile::tempdir().unwrap();
        let team = dir.path().join("team.yml");
        let mine = dir.path().join("mine.yml");
        std::fs::write(
            &team,
            "A: team\nB: team\nC: {value: prod, environment_scope: production}\n",
        )
        .unwrap();
        std::fs::write(&mine, "B: mine\nC: mine\n").unwrap();
        let got: Vec<(String, String, String)> = read_all(&[team, mine])
            .unwrap()
            .into_iter()
            .map(|v| (v.key, v.value, v.environment_scope))
            .collect();
        let t = |k: &str, v: &str, s: &str| (k.to_owned(), v.to_owned(), s.to_owned());
        assert_eq!(
            got,
            [
                t("A", "team", "*"),
                t("B", "mine", "*"),
                t("C", "prod", "production"),
                t("C", "mine", "*")
            ]
        );
        assert!(read_all(&[]).unwrap().is_empty());
    }

    #[test]
    fn errors_name_the_place_and_the_fix() {
        let err = |text: &str| parse(text, "v.yml", Owner::Project).unwrap_err();
        assert_eq!(
            err("A:\n  valu: x\n"),
            "v.yml:2:9: `A`: unknown attribute `valu`: use value, type (env_var or file), masked, hidden, protected, raw, environment_scope, description"
        );
        assert_eq!(
            err("A:\n  masked: true\n"),
            "v.yml:2:3: `A`: value is missing: give it as `value: ...`"
        );
        assert!(
            err("A:\n  value: short\n  masked: true\n")
                .starts_with("v.yml:2:3: value of `A`: cannot be masked")
        );
        assert!(err("A-B: x\n").starts_with("v.yml:1:6: key: `A-B` can contain only"));
        assert!(err("- a\n").starts_with("v.yml:1:1: the variables file must be a mapping"));
        assert!(err("A: [x\n").starts_with("v.yml:"));
        assert_eq!(
            err("A:\n  - {value: x}\n  - {value: y}\n"),
            "v.yml: `A` is given twice for environment scope `*`: keep one"
        );
        assert_eq!(
            err("A:\n  value: x\n  masked: yes please\n"),
            "v.yml:3:11: `A`: masked must be true or false"
        );
    }

    #[test]
    fn instance_variables_have_no_environment_scope() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("instance.yml");
        let read = |text: &str| {
            std::fs::write(&file, text).unwrap();
            read_instance(&file)
        };
        let vars = read("A: one\nK: {value: secret-value-1, type: file, masked: true, protected: true, raw: true, description: d}\n").unwrap();
        assert_eq!(
            vars,
            [
                InstanceVariable::new("A", "one"),
                InstanceVariable {
                    variable_type: "file".into(),
                    masked: true,
                    protected: true,
                    raw: true,
                    description: Some("d".into()),
                    ..InstanceVariable::new("K", "secret-value-1")
                }
            ]
        );
        let shown = file.display().to_string();
        assert_eq!(
            read("A:\n  value: x\n  environment_scope: production\n").unwrap_err(),
            format!(
                "{shown}:3:22: `A`: an instance variable has no environment_scope: remove it (every job of every project gets an instance variable; scope a project variable instead)"
            )
        );
        assert_eq!(
            read("A:\n  - {value: x}\n").unwrap_err(),
            format!(
                "{shown}:2:3: `A`: an instance variable has one value (no environment scopes): give it as `A: value` or a mapping of value, type (env_var or file), masked, protected, raw, description"
            )
        );
        assert!(
            read("A:\n  valu: x\n")
                .unwrap_err()
                .ends_with("unknown attribute `valu`: use value, type (env_var or file), masked, protected, raw, description")
        );
        assert!(
            read("A:\n  value: short\n  masked: true\n")
                .unwrap_err()
                .contains("cannot be masked")
        );
    }
}

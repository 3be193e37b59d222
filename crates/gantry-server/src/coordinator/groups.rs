//! Groups: the namespaces of project paths (`acme/platform/app` is in `acme` and
//! `acme/platform`; a name without `/` is in the default namespace), and the groups made
//! with `POST /groups` (which exist without projects), with GitLab's numeric ids. A
//! namespace is a group while a project is under it; its path gets an id the first time
//! the API shows or names it (`group_ids`), and keeps it. `/groups/:id` takes the id or
//! the URL-encoded full path.

use std::collections::BTreeSet;

use serde::Serialize;

use super::Coordinator;
use super::error::CoordinatorError;
use super::projects::full_path;
use super::time::now_ms;

/// A group, shaped like GitLab's `GET /groups/:id` (the fields Gantry has).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GroupView {
    pub id: i64,
    pub name: String,
    pub path: String,
    pub full_path: String,
    pub full_name: String,
    pub parent_id: Option<i64>,
    pub web_url: String,
    pub visibility: &'static str,
    pub description: String,
}

/// A group as GitLab's namespaces API shows it (its `Namespace` entity): Gantry's
/// namespaces are all groups (`kind` `group`; it has no user namespaces).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NamespaceView {
    pub id: i64,
    pub name: String,
    pub path: String,
    pub kind: &'static str,
    pub full_path: String,
    pub parent_id: Option<i64>,
    pub avatar_url: Option<String>,
    pub web_url: String,
}

impl NamespaceView {
    pub fn of(g: &GroupView) -> Self {
        NamespaceView {
            id: g.id,
            name: g.name.clone(),
            path: g.path.clone(),
            kind: "group",
            full_path: g.full_path.clone(),
            parent_id: g.parent_id,
            avatar_url: None,
            web_url: g.web_url.clone(),
        }
    }
}

/// Every namespace of a project path, outermost first: `a/b/c` → `a`, `a/b`.
fn namespaces_of(project_path: &str) -> Vec<String> {
    let parts: Vec<&str> = project_path.split('/').collect();
    (1..parts.len()).map(|n| parts[..n].join("/")).collect()
}

/// The groups: the namespaces of the server's projects and the groups made with
/// `POST /groups`, by full path.
pub(crate) async fn group_paths(
    store: &gantry_store::Store,
) -> std::result::Result<BTreeSet<String>, gantry_store::StoreError> {
    let mut paths: BTreeSet<String> = store
        .projects()
        .await?
        .iter()
        .flat_map(|p| namespaces_of(&full_path(&p.name)))
        .collect();
    for group in store.created_groups().await? {
        paths.extend(namespaces_of(&format!("{}/x", group.path)));
    }
    Ok(paths)
}

impl Coordinator {
    /// The groups ([`group_paths`]).
    pub(crate) async fn group_paths(
        &self,
    ) -> std::result::Result<BTreeSet<String>, CoordinatorError> {
        Ok(group_paths(&self.inner.store).await?)
    }

    /// Every group, by full path.
    pub async fn groups(&self) -> std::result::Result<Vec<GroupView>, CoordinatorError> {
        let paths: Vec<String> = self.group_paths().await?.into_iter().collect();
        let ids = self.inner.store.group_ids(&paths, now_ms()).await?;
        let created = self.inner.store.created_groups().await?;
        let id_of = |path: &str| ids.iter().find(|(p, _)| p == path).map(|(_, id)| *id);
        Ok(ids
            .iter()
            .map(|(path, id)| self.group_view(path, *id, &id_of, &created))
            .collect())
    }

    /// Makes a group (`POST /groups`): `path` (GitLab's path rules) under the group
    /// `parent` (an id or a path) or at the top, named `name`. A path a group or a
    /// project has already is refused.
    pub async fn create_group(
        &self,
        name: &str,
        path: &str,
        parent: Option<&str>,
        description: &str,
    ) -> std::result::Result<GroupView, CoordinatorError> {
        if name.trim().is_empty() {
            return Err(CoordinatorError::Invalid("name is missing".to_owned()));
        }
        check_group_path(path)?;
        let full = match parent {
            Some(parent) => {
                let parent = self.group_path(parent).await.map_err(|error| match error {
                    CoordinatorError::NotFound(_) => CoordinatorError::NotFound("parent group"),
                    other => other,
                })?;
                format!("{parent}/{path}")
            }
            None => path.to_owned(),
        };
        let taken = || {
            CoordinatorError::Invalid(format!(
                "Failed to save group {{:path=>[\"has already been taken\"]}}: `{full}` is a group or a project already"
            ))
        };
        if self.group_paths().await?.contains(&full)
            || self
                .inner
                .store
                .projects()
                .await?
                .iter()
                .any(|p| full_path(&p.name) == full)
        {
            return Err(taken());
        }
        self.inner
            .store
            .create_group(&full, name.trim(), description, now_ms())
            .await?
            .ok_or_else(taken)?;
        self.facts().forget_group_names();
        self.group(&full).await
    }

    /// Deletes a group made with `POST /groups`. Gantry deletes no projects with it: a
    /// group with projects or subgroups under it is refused (GitLab would delete them).
    pub async fn delete_group(
        &self,
        id_or_path: &str,
    ) -> std::result::Result<(), CoordinatorError> {
        let path = self.group_path(id_or_path).await?;
        let inside = |p: &str| p.starts_with(&format!("{path}/"));
        let projects = self.inner.store.projects().await?;
        let created = self.inner.store.created_groups().await?;
        if projects.iter().any(|p| inside(&full_path(&p.name)))
            || created.iter().any(|g| inside(&g.path))
        {
            return Err(CoordinatorError::Invalid(format!(
                "group `{path}` has projects or subgroups: Gantry deletes a group only when it is empty; delete or move them first"
            )));
        }
        self.inner.store.uncreate_group(&path).await?;
        self.settings().forget_kept();
        self.facts().forget_group_names();
        Ok(())
    }

    /// A group by id or full path; `NotFound` when no project is under it.
    pub async fn group(
        &self,
        id_or_path: &str,
    ) -> std::result::Result<GroupView, CoordinatorError> {
        let path = self.group_path(id_or_path).await?;
        // The group and the groups above it (for `parent_id`).
        let chain = namespaces_of(&format!("{path}/x"));
        let ids = self.inner.store.group_ids(&chain, now_ms()).await?;
        let id_of = |p: &str| ids.iter().find(|(q, _)| q == p).map(|(_, id)| *id);
        let id = id_of(&path).ok_or(CoordinatorError::NotFound("group"))?;
        let created = self.inner.store.created_groups().await?;
        Ok(self.group_view(&path, id, &id_of, &created))
    }

    /// The full path of the group `id_or_path` names (a number is an id); `NotFound` when
    /// no project is under it.
    pub async fn group_path(
        &self,
        id_or_path: &str,
    ) -> std::result::Result<String, CoordinatorError> {
        let named = id_or_path.trim_matches('/');
        let path = match named.parse::<i64>() {
            Ok(id) => self
                .inner
                .store
                .group_path(id)
                .await?
                .ok_or(CoordinatorError::NotFound("group"))?,
            Err(_) => named.to_owned(),
        };
        if !self.group_paths().await?.contains(&path) {
            return Err(CoordinatorError::NotFound("group"));
        }
        Ok(path)
    }

    fn group_view(
        &self,
        path: &str,
        id: i64,
        id_of: &dyn Fn(&str) -> Option<i64>,
        created: &[gantry_store::CreatedGroup],
    ) -> GroupView {
        let (parent, segment) = match path.rsplit_once('/') {
            Some((parent, segment)) => (Some(parent), segment),
            None => (None, path),
        };
        let made = created.iter().find(|g| g.path == path);
        let name_of = |full: &str| {
            created
                .iter()
                .find(|g| g.path == full)
                .map(|g| g.name.clone())
                .unwrap_or_else(|| full.rsplit('/').next().unwrap_or(full).to_owned())
        };
        let full_name = namespaces_of(&format!("{path}/x"))
            .iter()
            .map(|p| name_of(p))
            .collect::<Vec<_>>()
            .join(" / ");
        GroupView {
            id,
            name: name_of(path),
            path: segment.to_owned(),
            full_path: path.to_owned(),
            full_name,
            parent_id: parent.and_then(id_of),
            web_url: format!(
                "{}/groups/{path}",
                self.external_url().trim_end_matches('/')
            ),
            visibility: "private",
            description: made.map(|g| g.description.clone()).unwrap_or_default(),
        }
    }
}

/// GitLab's rules for a group's path: letters, digits, `_`, `-` and `.`; not starting
/// with `-` or `.`, not ending with `.git` or `.atom`; at most 255 characters.
fn check_group_path(path: &str) -> std::result::Result<(), CoordinatorError> {
    let bad = |why: &str| CoordinatorError::Invalid(format!("path `{path}` {why}"));
    if path.is_empty() {
        return Err(bad("is missing"));
    }
    if path.len() > 255 {
        return Err(bad("is longer than 255 characters"));
    }
    if !path
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(bad("can contain only letters, digits, '_', '-' and '.'"));
    }
    if path.starts_with(['-', '.']) || path.ends_with(".git") || path.ends_with(".atom") {
        return Err(bad(
            "cannot start with '-' or '.', or end in '.git' or '.atom'",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{check_group_path, namespaces_of};

    #[test]
    fn group_paths_follow_gitlab_s_rules() {
        for good in ["acme", "a.b_c-d", "Team2"] {
            assert!(check_group_path(good).is_ok(), "{good}");
        }
        for bad in ["", "-x", ".x", "a/b", "a b", "x.git", "x.atom", "é"] {
            assert!(check_group_path(bad).is_err(), "{bad:?}");
        }
        assert!(check_group_path(&"a".repeat(256)).is_err());
    }

    #[test]
    fn a_projects_namespaces_are_its_path_prefixes() {
        assert_eq!(namespaces_of("a/b/c"), ["a", "a/b"]);
        assert_eq!(namespaces_of("gantry/app"), ["gantry"]);
        assert!(namespaces_of("app").is_empty());
    }
}

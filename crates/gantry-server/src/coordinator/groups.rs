//! Groups: the namespaces of project paths (`acme/platform/app` is in `acme` and
//! `acme/platform`; a name without `/` is in the default namespace), with GitLab's numeric
//! ids. A group exists while a project is under it; its path gets an id the first time the
//! API shows or names it (`group_ids`), and keeps it. `/groups/:id` takes the id or the
//! URL-encoded full path.

use std::collections::BTreeSet;

use serde::Serialize;

use super::Coordinator;
use super::error::CoordinatorError;
use super::pipelines::full_path;
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

/// Every namespace of a project path, outermost first: `a/b/c` → `a`, `a/b`.
fn namespaces_of(project_path: &str) -> Vec<String> {
    let parts: Vec<&str> = project_path.split('/').collect();
    (1..parts.len()).map(|n| parts[..n].join("/")).collect()
}

impl Coordinator {
    /// The groups of the server's projects, by full path.
    async fn group_paths(&self) -> std::result::Result<BTreeSet<String>, CoordinatorError> {
        Ok(self
            .inner
            .store
            .projects()
            .await?
            .iter()
            .flat_map(|p| namespaces_of(&full_path(&p.name)))
            .collect())
    }

    /// Every group, by full path.
    pub async fn groups(&self) -> std::result::Result<Vec<GroupView>, CoordinatorError> {
        let paths: Vec<String> = self.group_paths().await?.into_iter().collect();
        let ids = self.inner.store.group_ids(&paths, now_ms()).await?;
        let id_of = |path: &str| ids.iter().find(|(p, _)| p == path).map(|(_, id)| *id);
        Ok(ids
            .iter()
            .map(|(path, id)| self.group_view(path, *id, &id_of))
            .collect())
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
        Ok(self.group_view(&path, id, &id_of))
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

    /// The id of group `path` (kept in memory once read; given on first sight).
    pub(crate) async fn group_id(&self, path: &str) -> std::result::Result<i64, CoordinatorError> {
        if let Some(id) = self.runtime().group_ids.get(path) {
            return Ok(*id);
        }
        let ids = self
            .inner
            .store
            .group_ids(&[path.to_owned()], now_ms())
            .await?;
        let id = ids
            .first()
            .map(|(_, id)| *id)
            .ok_or(CoordinatorError::NotFound("group"))?;
        self.runtime().group_ids.insert(path.to_owned(), id);
        Ok(id)
    }

    fn group_view(&self, path: &str, id: i64, id_of: &dyn Fn(&str) -> Option<i64>) -> GroupView {
        let (parent, name) = match path.rsplit_once('/') {
            Some((parent, name)) => (Some(parent), name),
            None => (None, path),
        };
        GroupView {
            id,
            name: name.to_owned(),
            path: name.to_owned(),
            full_path: path.to_owned(),
            full_name: path.replace('/', " / "),
            parent_id: parent.and_then(id_of),
            web_url: format!(
                "{}/groups/{path}",
                self.external_url().trim_end_matches('/')
            ),
            visibility: "private",
            description: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::namespaces_of;

    #[test]
    fn a_projects_namespaces_are_its_path_prefixes() {
        assert_eq!(namespaces_of("a/b/c"), ["a", "a/b"]);
        assert_eq!(namespaces_of("gantry/app"), ["gantry"]);
        assert!(namespaces_of("app").is_empty());
    }
}

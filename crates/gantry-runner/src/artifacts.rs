//! Job artifacts on the runner side (spec `runner-api.md` §3.5.8, §3.5.12, §6;
//! `ci-yaml.md` §3 `artifacts`): collecting files, building the upload file in the
//! format the artifact type requires, validating `dotenv` reports, and extracting
//! downloaded archives into the build directory without ever writing outside it.
//!
//! No HTTP here: the job lifecycle calls [`prepare_upload`] for each payload entry
//! (after [`should_upload`]), streams the file it returns to `POST /jobs/:id/artifacts`,
//! and calls [`extract_archive`] on each file downloaded from `GET /jobs/:id/artifacts`.
//! All functions are blocking (file system work); run them on a blocking thread.
//!
//! # Which files (gitlab-runner's `file_archiver.go`)
//!
//! Paths are relative to the build directory (`$CI_PROJECT_DIR`); `$VAR`s in `name`,
//! `paths` and `exclude` are expanded first (runner-side expansion, Go's `os.Expand`).
//!
//! * A path without glob characters names a file, symlink or directory; a directory is
//!   included recursively. A path with `*`, `?`, `[…]` or `{a,b}` is a doublestar glob:
//!   `*` stays within one path segment, `**` spans any number of them, dot files match.
//!   Every match that is a directory is included recursively.
//! * Symbolic links are stored as links (their target text), never followed; a glob
//!   never descends through a link. The literal (non-glob) prefix of a path may pass
//!   through a link only when the link resolves inside the build directory.
//! * A path outside the build directory (`../x`, an absolute path elsewhere) is refused
//!   with a warning, as is an empty path.
//! * `exclude` globs are matched against each candidate's relative path (files and
//!   directories alike; excluding a directory entry does not exclude what is inside
//!   it — write `dir/**` for that, as in gitlab-runner).
//! * `untracked: true` adds `git ls-files --others` (untracked *and* ignored files).
//! * Each path logs `<path>: found N matching artifact files and directories`, or the
//!   warning `<path>: no matching files. Ensure that the artifact path is relative to
//!   the working directory (<dir>)`; excludes log `<pattern>: excluded N files`.
//!
//! # Upload formats (§6.2)
//!
//! | format | layout | file name |
//! |---|---|---|
//! | `zip` (`archive`, `lsif`, `scip`) | one entry per file, directory (`name/`) and symlink (link target as content), sorted by path; deflate; Unix mode and modification time kept | `<name>.zip` |
//! | `gzip` (`junit`, `dotenv`, `cobertura`, …) | one gzip member per regular file, sorted by path; member header `name` = base name, `comment` = relative path, `mtime` kept; non-ASCII names as `e:<percent-escaped>` | `<name>.gz` |
//! | `raw` (`sast`, `codequality`, …) | the single matching file, as is (more than one file is an error) | `<name>` |
//!
//! `<name>` is the base name of `artifacts:name` (`artifacts` when unset, `default`
//! when empty or `.`). `zipzstd` and `tarzstd` payload formats are built as `zip` and
//! `tar.zst` respectively.
//!
//! # Extraction (§6.4)
//!
//! [`extract_archive`] recognises the format by its first bytes (zip `PK`, gzip
//! `1f 8b`, zstd `28 b5 2f fd` = tar.zst); caches (`cache/`) and `gantry run`'s export
//! go through the same code. Each entry name must be relative with no `..` segment
//! (`\` counts as a separator). Every write resolves all components and links with
//! `openat2(RESOLVE_BENEATH)` (or an equivalent walk over descriptors where the kernel
//! lacks it), so nothing is written outside the build directory; existing files and
//! links are replaced (the link itself, never its target). A symbolic link is created
//! only when its target, resolved through what is on disk, stays inside the build
//! directory and keeps doing so whatever later entries or archives add: relative, and
//! a `..` only after real directories (the rule and why in `dest.rs`). Any violation
//! stops the extraction with [`ArtifactError::UnsafeEntry`] naming the entry (control
//! characters in names escaped). Entries other than files, directories and links (tar
//! hard links, devices, fifos, sockets) are skipped with a warning,
//! [`ExtractSummary::notes`]. A corrupt archive is an error, never a panic.

mod collect;
mod dest;
mod dotenv;
mod error;
mod extract;
mod gzip;
mod note;
pub(crate) mod tar_zstd;
mod upload;
mod zip_archive;

pub use collect::{CollectSpec, Collected, Entry, EntryKind, collect};
pub use dotenv::{DotenvError, DotenvLimits, DotenvVariable, parse_dotenv, parse_dotenv_files};
pub use error::ArtifactError;
pub use extract::{ArchiveKind, ExtractSummary, detect_archive_kind, extract_archive};
pub use note::Note;
pub use upload::{PreparedUpload, prepare_upload, should_upload, upload_file_name};

pub(crate) use dest::Destination;
pub(crate) use extract::extract_tar;

/// Looks a job variable up by name (`None` when undefined). Build one over the job's
/// variables with [`lookup_in`].
pub type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// A [`Lookup`] over payload variables; the last definition of a name wins, as in
/// gitlab-runner's `JobVariables.Get`.
pub fn lookup_in(
    variables: &[gantry_protocol::JobVariable],
) -> impl Fn(&str) -> Option<String> + '_ {
    move |name| gantry_protocol::variable(variables, name).map(str::to_owned)
}

/// Runner-side variable expansion (gitlab-runner's `ExpandValue`).
pub(crate) fn expand(text: &str, lookup: Lookup<'_>) -> String {
    gantry_pipeline::expand::expand_runner(text, lookup)
}

//! `get_sources`: the job's repository in the build directory, with the `git` CLI as
//! gitlab-runner drives it (spec `runner-api.md` §3.5.2; variables `GIT_STRATEGY`,
//! `GIT_CHECKOUT`, `GIT_CLEAN_FLAGS`, `GIT_FETCH_EXTRA_FLAGS`,
//! `GIT_SUBMODULE_STRATEGY`, `GIT_SUBMODULE_DEPTH`, `GIT_SUBMODULE_PATHS`,
//! `GIT_SUBMODULE_UPDATE_FLAGS`, `GIT_LFS_SKIP_SMUDGE`).
//!
//! # What happens
//!
//! * `none`: `Skipping Git repository setup`; the directory is created if missing and
//!   left as it is. `empty`: the directory is emptied.
//! * `clone` removes the project directory first; `fetch` reuses it. Both then do what
//!   gitlab-runner does: remove stale lock files (`.git/index.lock`, `shallow.lock`,
//!   `HEAD.lock`, `config.lock`, `refs/**/*.lock`, `hooks/post-checkout`), `git init`
//!   (`init.defaultBranch=none`, object format from the payload), add or re-point
//!   `origin`, and `git fetch origin --no-recurse-submodules <refspecs> [--depth N]
//!   <GIT_FETCH_EXTRA_FLAGS: --prune --quiet>` (`--unshallow` when a full fetch finds a
//!   shallow repository). Refspecs come from the payload; when it has none they are
//!   derived as GitLab does (§3.5.2) minus the pipeline ref.
//! * Checkout (unless `GIT_CHECKOUT=false`): `git checkout -f -q <sha>` (detached), then
//!   `git clean <GIT_CLEAN_FLAGS: -ffdx>` (`none` skips it), then `git lfs pull` when
//!   git-lfs is installed (LFS smudging is off during checkout, as in gitlab-runner).
//! * Submodules (`normal`, `recursive`): `init`, `sync`, clean and reset each
//!   submodule, `update --init [--recursive] [--depth GIT_SUBMODULE_DEPTH]`, retried
//!   once after a new `sync` when it fails.
//!
//! # Snapshots (`gantry run`)
//!
//! When the job's [`SourcesJob::snapshot`] names a directory, `clone` and `fetch` make
//! the project directory an exact replica of it instead of running git ([`sync_tree`]:
//! `clone` empties the directory first, `fetch` reuses what is there, removing what the
//! snapshot lacks and rewriting every file, as `git clean -ffdx` and `git checkout -f`
//! would); `none` and `empty` behave as above. Git settings that shape a
//! checkout (`GIT_CHECKOUT`, `GIT_CLEAN_FLAGS`, `GIT_DEPTH`, submodules) do not apply:
//! the snapshot already is the working tree.
//!
//! # Credentials
//!
//! The payload's `repo_url` carries `gitlab-ci-token:<job token>@`. It is never given
//! to git as such, never written to `.git/config` and never printed:
//!
//! * `origin` is set to the URL without its user info;
//! * the user and password travel as `http.<scheme>://<host>/.extraHeader =
//!   Authorization: Basic …`, passed to each git process through the environment
//!   (`GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n`, appended after any the
//!   job defines), so it is neither in a command line (`ps`) nor on disk, and it covers
//!   submodules on the same host;
//! * credential helpers are reset (`credential.helper=`) and prompts disabled
//!   (`GIT_TERMINAL_PROMPT=0`, empty `GIT_ASKPASS`), so a bad token fails instead of
//!   hanging or using the runner host's own credentials;
//! * every line forwarded (git's stdout and stderr, and our own messages) goes through
//!   a [`Masker`]: user info in any `scheme://user:pass@` URL becomes `[MASKED]`, and
//!   the token, its URL-encoded form and the Basic value are replaced wherever they
//!   appear.
//!
//! An entry's `clone_url` replaces the scheme, host and port of the repository URL
//! (`credentials::clone_url_repository`).
//!
//! # Output
//!
//! Lines (without line breaks) go to the `output` callback as they come, so the trace
//! code can put them in the `get_sources` section. Messages of our own use
//! gitlab-runner's wording (`Fetching changes with git depth set to 20...`,
//! `Checking out b83d6e39 as detached HEAD (ref is main)...`, …).
//!
//! [`get_sources`] is async (tokio processes with `kill_on_drop`): dropping the future
//! — job cancelled or timed out — kills the running git process.

mod credentials;
mod flow;
mod git;
mod settings;
mod snapshot;

pub use credentials::{Masker, RepoUrl, clone_url_repository, mask_url_credentials};
pub use flow::{SourcesError, SourcesJob, get_sources};
pub use settings::{GitSettings, GitStrategy, SubmoduleStrategy};
pub use snapshot::{CopyStats, MAX_SNAPSHOT_DEPTH, sync_tree};

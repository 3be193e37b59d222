//! The Docker executor: each job in containers of the image it names, with its services
//! on a network of its own, on the local Docker engine (Docker Engine API through
//! `bollard`).
//!
//! # No helper image
//!
//! gitlab-runner's Docker executor starts a *helper* container (its own image, pulled
//! on first use) for every stage that is not the user's script: cloning, cache,
//! artifacts. Gantry does those on the host, in the job's build directory, exactly as
//! the shell executor does, and bind-mounts the slot directory holding it into the job's
//! containers at `/builds`, where gitlab-runner's Docker executor keeps its builds. So
//! the job sees `CI_BUILDS_DIR=/builds` and `CI_PROJECT_DIR=/builds/<project path>`
//! ([`crate::job::BuildDirs::in_container`]): no helper image to pull, no helper
//! container to create, start and remove per stage.
//!
//! ```text
//! host                                         container
//! <builds_dir>/<short token>/<concurrent id>/  ─bind─►  /builds/
//!    <project>        (git on the host)                    <project>      $CI_PROJECT_DIR
//!    <project>.tmp    file variables, archives in transit  <project>.tmp
//! <cache_dir>/                                 ─bind─►  <cache_dir>/
//! ```
//!
//! # A job
//!
//! * `prepare_executor`: the image (the job's `image:`, else `[runners.docker] image`)
//!   is checked against `allowed_images` and fetched per the pull policies
//!   ([`policy`]); with services, a network `gantry-<token>-<job>-<nonce>` is created
//!   and each service is started on it with its aliases ([`names::service_aliases`])
//!   and waited for ([`services`]); the job's build container joins it as `build`, as
//!   with gitlab-runner's network per build, so services can reach the job.
//! * `get_sources` (on the host): the checkout then gets the modes umask 0000 gives, as
//!   gitlab-runner's helper makes it (files 666, directories and executables 777), so any
//!   user of the image can write it ([`umask`]).
//! * every stage (hooks, `step_script`, `after_script`): the job's build container,
//!   made from the image for the first stage and started again for each later one (as
//!   gitlab-runner reuses it: what `step_script` leaves in `/tmp` is there for
//!   `after_script`), the script sent on its standard input and run by the image's bash
//!   (else sh), as the image's user unless `image:docker:user` or `[runners.docker]
//!   user` say otherwise; its exit code is the stage's. The job's variables are the
//!   container's environment as well, so the image's entrypoint sees them (those that
//!   hold the job token excepted: they would show in `docker inspect`). A timeout or
//!   cancellation sends SIGTERM to every process of the container, then SIGKILL after
//!   the grace period ([`job`]). Under `gantry runner run` (a job record kept) the
//!   script stages run detached: their output and exit code go to files in the build
//!   directory, so a runner killed or restarted leaves the container running and the
//!   next runner process takes the job over in it (`job::detached`).
//! * the end (also after an error, a timeout, a cancellation): every container, network
//!   and volume of the job is removed, found by its `com.gantry.job.instance` label.
//!
//! Everything created carries the labels of [`names`] (`com.gantry.runner=<short
//! token>`, `com.gantry.job=<id>`); [`remove_leftovers`] removes what a crashed
//! runner left behind when its poll loop starts, except the containers of the jobs it
//! takes over (recorded in their job records, [`crate::journal::DockerRecord`]).

pub mod auth;
mod client;
mod error;
mod image;
mod job;
mod leftovers;
pub mod names;
pub mod policy;
mod services;
mod stats;
mod umask;

pub use client::{
    EngineRoute, connect, connect_through, connect_to, docker_available, docker_available_at,
    docker_host,
};
pub use error::DockerError;
pub use leftovers::{Removed, container_exists, remove_instance, remove_leftovers};

pub(crate) use job::{DockerExecutor, DockerJobSpec};
pub(crate) use umask::share_owner_bits;

//! `when` of steps, artifacts and cache entries (§3.5.5, §3.5.8, §3.5.9).

use crate::wire_enum::wire_enum;

wire_enum! {
    /// When a step runs or artifacts/cache are saved. gitlab-runner treats an empty
    /// value as `on_success`, so `""` parses as [`When::OnSuccess`].
    #[derive(Default)]
    pub enum When ("when", empty = OnSuccess) {
        /// Only if everything before succeeded.
        #[default]
        OnSuccess = "on_success",
        /// Only if something before failed.
        OnFailure = "on_failure",
        /// In both cases.
        Always = "always",
    }
}

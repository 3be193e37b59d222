//! Job variables made ready for a shell: file-type variables written to files, names
//! checked, values kept for `export` lines.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use gantry_protocol::JobVariable;

use super::quote::{contains_nul, is_variable_name};
use super::shell::ShellError;

/// Variables ready to be exported by a job script.
///
/// File-type variables (`file: true`) have been written to files in the directory
/// given to [`prepare_variables`] (mode 0600) and their value replaced by the file's
/// path, as gitlab-runner does. Call [`PreparedVariables::cleanup_file_variables`]
/// when the job ends (the `cleanup_file_variables` stage).
#[derive(Debug, Clone, Default)]
pub struct PreparedVariables {
    exports: Vec<(String, String)>,
    debug_trace: bool,
    files: Vec<PathBuf>,
    warnings: Vec<String>,
}

/// Writes file-type variables into `file_dir` and returns everything ready to export.
///
/// A variable whose name cannot be a shell variable name is skipped with a warning
/// (it could not be exported, and a file variable's name is a file name); a NUL byte
/// in a value is dropped with a warning. Later variables override earlier ones.
pub fn prepare_variables<'a, I>(
    variables: I,
    file_dir: &Path,
) -> Result<PreparedVariables, ShellError>
where
    I: IntoIterator<Item = &'a JobVariable>,
{
    prepare_variables_seen_at(variables, file_dir, file_dir)
}

/// [`prepare_variables`] for a job that sees `file_dir` as `seen_dir` (a container where
/// it is mounted there): the files are written into `file_dir`, the variables hold
/// their paths under `seen_dir`.
pub fn prepare_variables_seen_at<'a, I>(
    variables: I,
    file_dir: &Path,
    seen_dir: &Path,
) -> Result<PreparedVariables, ShellError>
where
    I: IntoIterator<Item = &'a JobVariable>,
{
    let mut prepared = PreparedVariables::default();
    for variable in variables {
        if !is_variable_name(&variable.key) {
            prepared.warnings.push(format!(
                "variable {:?} is not a valid shell variable name (letters, digits and `_`, not starting with a digit); it is not exported",
                variable.key
            ));
            continue;
        }
        if contains_nul(&variable.value) {
            prepared.warnings.push(format!(
                "variable {} contains a NUL byte, which a shell cannot hold; it is removed",
                variable.key
            ));
        }
        let value = if variable.file {
            let path = write_file_variable(file_dir, &variable.key, &variable.value)?;
            if !prepared.files.contains(&path) {
                prepared.files.push(path.clone());
            }
            match path.strip_prefix(file_dir) {
                Ok(name) => seen_dir.join(name),
                Err(_) => path,
            }
            .to_string_lossy()
            .into_owned()
        } else {
            variable.value.replace('\0', "")
        };
        prepared.exports.push((variable.key.clone(), value));
    }
    Ok(prepared)
}

fn write_file_variable(dir: &Path, key: &str, value: &str) -> Result<PathBuf, ShellError> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};

    let failed = |path: &Path, source: io::Error| ShellError::FileVariable {
        key: key.to_owned(),
        path: path.to_owned(),
        source,
    };
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| failed(dir, e))?;
    let path = dir.join(key);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| failed(&path, e))?;
    file.set_permissions(fs::Permissions::from_mode(0o600))
        .map_err(|e| failed(&path, e))?;
    file.write_all(value.as_bytes())
        .map_err(|e| failed(&path, e))?;
    Ok(path)
}

impl PreparedVariables {
    /// The same variables, for scripts that trace every command (`CI_DEBUG_TRACE`) or
    /// not.
    pub fn with_debug_trace(mut self, on: bool) -> Self {
        self.debug_trace = on;
        self
    }

    /// Whether scripts trace every command (`set -o xtrace`).
    pub fn debug_trace(&self) -> bool {
        self.debug_trace
    }

    /// `(name, value)` pairs in export order.
    pub fn exports(&self) -> &[(String, String)] {
        &self.exports
    }

    /// The value that will be exported for `name` (the last one wins).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.exports
            .iter()
            .rev()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// Adds (or overrides) a variable; ignored when `name` is not a shell name.
    pub fn set(&mut self, name: &str, value: &str) {
        if is_variable_name(name) {
            self.exports
                .push((name.to_owned(), value.replace('\0', "")));
        }
    }

    /// Files written for file-type variables.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// Problems met while preparing (write them to the job log).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Removes the files of file-type variables (missing files are fine).
    pub fn cleanup_file_variables(&self) -> Result<(), ShellError> {
        let mut first_error = None;
        for path in &self.files {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(source) => {
                    first_error.get_or_insert(ShellError::Cleanup {
                        path: path.clone(),
                        source,
                    });
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
pub(crate) use gantry_protocol::variable;

/// A boolean variable in Go's `strconv.ParseBool` spelling (`1`, `t`, `true`, …).
pub(crate) fn variable_flag(variables: &[JobVariable], name: &str) -> Option<bool> {
    match variable(variables, name)?.trim() {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

//! Output files: checked before any work starts, written under a temporary
//! name next to the final one (`OUT.partial`) and renamed into place only
//! when complete. So an existing file is never truncated before the new one
//! is known to be wanted, and a half-written file (the recorder was killed)
//! cannot be mistaken for a finished one — yet stays readable.
//!
//! Only a regular file is replaced that way. An output that exists and is
//! something else — a device (`-o /dev/null`), a pipe or a terminal (`-o
//! /dev/stdout`, a shell's `-o >(gzip > f.gz)`) — is written to directly:
//! renamed over, `/dev/stdout` became a regular file holding the export and
//! nothing reached the pipe, and as root `-o /dev/null` deleted the device
//! for every other program. A symbolic link to a regular file stays a link:
//! the file it names is the one replaced.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// What may be replaced at the output path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replace {
    /// Only an earlier trace (`record`): anything else needs `--force`.
    TracesOnly,
    /// Anything but a trace or an executable (`render`, exports).
    NotTracesOrPrograms,
    /// Anything (`--force`), still never an input of the same run.
    Anything,
}

/// An output file being written.
#[derive(Debug)]
pub struct PendingOutput {
    /// Where the output ends up (for a link to a regular file, the file).
    path: PathBuf,
    /// Where it is written until [`PendingOutput::commit`]: `path` itself
    /// when it is not a regular file (see the module's doc).
    partial: PathBuf,
}

impl PendingOutput {
    /// Checks that `path` may be written by a run that reads `inputs`, and
    /// names the temporary file. Creates nothing.
    pub fn new(path: &Path, inputs: &[&Path], replace: Replace) -> Result<Self> {
        if path.as_os_str().is_empty() {
            bail!("the output path is empty");
        }
        if path.is_dir() || path.as_os_str().to_string_lossy().ends_with('/') {
            bail!("cannot create {}: it is a directory", path.display());
        }
        for input in inputs {
            if same_file(path, input) {
                bail!("refusing to write {}: it is also an input of this run ({})", path.display(), input.display());
            }
        }
        let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
        match std::fs::metadata(path) {
            // A device, a pipe, a terminal, a socket: nothing to replace,
            // and nothing to sniff (reading a pipe or a terminal waits).
            Ok(meta) if !meta.is_file() => return Ok(PendingOutput::direct(path)),
            Ok(_) if is_link => {
                let target = std::fs::canonicalize(path)
                    .with_context(|| format!("cannot follow the link {}", path.display()))?;
                return PendingOutput::replacing(&target, replace);
            }
            // A link to nothing yet: writing creates what it names.
            Err(_) if is_link => return Ok(PendingOutput::direct(path)),
            _ => {}
        }
        PendingOutput::replacing(path, replace)
    }

    /// Written in place: `path` exists and is not a regular file.
    fn direct(path: &Path) -> PendingOutput {
        PendingOutput { path: path.to_path_buf(), partial: path.to_path_buf() }
    }

    /// Written next to `path` and renamed over it: `path` is a regular
    /// file or nothing, reached without a link.
    fn replacing(path: &Path, replace: Replace) -> Result<PendingOutput> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && !dir.is_dir()
        {
            bail!("cannot create {}: no directory {}", path.display(), dir.display());
        }
        if path.exists() {
            let kind = sniff(path);
            let refused = match replace {
                Replace::TracesOnly => (kind != Kind::Trace).then_some("it exists and is not a linetrace trace"),
                Replace::NotTracesOrPrograms => match kind {
                    Kind::Trace => Some("it is a linetrace trace"),
                    Kind::Elf => Some("it is an executable"),
                    Kind::Other => None,
                },
                Replace::Anything => None,
            };
            if let Some(why) = refused {
                bail!("refusing to overwrite {}: {why} (use --force to replace it)", path.display());
            }
        }
        let mut partial = path.as_os_str().to_owned();
        partial.push(".partial");
        Ok(PendingOutput { path: path.to_path_buf(), partial: PathBuf::from(partial) })
    }

    /// Whether the output is written in place (see the module's doc).
    fn is_direct(&self) -> bool {
        self.partial == self.path
    }

    /// Where to write until [`PendingOutput::commit`].
    pub fn partial(&self) -> &Path {
        &self.partial
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates the temporary file.
    pub fn create(&self) -> Result<File> {
        File::create(&self.partial).with_context(|| format!("cannot create {}", self.partial.display()))
    }

    /// Moves the finished file into place.
    pub fn commit(self) -> Result<()> {
        if self.is_direct() {
            return Ok(());
        }
        // The file it replaces goes first: renamed over an existing file,
        // ext4 (auto_da_alloc) writes the new one out before the rename
        // returns, ~10 ms of a 15 MB trace measured, to spare programs that
        // rewrite a config file a zero-length one after a power cut. A
        // trace does not need that; a reader may find no file for a moment,
        // still never a half-written one.
        if self.path.exists() {
            std::fs::remove_file(&self.path)
                .with_context(|| format!("cannot replace {} by {}", self.path.display(), self.partial.display()))?;
        }
        std::fs::rename(&self.partial, &self.path)
            .with_context(|| format!("cannot move {} to {}", self.partial.display(), self.path.display()))
    }

    /// Removes the temporary file (nothing worth keeping was written).
    pub fn abandon(self) {
        if self.is_direct() {
            return;
        }
        let _ = std::fs::remove_file(&self.partial);
    }
}

/// `stem.lntrace`, or `stem.1.lntrace`, `stem.2.lntrace`, ... : the first
/// that does not exist, so a default output never replaces an old trace.
pub fn numbered(default: &Path) -> PathBuf {
    if !default.exists() {
        return default.to_path_buf();
    }
    let stem = default.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let ext = default.extension().map(|e| e.to_string_lossy().into_owned()).unwrap_or_default();
    (1u32..)
        .map(|n| default.with_file_name(format!("{stem}.{n}.{ext}")))
        .find(|p| !p.exists())
        .unwrap_or_else(|| default.to_path_buf())
}

/// Whether two paths name the same existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Trace,
    Elf,
    Other,
}

/// What an existing file is, from its first bytes.
fn sniff(path: &Path) -> Kind {
    let mut head = [0u8; 8];
    let n = File::open(path).and_then(|mut f| f.read(&mut head)).unwrap_or(0);
    if n >= 8 && head == trace_rt::format::MAGIC {
        Kind::Trace
    } else if n >= 4 && head[..4] == *b"\x7fELF" {
        Kind::Elf
    } else {
        Kind::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory holding a trace (its magic alone), `t.lntrace`.
    fn dir_with_trace() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let trace = dir.path().join("t.lntrace");
        std::fs::write(&trace, trace_rt::format::MAGIC).expect("write");
        (dir, trace)
    }

    #[test]
    fn refuses_inputs_directories_and_foreign_files() {
        let (dir, trace) = dir_with_trace();
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "keep me").expect("write");
        assert!(PendingOutput::new(&trace, &[&trace], Replace::Anything).is_err(), "an input");
        assert!(PendingOutput::new(dir.path(), &[], Replace::Anything).is_err(), "a directory");
        assert!(PendingOutput::new(&text, &[], Replace::TracesOnly).is_err(), "not a trace");
        assert!(PendingOutput::new(&trace, &[], Replace::TracesOnly).is_ok(), "an old trace");
        assert!(PendingOutput::new(&trace, &[], Replace::NotTracesOrPrograms).is_err(), "render over a trace");
        assert!(PendingOutput::new(&text, &[], Replace::Anything).is_ok(), "--force");
        let p = PendingOutput::new(&dir.path().join("new.png"), &[], Replace::NotTracesOrPrograms).expect("new");
        assert_eq!(p.partial(), dir.path().join("new.png.partial"));
    }

    /// A socket is not a regular file: written in place (here the write
    /// itself would fail, as it should), neither refused as "not a trace"
    /// nor removed when the output is committed.
    #[test]
    fn what_is_not_a_regular_file_is_neither_refused_nor_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("listening");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
        let out = PendingOutput::new(&socket, &[], Replace::TracesOnly).expect("not refused");
        assert_eq!(out.partial(), socket, "written in place");
        out.commit().expect("commit");
        let kind = std::fs::symlink_metadata(&socket).expect("still there").file_type();
        assert!(std::os::unix::fs::FileTypeExt::is_socket(&kind), "still a socket");
        assert!(!dir.path().join("listening.partial").exists());
    }

    /// A link to a trace: the trace is what is checked and replaced.
    #[test]
    fn a_link_is_followed_to_the_file_it_names() {
        let (dir, trace) = dir_with_trace();
        let link = dir.path().join("latest.lntrace");
        std::os::unix::fs::symlink(&trace, &link).expect("symlink");
        assert!(PendingOutput::new(&link, &[], Replace::NotTracesOrPrograms).is_err(), "a trace behind the link");
        let out = PendingOutput::new(&link, &[], Replace::TracesOnly).expect("an old trace");
        let real = std::fs::canonicalize(&trace).expect("canonical");
        assert_eq!(out.partial(), real.with_file_name("t.lntrace.partial"));
        std::fs::write(out.partial(), "new").expect("write");
        out.commit().expect("commit");
        assert!(std::fs::symlink_metadata(&link).expect("link").file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&link).expect("read"), "new");
    }

    #[test]
    fn default_outputs_are_numbered() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path().join("trace.lntrace");
        assert_eq!(numbered(&d), d);
        std::fs::write(&d, "").expect("write");
        assert_eq!(numbered(&d), dir.path().join("trace.1.lntrace"));
        std::fs::write(dir.path().join("trace.1.lntrace"), "").expect("write");
        assert_eq!(numbered(&d), dir.path().join("trace.2.lntrace"));
    }
}

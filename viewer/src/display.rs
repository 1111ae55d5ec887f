//! Whether a window can be opened: the X display named by `DISPLAY`, asked
//! before winit is. This build opens windows through X11 only (Bevy's `x11`
//! feature), and winit panics inside bevy_winit's plugin when it cannot
//! open the display: an empty or stale `DISPLAY` (an ssh session without X
//! forwarding, a server that has gone) printed a backtrace instead of a
//! reason.
//!
//! The probe connects to the server's socket and says no only when that is
//! conclusive; a `DISPLAY` it cannot parse is left for winit to judge.

use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// Why no window can be opened (one wording, for the viewer's error and
/// for the CLI's notes when it draws offscreen instead).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DisplayProblem {
    /// `DISPLAY` is not set, or empty.
    #[error("no display (DISPLAY is not set, or empty)")]
    Unset,
    /// `DISPLAY` names a server that does not answer.
    #[error("cannot open the X display {display:?}: {why}")]
    Unreachable {
        /// The value of `DISPLAY`.
        display: String,
        /// What the probe found.
        why: String,
    },
}

/// Longest wait for a remote X server (ssh's X forwarding listens on
/// localhost, so a real one answers at once).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether the display in `DISPLAY` can be reached.
pub fn check_display() -> Result<(), DisplayProblem> {
    let display = std::env::var("DISPLAY").unwrap_or_default();
    if display.trim().is_empty() {
        return Err(DisplayProblem::Unset);
    }
    probe(&display).map_err(|why| DisplayProblem::Unreachable { display, why })
}

/// Connects to the X server `display` names (`[host]:number[.screen]`):
/// its Unix socket (the path, then Linux's abstract socket of that name)
/// for a local display, TCP port 6000 + number for a remote one.
fn probe(display: &str) -> Result<(), String> {
    let Some((host, rest)) = display.rsplit_once(':') else { return Ok(()) };
    let Some(number) = rest.split('.').next().and_then(|n| n.parse::<u16>().ok()) else { return Ok(()) };
    if host.is_empty() || host == "unix" {
        let path = format!("/tmp/.X11-unix/X{number}");
        if UnixStream::connect(&path).is_ok() || connect_abstract(&path) {
            return Ok(());
        }
        return Err(format!("no X server listens at {path}"));
    }
    let port = 6000u32 + u32::from(number);
    let Ok(port) = u16::try_from(port) else { return Ok(()) };
    let addresses = (host, port).to_socket_addrs().map_err(|e| format!("cannot resolve {host}: {e}"))?;
    for address in addresses {
        if TcpStream::connect_timeout(&address, CONNECT_TIMEOUT).is_ok() {
            return Ok(());
        }
    }
    Err(format!("no X server answers at {host}:{port}"))
}

/// Connects to Linux's abstract Unix socket `name` (where X servers also
/// listen, and the only place when /tmp is private to a sandbox).
fn connect_abstract(name: &str) -> bool {
    use std::os::linux::net::SocketAddrExt;
    std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
        .and_then(|address| UnixStream::connect_addr(&address))
        .is_ok()
}

/// What is missing for drawing with Vulkan, if anything: the loader
/// (`libvulkan.so.1`) or a driver's manifest (lavapipe's on a machine
/// without a GPU). Without them Bevy's renderer panics at start ("Unable
/// to find a GPU!"). A driver that is installed but fails is not seen here.
pub fn vulkan_missing() -> Option<&'static str> {
    let loaders = [
        "/usr/lib/x86_64-linux-gnu/libvulkan.so.1",
        "/lib/x86_64-linux-gnu/libvulkan.so.1",
        "/usr/lib/libvulkan.so.1",
        "/usr/lib64/libvulkan.so.1",
    ];
    if !loaders.iter().any(|p| std::path::Path::new(p).exists()) {
        return Some("no Vulkan loader (libvulkan.so.1)");
    }
    // The loader's variables name manifests (or, for VK_DRIVER_FILES,
    // directories of them) and replace its search when set.
    let named = ["VK_DRIVER_FILES", "VK_ICD_FILENAMES"].iter().find_map(std::env::var_os);
    let has_driver = match named {
        Some(list) => std::env::split_paths(&list).any(|p| p.exists()),
        None => ["/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d"]
            .iter()
            .any(|dir| std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some())),
    };
    (!has_driver).then_some("no Vulkan driver")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_display_without_a_server_is_unreachable() {
        let unused = (60_000..61_000)
            .find(|n| !std::path::Path::new(&format!("/tmp/.X11-unix/X{n}")).exists())
            .expect("a free display number");
        let why = probe(&format!(":{unused}")).expect_err("nothing listens there");
        assert!(why.contains(&format!("/tmp/.X11-unix/X{unused}")), "{why}");
        assert!(probe(&format!(":{unused}.0")).is_err(), "with a screen number");
        // TCP: a port nobody listens on (bound, then closed).
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        if let Some(number) = port.checked_sub(6000) {
            let why = probe(&format!("127.0.0.1:{number}")).expect_err("refused");
            assert!(why.contains(&format!("127.0.0.1:{port}")), "{why}");
        }
        // A listening socket stands in for a server: the probe only connects.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        if let Some(number) = port.checked_sub(6000) {
            assert_eq!(probe(&format!("127.0.0.1:{number}")), Ok(()));
        }
        // What the probe cannot parse is left to winit.
        assert_eq!(probe("no-colon-here"), Ok(()));
        assert_eq!(probe("host:x"), Ok(()));
    }
}

//! Process-wide settings: the TLS crypto provider and the open-file limit.
//!
//! A leaf: it depends on no other module of the crate.

/// Installs the process-wide TLS crypto provider (ring) that reqwest uses for https
/// upstreams. Safe to call more than once.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

static ORIGINAL_NOFILE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// Raises the open-file soft limit to the hard limit, so a busy server can hold many
/// connections. The old soft limit is remembered: commands get it back (`original_nofile`).
pub fn raise_fd_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let lim = getrlimit(Resource::Nofile);
    let Some(current) = lim.current else {
        return; // unlimited already
    };
    if lim.maximum.is_some_and(|max| max > current)
        && setrlimit(
            Resource::Nofile,
            Rlimit {
                current: lim.maximum,
                maximum: lim.maximum,
            },
        )
        .is_ok()
    {
        let _ = ORIGINAL_NOFILE.set(current);
    }
}

/// The open-file soft limit from before `raise_fd_limit`, if it was raised.
pub fn original_nofile() -> Option<u64> {
    ORIGINAL_NOFILE.get().copied()
}

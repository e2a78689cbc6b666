//! The integration suite: one binary, driving the real server over HTTP against the mock
//! upstream (and, where it matters, the real executables).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
mod support;

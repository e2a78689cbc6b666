//! Pure text transformations behind the edit tools (no I/O). All inputs and outputs use `\n`
//! line endings; `textfile` converts from and to the file's own conventions.

pub mod blocks;
pub mod lazy;
pub mod matching;
pub mod outline;
pub mod place;
pub mod render;
pub mod textfile;
pub mod udiff;

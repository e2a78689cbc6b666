//! The command language of the policy: a shell line split into the commands it runs
//! ([`parse`]), and the rules that judge each of them ([`rules`]).

pub mod parse;
pub mod rules;

pub use parse::{Part, ParseError, parse};
pub use rules::{Assessment, CommandPolicy, PartVerdict, UserRule, Verdict};

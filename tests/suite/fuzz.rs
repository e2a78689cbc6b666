//! No panics on any input: property tests of the parsers that read what a model, a client or
//! an upstream sends (the path resolver, the argument accessors, the command parser, the SSE
//! decoder, the text-tool-call parser and the chunk accumulator).
//!
//! Each runs a few thousand generated inputs from a fixed seed in `cargo test`. For a longer
//! run, raise the count and vary the seed (see BENCHMARKS.md, "Fuzzing"):
//!
//! ```sh
//! TOOLPILOT_FUZZ_CASES=200000 TOOLPILOT_FUZZ_SEED=$RANDOM cargo test --release --test all fuzz::
//! ```

use std::collections::HashSet;
use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::Value;

use toolpilot::tools::args::Args;
use toolpilot::upstream::accumulate::Accumulator;
use toolpilot::upstream::sse::{SseDecoder, SseEvent};
use toolpilot::upstream::textcalls::TextCalls;
use toolpilot::workspace::Workspace;

/// A runner with `cases` inputs (or `TOOLPILOT_FUZZ_CASES`), from a fixed seed (or
/// `TOOLPILOT_FUZZ_SEED`), that shrinks a failure to a small input before reporting it.
fn runner(cases: u32) -> TestRunner {
    let cases = std::env::var("TOOLPILOT_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    let seed: u64 = std::env::var("TOOLPILOT_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    )
}

#[track_caller]
fn check<S: Strategy>(cases: u32, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    if let Err(e) = runner(cases).run(&strategy, test) {
        panic!("{e}");
    }
}

/// Strings made of `pieces`, which are chosen to meet the parser's edge cases.
fn made_of(pieces: &'static [&'static str], max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(pieces), 0..max).prop_map(|v| v.concat())
}

/// Where to cut an input of `len` bytes into pieces (sorted, in range).
fn cuts(max: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..4096, 0..max)
}

fn split_at<'a>(input: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    points.sort_unstable();
    let mut out = Vec::new();
    let mut start = 0;
    for p in points {
        out.push(&input[start..p]);
        start = p;
    }
    out.push(&input[start..]);
    out
}

const PATH_PIECES: &[&str] = &[
    "．",
    "／",
    "＼",
    "/",
    "\\",
    ".",
    "..",
    "~",
    "~/",
    "file://",
    "FILE://",
    "file:",
    "fİle://",
    "localhost",
    "%2e",
    "%2F",
    "%00",
    "%",
    "%zz",
    "\0",
    " ",
    "\t",
    "\n",
    "a",
    "src",
    "é",
    "ı",
    "\u{200c}",
    "\u{feff}",
    "😀",
    ":",
    "::$DATA",
    "?",
    "#",
    "//",
    ".git",
    ".env",
    "SSH~1",
    "\u{301}",
];

#[test]
fn the_path_resolver_never_panics_and_never_leaves_the_root() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ws");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/a.rs"), "x").unwrap();
    let sensitive: Vec<String> = toolpilot::workspace::DEFAULT_SENSITIVE
        .iter()
        .map(|s| s.to_string())
        .collect();
    let ws = Workspace::open(&root, &sensitive).unwrap();
    let root_text = ws.root().display().to_string();
    let strategy = (made_of(PATH_PIECES, 24), any::<bool>(), any::<bool>()).prop_map(
        move |(tail, absolute, uri)| match (absolute, uri) {
            (true, true) => format!("file://{root_text}/{tail}"),
            (true, false) => format!("{root_text}/{tail}"),
            _ => tail,
        },
    );
    check(4000, strategy, |raw| {
        if let Ok(p) = ws.resolve(&raw) {
            let shown = p.display();
            prop_assert!(!p.rel().is_absolute(), "{raw:?} → {shown:?}");
            prop_assert!(
                p.rel()
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_))),
                "{raw:?} → {shown:?}"
            );
            let _ = ws.open_file(&p, &raw);
            let _ = ws.real_path(&p);
            let _ = ws.sensitive_match(&p, false);
            let _ = ws.special_kind(&p);
        }
        Ok(())
    });
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        made_of(&["a", "1", "-", ".", "e9", " ", "true", "é", "{", "\""], 6).prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(&["filepath", "n", "b", "x", "", "contents"][..]),
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
        ]
    })
}

const ARG_PIECES: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "\"",
    "\\\"",
    ":",
    ",",
    "null",
    "true",
    "1e400",
    "-0",
    "\"filepath\"",
    "\"a\"",
    " ",
    "\n",
    "é",
    "\\u00",
    "\\ud800",
    "{\"n\":\"12\"}",
];

#[test]
fn the_argument_accessors_never_panic() {
    let strategy = prop_oneof![
        json_value().prop_map(|v| v.to_string()),
        // Double-encoded, as some models send them.
        json_value().prop_map(|v| Value::String(v.to_string()).to_string()),
        made_of(ARG_PIECES, 16),
    ];
    check(3000, strategy, |raw| {
        if let Ok(args) = Args::parse(&raw) {
            for name in ["filepath", "n", "b", "x", "", "contents"] {
                let _ = args.get(name);
                let _ = args.string(name);
                let _ = args.opt_string(name);
                let _ = args.opt_bool(name);
                let _ = args.integer(name);
            }
            let canonical = args.canonical();
            prop_assert!(
                serde_json::from_str::<Value>(&canonical).is_ok(),
                "{canonical}"
            );
        }
        Ok(())
    });
}

const SHELL_PIECES: &[&str] = &[
    "ls",
    "rm",
    "x",
    " ",
    "\t",
    "'",
    "\"",
    "$",
    "$(",
    ")",
    "(",
    "{",
    "}",
    "${",
    "${x:-",
    "$'",
    "\\",
    "\\\n",
    "`",
    ";",
    "&",
    "&&",
    "|",
    "||",
    "|&",
    "<",
    ">",
    ">>",
    "<<",
    "<<-",
    "<<<",
    "EOF",
    "\nEOF\n",
    "\n",
    "\r",
    "#",
    "*",
    "?",
    "[",
    "]",
    "=",
    "X=",
    "~",
    "é",
    "😀",
    "-",
    "--",
    "2>&1",
    ":(){ :|:& };:",
    "$((",
    "))",
    "!",
    "if",
    "then",
    "fi",
    "for",
    "do",
    "done",
    "case",
    "esac",
    "sed",
    "-e",
    "s/a/b/w f",
    "awk",
    "'{print}'",
    "git",
    "-c",
    "find",
    "-exec",
    "\\;",
    "env",
    "timeout",
    "xargs",
    "sh",
    "-c",
    "\0",
];

#[test]
fn the_command_parser_never_panics() {
    let (_tmp, ws) = super::command_table::workspace();
    let policy = super::command_table::policy_for(&[]);
    let judge = toolpilot::policy::WorkspaceJudge::new(&ws, &policy);
    check(3000, made_of(SHELL_PIECES, 24), |line| {
        let _ = toolpilot::policy::command::parse(&line);
        let _ = toolpilot::policy::command::parse::fork_bomb(&line);
        let _ = policy.decide_command("run_terminal_command", &line, true, &judge);
        Ok(())
    });
}

const SSE_PIECES: &[&str] = &[
    "data:",
    "data: ",
    "event:",
    "event: error",
    "id: 1",
    "retry: 10",
    ":",
    ": ping",
    " ",
    "x",
    "{}",
    "[DONE]",
    "\n",
    "\r",
    "\r\n",
    "\n\n",
    "é",
    "\u{feff}",
    "data:{\"a\":1}",
];

fn decode(pieces: &[&[u8]]) -> Vec<SseEvent> {
    let mut d = SseDecoder::new();
    let mut out = Vec::new();
    for p in pieces {
        d.push(p);
        while let Some(ev) = d.next_event() {
            out.push(ev);
        }
    }
    while let Some(ev) = d.finish() {
        out.push(ev);
    }
    out
}

#[test]
fn the_sse_decoder_never_panics_and_any_split_gives_the_same_events() {
    let bytes = prop_oneof![
        made_of(SSE_PIECES, 24).prop_map(String::into_bytes),
        // Bytes that are not UTF-8 too.
        prop::collection::vec(
            prop::sample::select(
                &[b'd', b'a', b't', b':', b'\n', b'\r', b' ', 0xff, 0xc3, 0x80][..]
            ),
            0..64
        ),
    ];
    check(4000, (bytes, cuts(8)), |(input, cuts)| {
        let whole = decode(&[&input]);
        let split = decode(&split_at(&input, &cuts));
        prop_assert_eq!(whole, split);
        Ok(())
    });
}

const TEXT_PIECES: &[&str] = &[
    "<tool_call>",
    "</tool_call>",
    "<",
    "<tool",
    "_call>",
    "```",
    "```json\n",
    "```tool\n",
    "```\n",
    "TOOL_NAME: ls\n",
    "TOOL_NAME: read_file\n",
    "BEGIN_ARG: dirPath\n",
    "END_ARG\n",
    "{",
    "}",
    "\"name\"",
    ":",
    "\"ls\"",
    "\"read_file\"",
    "\"arguments\"",
    "{\"dirPath\":\"a\"}",
    ",",
    "\n",
    " ",
    "Sure, ",
    "é",
    "😀",
    "\"",
    "\\",
];

/// The text shown and the calls found (name, arguments) for `pieces` fed one by one.
fn text_calls(pieces: &[&[u8]]) -> (String, Vec<(String, String)>) {
    let names: HashSet<String> = ["ls", "read_file"].iter().map(|s| s.to_string()).collect();
    let mut t = TextCalls::new(Arc::new(names));
    let mut shown = String::new();
    for p in pieces {
        // Cut at byte offsets, a piece may end inside a character: feed whole characters only,
        // as the accumulator does (it receives text, never bytes).
        shown.push_str(&t.push(&String::from_utf8_lossy(p)));
    }
    shown.push_str(&t.finish());
    let calls = t
        .calls
        .iter()
        .map(|c| (c.name.clone(), c.arguments.clone()))
        .collect();
    (shown, calls)
}

/// Cuts that fall on character boundaries of `s`.
fn char_cuts(s: &str, cuts: &[usize]) -> Vec<usize> {
    cuts.iter()
        .map(|c| toolpilot::text::floor_char_boundary(s, c % (s.len() + 1)))
        .collect()
}

#[test]
fn the_text_tool_call_parser_never_panics_and_any_split_gives_the_same_answer() {
    check(3000, (made_of(TEXT_PIECES, 24), cuts(6)), |(text, cuts)| {
        let whole = text_calls(&[text.as_bytes()]);
        let split = text_calls(&split_at(text.as_bytes(), &char_cuts(&text, &cuts)));
        prop_assert_eq!(whole, split, "{:?}", text);
        Ok(())
    });
}

const CHUNK_PIECES: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "\"choices\":",
    "\"delta\":",
    "\"content\":",
    "\"tool_calls\":",
    "\"index\":",
    "\"id\":",
    "\"type\":",
    "\"function\":",
    "\"custom\":",
    "\"name\":",
    "\"arguments\":",
    "\"input\":",
    "\"finish_reason\":",
    "\"usage\":",
    "\"error\":",
    "\"x\"",
    "\"ls\"",
    "\"stop\"",
    "0",
    "1",
    "-1",
    "null",
    "true",
    ",",
    "\"message\":",
    "\"role\":",
    "\"reasoning_content\":",
    "[DONE]",
];

#[test]
fn the_chunk_accumulator_never_panics() {
    let names: Arc<HashSet<String>> = Arc::new(["ls".to_string()].into_iter().collect());
    let chunks = prop::collection::vec(
        (
            made_of(CHUNK_PIECES, 20),
            prop::option::of(prop::sample::select(&["error", "message", ""][..])),
        ),
        0..6,
    );
    check(3000, chunks, |chunks| {
        let mut acc = Accumulator::with_tool_names(Arc::clone(&names));
        let mut out = Vec::new();
        for (data, event) in &chunks {
            if acc.push_data(*event, data, &mut out).is_err() {
                return Ok(());
            }
        }
        acc.flush(&mut out);
        let _ = acc.finish();
        Ok(())
    });
}

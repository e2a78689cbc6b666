//! `read_file`, `read_file_range` and `read_currently_open_file`.
//!
//! Output is the file's text exactly as stored (no line numbers, no header), so the model can
//! copy it into an edit. What differs from Continue: nothing is cut silently. A file larger
//! than the output budget is cut at a line boundary with a note that names the next line to
//! read with `read_file_range`; binary files are described instead of dumped; invalid UTF-8
//! is decoded with replacement characters and the note says how many.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};

use serde_json::json;

use super::args::Args;
use super::{Invocation, Tool, ToolEnv, ToolError, blocking, path_targets};
use crate::bounded::{self, Rest};
use crate::policy::Access;
use crate::text::{SNIFF_BYTES, binary_kind, group};
use crate::workspace::{PathError, Workspace, WorkspacePath};

pub struct ReadFile;
pub struct ReadFileRange;
pub struct ReadCurrentlyOpenFile;

impl Tool for ReadFile {
    fn name(&self) -> &'static str {
        "read_file"
    }
    fn description(&self) -> &'static str {
        include_str!("descriptions/read_file.md")
    }
    fn parameters(&self) -> serde_json::Value {
        json!({"type":"object","required":["filepath"],"properties":{"filepath":{"type":"string",
            "description":"The path of the file to read, relative to the root of the workspace (absolute paths inside the workspace, ~/ and file:// also work)"}}})
    }
    fn read_only(&self) -> bool {
        true
    }
    fn prepare(&self, args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        let raw = args.string("filepath")?;
        let path = resolve(&env.workspace, &raw)?;
        let targets = path_targets(&env.workspace, &path, Access::Read);
        let env = env.clone();
        Ok(Invocation {
            targets,
            job: blocking(move || read_whole(&env, &path, &raw)),
        })
    }
}

impl Tool for ReadFileRange {
    fn name(&self) -> &'static str {
        "read_file_range"
    }
    fn description(&self) -> &'static str {
        include_str!("descriptions/read_file_range.md")
    }
    fn parameters(&self) -> serde_json::Value {
        json!({"type":"object","required":["filepath","startLine","endLine"],"properties":{
            "filepath":{"type":"string","description":"The path of the file, relative to the root of the workspace"},
            "startLine":{"type":"number","description":"First line to read, 1-based"},
            "endLine":{"type":"number","description":"Last line to read, 1-based, inclusive"}}})
    }
    fn read_only(&self) -> bool {
        true
    }
    fn prepare(&self, args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        let raw = args.string("filepath")?;
        let start = args.integer("startLine")?;
        let end = args.integer("endLine")?;
        if start < 1 {
            return Err(ToolError::InvalidArguments(format!(
                "startLine must be 1 or greater (got {start}); lines are numbered from 1"
            )));
        }
        if end < 1 {
            return Err(ToolError::InvalidArguments(format!(
                "endLine must be 1 or greater (got {end}); lines are numbered from 1"
            )));
        }
        if end < start {
            return Err(ToolError::InvalidArguments(format!(
                "endLine ({end}) must be greater than or equal to startLine ({start})"
            )));
        }
        let path = resolve(&env.workspace, &raw)?;
        let targets = path_targets(&env.workspace, &path, Access::Read);
        let env = env.clone();
        Ok(Invocation {
            targets,
            job: blocking(move || read_range(&env, &path, &raw, start as u64, end as u64)),
        })
    }
}

impl Tool for ReadCurrentlyOpenFile {
    fn name(&self) -> &'static str {
        "read_currently_open_file"
    }
    fn description(&self) -> &'static str {
        include_str!("descriptions/read_currently_open_file.md")
    }
    fn parameters(&self) -> serde_json::Value {
        json!({"type":"object","properties":{}})
    }
    fn read_only(&self) -> bool {
        true
    }
    fn prepare(&self, _args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        let Some(raw) = env.current_file.clone() else {
            return Ok(Invocation {
                targets: vec![],
                job: Box::pin(async {
                    Ok(
                        "There are no files currently open: the client did not say which file \
                        is open in its editor. (Clients send it as `toolpilot.current_file` in \
                        the request body or in the X-Toolpilot-Current-File header.) Ask the \
                        user which file they mean, or find it with file_glob_search."
                            .to_string(),
                    )
                }),
            });
        };
        let path = resolve(&env.workspace, &raw)?;
        let targets = path_targets(&env.workspace, &path, Access::Read);
        let env = env.clone();
        Ok(Invocation {
            targets,
            job: blocking(move || {
                let text = read_whole(&env, &path, &raw)?;
                Ok(format!(
                    "```{}\n{}\n```",
                    path.display(),
                    text.trim_end_matches('\n')
                ))
            }),
        })
    }
}

pub(crate) fn resolve(ws: &Workspace, raw: &str) -> Result<WorkspacePath, ToolError> {
    ws.resolve(raw)
        .map_err(|e| ToolError::Failed(e.to_string()))
}

fn open(env: &ToolEnv, path: &WorkspacePath, raw: &str) -> Result<File, ToolError> {
    env.workspace.open_file(path, raw).map_err(|e| match e {
        PathError::NotFound { .. } => ToolError::Failed(format!(
            "File \"{raw}\" does not exist. Check the path (it is relative to the workspace \
             root) or find the file with file_glob_search or ls."
        )),
        other => ToolError::Failed(other.to_string()),
    })
}

/// Reads a file for the model: whole if it fits the output budget, else the lines that fit.
fn read_whole(env: &ToolEnv, path: &WorkspacePath, raw: &str) -> Result<String, ToolError> {
    let file = open(env, path, raw)?;
    let meta = file
        .metadata()
        .map_err(|e| ToolError::Failed(format!("cannot read \"{raw}\": {e}")))?;
    env.saw(path, &meta);
    let size = meta.len();
    let budget = env.config.output_budget;
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let mut buf = Vec::with_capacity((size as usize).min(budget + 1));
    (&mut reader)
        .take(budget as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| ToolError::Failed(format!("cannot read \"{raw}\": {e}")))?;
    if let Some(kind) = binary_kind(&buf) {
        return Err(ToolError::Failed(format!(
            "\"{}\" is a binary file ({kind}, {} bytes); its contents cannot be shown as text.",
            path.display(),
            group(size)
        )));
    }
    if buf.is_empty() {
        return Ok(format!("[\"{}\" is empty: 0 bytes]", path.display()));
    }
    let complete = buf.len() <= budget;
    if complete {
        return Ok(decode(buf, path));
    }
    // Too big: keep whole lines up to the budget (less room for the note) and say where to
    // continue. Lines are counted over everything read, before the cut.
    let total_lines = count_lines(&mut reader, &buf);
    let limit = content_limit(budget, path);
    buf.truncate(limit);
    match buf.iter().rposition(|&b| b == b'\n') {
        Some(nl) => buf.truncate(nl + 1),
        None => trim_partial_utf8(&mut buf),
    }
    let shown_lines = buf.iter().filter(|&&b| b == b'\n').count() as u64;
    let shown_bytes = buf.len() as u64;
    let mut text = decode(buf, path);
    if !text.ends_with('\n') {
        text.push('\n');
    }
    let total = match total_lines {
        Some(n) => format!("{} lines, {} bytes", group(n), group(size)),
        None => format!("{} bytes", group(size)),
    };
    if shown_lines == 0 {
        text.push_str(&format!(
            "[file cut at the output budget: its first line alone is longer than {} bytes \
             (the file has {total}); showing the first {} bytes. Search it with grep_search \
             instead.]",
            group(limit as u64),
            group(shown_bytes),
        ));
        return Ok(text);
    }
    text.push_str(&format!(
        "[file cut at the output budget: showing lines 1-{shown_lines} ({} bytes) of {total}. \
         Read further with read_file_range {{\"filepath\": \"{}\", \"startLine\": {}, \"endLine\": {}}}, \
         or search it with grep_search.]",
        group(shown_bytes),
        path.display(),
        shown_lines + 1,
        shown_lines + 400,
    ));
    Ok(text)
}

/// How much of the output budget a cut file's text may use: the rest is kept for the notes
/// that say where it was cut and how to go on, so that the registry's own cut at the budget
/// never removes them.
fn content_limit(budget: usize, path: &WorkspacePath) -> usize {
    let room = (512 + 2 * path.display().len()).min(budget / 2);
    budget - room
}

/// Lines in the whole file, counting what is already read plus the rest of `reader`.
/// Gives up (None) on very large files to keep the call fast.
fn count_lines(reader: &mut BufReader<File>, seen: &[u8]) -> Option<u64> {
    const MAX_SCAN: u64 = 256 * 1024 * 1024;
    let mut n = seen.iter().filter(|&&b| b == b'\n').count() as u64;
    let mut scanned = 0u64;
    let mut last = seen.last().copied();
    loop {
        let chunk = reader.fill_buf().ok()?;
        if chunk.is_empty() {
            break;
        }
        n += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
        last = chunk.last().copied();
        let len = chunk.len();
        reader.consume(len);
        scanned += len as u64;
        if scanned > MAX_SCAN {
            return None;
        }
    }
    if last.is_some_and(|b| b != b'\n') {
        n += 1;
    }
    Some(n)
}

fn read_range(
    env: &ToolEnv,
    path: &WorkspacePath,
    raw: &str,
    start: u64,
    end: u64,
) -> Result<String, ToolError> {
    let file = open(env, path, raw)?;
    if let Ok(meta) = file.metadata() {
        env.saw(path, &meta);
    }
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let failed = |e: std::io::Error| ToolError::Failed(format!("cannot read \"{raw}\": {e}"));
    // The head of the file, before any line is read: a binary file has no lines to read.
    let head = reader.fill_buf().map_err(failed)?;
    if let Some(kind) = binary_kind(head.get(..SNIFF_BYTES).unwrap_or(head)) {
        return Err(ToolError::Failed(format!(
            "\"{}\" is a binary file ({kind}); it has no lines to read.",
            path.display()
        )));
    }
    let budget = content_limit(env.config.output_budget, path);
    let mut out: Vec<u8> = Vec::new();
    // One line at a time, never more than the budget of it in memory: the rest of a longer
    // line is read past, not kept (a file's first line can be gigabytes long).
    let mut line = Vec::new();
    let mut lineno = 0u64;
    let mut cut_at: Option<u64> = None;
    loop {
        if lineno + 1 < start {
            // Before the range: only counted.
            if reader.skip_until(b'\n').map_err(failed)? == 0 {
                break;
            }
            lineno += 1;
            continue;
        }
        // A line longer than the budget ends the read (shown cut if it is the first): the
        // rest of it is never read.
        let read =
            bounded::read_line(&mut reader, &mut line, budget + 1, Rest::Leave).map_err(failed)?;
        if read.len == 0 {
            break;
        }
        lineno += 1;
        if out.len() + line.len() > budget || read.cut {
            if out.is_empty() {
                // One line longer than the whole budget: show its head.
                line.truncate(budget);
                trim_partial_utf8(&mut line);
                let shown = line.len() as u64;
                out.append(&mut line);
                let mut text = decode(out, path);
                text.push_str(&format!(
                    "\n[line {lineno} is longer than the output budget; showing its first {} \
                     bytes. Search it with grep_search instead.]",
                    group(shown)
                ));
                return Ok(text);
            }
            cut_at = Some(lineno);
            break;
        }
        out.extend_from_slice(&line);
        if lineno >= end {
            break;
        }
    }
    if lineno < start {
        return Err(ToolError::Failed(format!(
            "startLine {start} is past the end of \"{}\", which has {lineno} lines",
            path.display()
        )));
    }
    let mut text = decode(out, path);
    if let Some(next) = cut_at {
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!(
            "[range cut at the output budget: showing lines {start}-{} of the {start}-{end} asked \
             for. Continue with startLine {next}.]",
            next - 1
        ));
    } else if lineno < end {
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!(
            "[end of file: \"{}\" has {lineno} lines]",
            path.display()
        ));
    }
    Ok(text)
}

/// Drops an incomplete UTF-8 sequence at the end of `buf` (left by cutting at a byte count).
fn trim_partial_utf8(buf: &mut Vec<u8>) {
    let tail = buf.len().saturating_sub(4);
    let Some((lead, &first)) = buf
        .iter()
        .enumerate()
        .skip(tail)
        .rev()
        .find(|(_, b)| **b & 0xC0 != 0x80)
    else {
        return;
    };
    let need = match first {
        b if b < 0x80 => 1,
        b if b >= 0xF0 => 4,
        b if b >= 0xE0 => 3,
        b if b >= 0xC0 => 2,
        _ => 1,
    };
    if buf.len() - lead < need {
        buf.truncate(lead);
    }
}

/// Decodes as UTF-8; invalid sequences become U+FFFD and a note says so.
fn decode(buf: Vec<u8>, path: &WorkspacePath) -> String {
    match String::from_utf8(buf) {
        Ok(s) => s,
        Err(e) => {
            let bytes = e.into_bytes();
            let text = String::from_utf8_lossy(&bytes);
            let bad = text.matches('\u{FFFD}').count();
            let mut s = text.into_owned();
            if !s.ends_with('\n') {
                s.push('\n');
            }
            s.push_str(&format!(
                "[\"{}\" is not valid UTF-8: {bad} invalid byte sequence(s) are shown as \u{FFFD}]",
                path.display()
            ));
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_a_cut_multibyte_character() {
        let mut b = "aé".as_bytes().to_vec();
        b.pop();
        trim_partial_utf8(&mut b);
        assert_eq!(b, b"a");
        let mut b = "a€".as_bytes().to_vec();
        trim_partial_utf8(&mut b);
        assert_eq!(b, "a€".as_bytes());
    }
}

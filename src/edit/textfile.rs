//! A text file's format, kept across an edit: line endings, BOM and final newline.
//!
//! Edits work on `\n`-only text; [`TextFile::decode`] strips the BOM and CRLFs and remembers
//! them, [`TextFile::encode`] puts them back, so an edit never changes a file's conventions.
//! Binary files and invalid UTF-8 are refused: rewriting them would corrupt them.

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// How a file spells its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Format {
    pub bom: bool,
    pub crlf: bool,
    pub final_newline: bool,
}

/// A decoded text file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextFile {
    /// The content with `\n` line endings and no BOM.
    pub text: String,
    pub format: Format,
}

impl TextFile {
    /// Decodes file bytes; `Err` explains why the file cannot be edited as text.
    pub fn decode(bytes: &[u8]) -> Result<TextFile, String> {
        if let Some(kind) = crate::text::binary_kind(bytes) {
            return Err(format!(
                "it is a binary file ({kind}); the edit tools only change text files"
            ));
        }
        let (bom, body) = match bytes.strip_prefix(BOM) {
            Some(rest) => (true, rest),
            None => (false, bytes),
        };
        let text = std::str::from_utf8(body).map_err(|e| {
            format!(
                "it is not valid UTF-8 (invalid bytes at offset {}); editing it as text could \
                 corrupt it",
                e.valid_up_to() + if bom { 3 } else { 0 }
            )
        })?;
        let crlf_count = text.matches("\r\n").count();
        let lf_count = text.matches('\n').count();
        // Mostly CRLF: keep CRLF. A file with a few stray CRLFs stays LF.
        let crlf = crlf_count > 0 && crlf_count * 2 >= lf_count;
        let final_newline = text.ends_with('\n');
        let text = if crlf {
            text.replace("\r\n", "\n")
        } else {
            text.to_string()
        };
        Ok(TextFile {
            text,
            format: Format {
                bom,
                crlf,
                final_newline,
            },
        })
    }

    /// Encodes `text` (LF endings) in this format. The final-newline state of the original
    /// is kept, unless the file was empty (then the new text decides).
    pub fn encode(format: Format, text: &str, was_empty: bool) -> Vec<u8> {
        let mut t = text.to_string();
        if !was_empty {
            if format.final_newline && !t.ends_with('\n') && !t.is_empty() {
                t.push('\n');
            } else if !format.final_newline {
                while t.ends_with('\n') {
                    t.pop();
                }
            }
        }
        let body = if format.crlf {
            t.replace('\n', "\r\n")
        } else {
            t
        };
        let mut out = Vec::with_capacity(body.len() + 3);
        if format.bom {
            out.extend_from_slice(BOM);
        }
        out.extend_from_slice(body.as_bytes());
        out
    }
}

/// Turns model-supplied text into LF form (models sometimes send CRLF).
pub fn normalize_input(s: &str) -> String {
    s.replace("\r\n", "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn round_trip(bytes: &[u8]) {
        let f = TextFile::decode(bytes).unwrap();
        assert!(!f.text.contains('\r') || !f.format.crlf);
        assert_eq!(TextFile::encode(f.format, &f.text, bytes.is_empty()), bytes);
    }

    #[test]
    fn formats_survive_a_round_trip() {
        round_trip(b"a\nb\n");
        round_trip(b"a\nb");
        round_trip(b"a\r\nb\r\n");
        round_trip(b"a\r\nb");
        round_trip(b"\xEF\xBB\xBFa\r\nb\r\n");
        round_trip(b"\xEF\xBB\xBFx");
        round_trip(b"");
        round_trip("é\n".as_bytes());
    }

    #[test]
    fn edits_keep_the_conventions() {
        let f = TextFile::decode(b"\xEF\xBB\xBFone\r\ntwo\r\n").unwrap();
        assert_eq!(f.text, "one\ntwo\n");
        assert_eq!(
            TextFile::encode(f.format, "one\n2\nthree", false),
            b"\xEF\xBB\xBFone\r\n2\r\nthree\r\n"
        );
        let f = TextFile::decode(b"no newline").unwrap();
        assert_eq!(TextFile::encode(f.format, "changed\n\n", false), b"changed");
        assert_eq!(TextFile::encode(Format::default(), "new\n", true), b"new\n");
    }

    #[test]
    fn refuses_binary_and_invalid_utf8() {
        assert!(
            TextFile::decode(b"\x89PNG\r\n")
                .unwrap_err()
                .contains("binary file (PNG image)")
        );
        assert!(
            TextFile::decode(b"ok\xff\xfe")
                .unwrap_err()
                .contains("not valid UTF-8")
        );
    }
}

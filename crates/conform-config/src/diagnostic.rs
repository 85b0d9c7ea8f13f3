//! Configuration problems that name the file, the line and the field.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

// The allowlist reader places its parse errors as every other file's are placed.
pub use conform_allowlist::position::{json_error_at, json_error_message, line_column};

/// One problem in one configuration file.
///
/// Printed as `file:line:column: field: message`, the form editors and CI annotate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file the problem is in.
    pub file: PathBuf,
    /// Its line, from 1, when known.
    pub line: Option<usize>,
    /// Its column, from 1, when known.
    pub column: Option<usize>,
    /// The field path inside the file, such as `limits.concurrency` or `vars.currency`.
    pub field: Option<String>,
    /// What is wrong, and what would be right.
    pub message: String,
}

impl Diagnostic {
    /// A problem in `file`, not yet placed at a line.
    pub fn new(file: &Path, message: impl Into<String>) -> Self {
        Diagnostic {
            file: file.to_path_buf(),
            line: None,
            column: None,
            field: None,
            message: message.into(),
        }
    }

    /// This problem, naming the field it is about.
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// Places the diagnostic at a byte span of `source`.
    pub fn at_span(mut self, source: &str, span: Option<Range<usize>>) -> Self {
        if let Some(span) = span {
            let (line, column) = line_column(source, span.start);
            self.line = Some(line);
            self.column = Some(column);
        }
        self
    }

    /// This problem, placed at `line` and `column`.
    pub fn at_line(mut self, line: usize, column: usize) -> Self {
        self.line = Some(line);
        self.column = Some(column);
        self
    }

    /// Places the diagnostic where the JSON pointer `pointer` leads in `source` (a JSON
    /// text), and names the pointer as the field.
    pub fn at_pointer(self, source: &str, pointer: &str) -> Self {
        let field = if pointer.is_empty() { "/" } else { pointer };
        let d = self.field(field);
        match super::json_position::pointer_offset(source, pointer) {
            Some(offset) => d.at_span(source, Some(offset..offset)),
            None => d,
        }
    }

    /// Places the diagnostic at the first occurrence of `needle` in `source`, if any.
    pub fn near(self, source: &str, needle: &str) -> Self {
        match source.find(needle) {
            Some(start) => self.at_span(source, Some(start..start + needle.len())),
            None => self,
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        f.write_str(": ")?;
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        f.write_str(&self.message)
    }
}

/// Every problem found, not only the first: a user fixes them in one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq, thiserror::Error)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    /// One more problem.
    pub fn push(&mut self, d: Diagnostic) {
        self.0.push(d);
    }

    /// No problem was found.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many problems were found.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Each problem, in the order found.
    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter()
    }

    /// The problems `other` found, after these.
    pub fn extend(&mut self, other: Diagnostics) {
        self.0.extend(other.0);
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

/// Turns a TOML error into a diagnostic, keeping the field name that serde reported.
pub fn from_toml(file: &Path, source: &str, err: &toml::de::Error) -> Diagnostic {
    let message = err.message().trim().to_string();
    let field = backticked_after(&message, "unknown field `")
        .or_else(|| backticked_after(&message, "missing field `"));
    let d = Diagnostic::new(file, message.clone()).at_span(source, err.span());
    match field {
        Some(field) => d.field(field),
        None => d,
    }
}

fn backticked_after(message: &str, prefix: &str) -> Option<String> {
    let rest = &message[message.find(prefix)? + prefix.len()..];
    Some(rest[..rest.find('`')?].to_string())
}

/// Turns a JSON error in `source` (the text of `file`) into a diagnostic at its line and
/// column.
pub fn from_json(file: &Path, source: &str, err: &serde_json::Error) -> Diagnostic {
    let (line, column) = json_error_at(source.as_bytes(), err);
    Diagnostic::new(file, json_error_message(err)).at_line(line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_column_counts_from_one() {
        let src = "a = 1\nbb = 2\n";
        assert_eq!(line_column(src, 0), (1, 1));
        assert_eq!(line_column(src, 6), (2, 1));
        assert_eq!(line_column(src, 9), (2, 4));
    }

    fn json_error(source: &str) -> Diagnostic {
        let err = serde_json::from_str::<serde_json::Value>(source).unwrap_err();
        from_json(Path::new("x.json"), source, &err)
    }

    #[test]
    fn truncated_json_is_placed_where_the_text_stops_never_at_column_0() {
        let d = json_error("{\n  \"a\": 1,\n  \"b\": [1, 2\n");
        assert_eq!((d.line, d.column), (Some(3), Some(13)));
        assert!(d.message.contains("EOF while parsing"), "{}", d.message);
        assert!(d.message.contains("cut off"), "{}", d.message);
        assert!(!d.message.contains("column"), "{}", d.message);
        let d = json_error("{\n  \"a\": 1,\n");
        assert_eq!((d.line, d.column), (Some(2), Some(10)));
        let d = json_error("");
        assert_eq!((d.line, d.column), (Some(1), Some(1)));
        // Not truncated: serde_json's own position.
        let d = json_error("{\n  \"a\": tru }");
        assert_eq!((d.line, d.column), (Some(2), Some(11)));
        assert!(!d.message.contains("cut off"), "{}", d.message);
    }

    #[test]
    fn display_names_file_line_field() {
        let d = Diagnostic::new(Path::new("providers/x.toml"), "unknown field `modle`")
            .at_line(3, 1)
            .field("modle");
        assert_eq!(
            d.to_string(),
            "providers/x.toml:3:1: modle: unknown field `modle`"
        );
    }
}

//! Where in a text an error is: 1-based lines and columns, as people count them.

/// 1-based line and column (in characters) of a byte offset.
pub fn line_column(source: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(source.len());
    let before = source.get(..offset).unwrap_or(source);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    (line, column)
}

/// 1-based line and column of a JSON error. serde_json says column 0 when the text ends
/// right after a line break; a text that ends too early (a truncated file) is placed
/// where its last character stops, which is where it was cut.
pub fn json_error_at(source: &[u8], err: &serde_json::Error) -> (usize, usize) {
    if err.classify() == serde_json::error::Category::Eof || err.column() == 0 {
        let text = String::from_utf8_lossy(source);
        return line_column(&text, text.trim_end().len());
    }
    (err.line(), err.column())
}

/// serde_json's message without its ` at line L column C`, which is often wrong at the
/// end of a file (see [`json_error_at`]); a truncated text says so.
pub fn json_error_message(err: &serde_json::Error) -> String {
    let message = err.to_string();
    let message = match message.rfind(" at line ") {
        Some(i) => &message[..i],
        None => &message,
    };
    if err.classify() == serde_json::error::Category::Eof {
        format!("{message}: the JSON ends early (is the file cut off?)")
    } else {
        message.to_string()
    }
}

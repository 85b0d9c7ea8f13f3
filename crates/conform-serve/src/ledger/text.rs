//! JSON text in one allocation of exactly its size.
//!
//! `serde_json::to_string` grows its buffer by doubling, so a 2 MB input ends in a 4 MB
//! allocation that lives as long as the text: the input stored for a job and the body
//! sent to its provider are both held while the database or the provider works.

use std::io;

use serde_json::Value;

/// Counts what is written.
struct Length(usize);

impl io::Write for Length {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `value` as compact JSON (what `value.to_string()` gives), in an allocation of its
/// exact length: measured first, then written.
pub fn json_text(value: &Value) -> String {
    let mut length = Length(0);
    // Writing a `Value` to memory cannot fail: its keys are strings, its numbers finite.
    let _ = serde_json::to_writer(&mut length, value);
    let mut text = Vec::with_capacity(length.0);
    let _ = serde_json::to_writer(&mut text, value);
    // serde_json writes UTF-8 only.
    String::from_utf8(text).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn same_text_exact_capacity() {
        let value =
            json!({"messages": [{"role": "user", "content": "é\n\"x\"".repeat(10_000)}], "t": 1.5});
        let text = json_text(&value);
        assert_eq!(text, value.to_string());
        assert_eq!(text.capacity(), text.len());
    }
}

//! Where a JSON pointer's target sits in the text it was parsed from.
//!
//! serde_json keeps no positions, so a problem found in a parsed value (a schema keyword
//! the meta-schema rejects) is placed by scanning the source again along the pointer.

use super::diagnostic::line_column;

/// 1-based line and column of what `pointer` (RFC 6901) names in `source`: the member's
/// key for an object member, which is where the offending keyword is written; the first
/// character of the element for an array element; the document's first character for
/// the empty pointer. `None` when the text is not JSON or holds no such place.
///
/// A key that occurs twice in one object is found at its last occurrence, the one whose
/// value serde_json keeps.
pub fn pointer_position(source: &str, pointer: &str) -> Option<(usize, usize)> {
    pointer_offset(source, pointer).map(|offset| line_column(source, offset))
}

/// The byte offset behind [`pointer_position`].
pub fn pointer_offset(source: &str, pointer: &str) -> Option<usize> {
    let tokens = parse_pointer(pointer)?;
    let mut scan = Scan {
        text: source,
        at: 0,
    };
    scan.space();
    if tokens.is_empty() {
        return (scan.at < source.len()).then_some(scan.at);
    }
    scan.find(&tokens)
}

/// The reference tokens of a pointer, unescaped (`~1` is `/`, `~0` is `~`).
fn parse_pointer(pointer: &str) -> Option<Vec<String>> {
    if pointer.is_empty() {
        return Some(Vec::new());
    }
    let rest = pointer.strip_prefix('/')?;
    Some(
        rest.split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect(),
    )
}

struct Scan<'a> {
    text: &'a str,
    at: usize,
}

impl Scan<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// Consumes `byte` after optional whitespace.
    fn eat(&mut self, byte: u8) -> Option<()> {
        self.space();
        (self.peek() == Some(byte)).then(|| self.at += 1)
    }

    /// A string token, decoded.
    fn string(&mut self) -> Option<String> {
        self.space();
        let start = self.at;
        if self.peek() != Some(b'"') {
            return None;
        }
        self.at += 1;
        loop {
            match self.peek()? {
                b'"' => break,
                b'\\' => self.at += 2,
                _ => self.at += 1,
            }
        }
        self.at += 1;
        serde_json::from_str(self.text.get(start..self.at)?).ok()
    }

    fn skip_value(&mut self) -> Option<()> {
        self.space();
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => {
                self.at += 1;
                if self.eat(b'}').is_some() {
                    return Some(());
                }
                loop {
                    self.string()?;
                    self.eat(b':')?;
                    self.skip_value()?;
                    if self.eat(b',').is_none() {
                        return self.eat(b'}');
                    }
                }
            }
            b'[' => {
                self.at += 1;
                if self.eat(b']').is_some() {
                    return Some(());
                }
                loop {
                    self.skip_value()?;
                    if self.eat(b',').is_none() {
                        return self.eat(b']');
                    }
                }
            }
            _ => {
                let start = self.at;
                while self.peek().is_some_and(|b| {
                    !matches!(b, b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r')
                }) {
                    self.at += 1;
                }
                (self.at > start).then_some(())
            }
        }
    }

    /// Walks from the value at the cursor along `tokens` (at least one).
    fn find(&mut self, tokens: &[String]) -> Option<usize> {
        let (first, rest) = tokens.split_first()?;
        self.space();
        match self.peek()? {
            b'{' => {
                self.at += 1;
                if self.eat(b'}').is_some() {
                    return None;
                }
                // (key offset, value offset) of the last member with this name.
                let mut found = None;
                loop {
                    self.space();
                    let key_at = self.at;
                    let key = self.string()?;
                    self.eat(b':')?;
                    self.space();
                    if key == *first {
                        found = Some((key_at, self.at));
                    }
                    self.skip_value()?;
                    if self.eat(b',').is_none() {
                        self.eat(b'}')?;
                        break;
                    }
                }
                let (key_at, value_at) = found?;
                if rest.is_empty() {
                    return Some(key_at);
                }
                self.at = value_at;
                self.find(rest)
            }
            b'[' => {
                let index: usize = first.parse().ok()?;
                self.at += 1;
                if self.eat(b']').is_some() {
                    return None;
                }
                for _ in 0..index {
                    self.skip_value()?;
                    self.eat(b',')?;
                }
                self.space();
                if rest.is_empty() {
                    return Some(self.at);
                }
                self.find(rest)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "a/b": {"type": "strnig"},
    "tags": {
      "type": "array",
      "items": [ {"minLength": 1}, { "minLength": -1 } ]
    },
    "esc\"aped": 1
  },
  "required": ["a/b"],
  "type": "array"
}"#;

    #[test]
    fn a_pointer_lands_on_the_key_of_its_member() {
        assert_eq!(pointer_position(SCHEMA, ""), Some((1, 1)));
        assert_eq!(pointer_position(SCHEMA, "/properties"), Some((3, 3)));
        assert_eq!(pointer_position(SCHEMA, "/properties/a~1b"), Some((4, 5)));
        assert_eq!(
            pointer_position(SCHEMA, "/properties/a~1b/type"),
            Some((4, 13))
        );
        assert_eq!(
            pointer_position(SCHEMA, "/properties/tags/items/1/minLength"),
            Some((7, 38))
        );
        assert_eq!(
            pointer_position(SCHEMA, "/properties/tags/items/0"),
            Some((7, 18))
        );
        assert_eq!(
            pointer_position(SCHEMA, "/properties/esc\"aped"),
            Some((9, 5))
        );
        assert_eq!(pointer_position(SCHEMA, "/required/0"), Some((11, 16)));
    }

    #[test]
    fn a_repeated_key_is_found_where_serde_keeps_it() {
        assert_eq!(pointer_position(SCHEMA, "/type"), Some((12, 3)));
    }

    #[test]
    fn no_such_place_is_none_not_a_guess() {
        assert_eq!(pointer_position(SCHEMA, "/nope"), None);
        assert_eq!(pointer_position(SCHEMA, "/required/5"), None);
        assert_eq!(pointer_position(SCHEMA, "/type/x"), None);
        assert_eq!(pointer_position(SCHEMA, "type"), None);
        assert_eq!(pointer_position("{\"a\": ", "/a/b"), None);
        assert_eq!(pointer_position("", ""), None);
    }

    #[test]
    fn columns_count_characters_not_bytes() {
        assert_eq!(
            pointer_position("{\"€uro\": 1, \"x\": 2}", "/x"),
            Some((1, 13))
        );
    }
}

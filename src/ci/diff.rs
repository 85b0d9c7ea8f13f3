//! A line diff (longest common subsequence) of two small texts, such as the gateway
//! configs before and after an allowlist update. Quadratic: meant for configs of
//! hundreds of lines, not for logs.

/// Every line of `after`, and every line of `before` it dropped, in order: `+ ` added,
/// `- ` removed, `  ` kept.
pub fn lines(before: &str, after: &str) -> Vec<String> {
    let a: Vec<&str> = before.lines().collect();
    let b: Vec<&str> = after.lines().collect();
    // lcs[i][j]: the common subsequence length of a[i..] and b[j..].
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    while i < a.len() && j < b.len() {
        if a[i] == b[j] {
            out.push(format!("  {}", a[i]));
            i += 1;
            j += 1;
        } else if lcs[i + 1][j] >= lcs[i][j + 1] {
            out.push(format!("- {}", a[i]));
            i += 1;
        } else {
            out.push(format!("+ {}", b[j]));
            j += 1;
        }
    }
    out.extend(a[i..].iter().map(|l| format!("- {l}")));
    out.extend(b[j..].iter().map(|l| format!("+ {l}")));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_common_lines_and_marks_the_rest() {
        assert_eq!(
            lines("a\nb\nc\n", "a\nc\nd\n"),
            ["  a", "- b", "  c", "+ d"]
        );
        assert_eq!(lines("", "x"), ["+ x"]);
        assert_eq!(lines("x", ""), ["- x"]);
        assert!(lines("same\n", "same\n").iter().all(|l| l.starts_with(' ')));
    }
}

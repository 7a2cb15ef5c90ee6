//! Words for the lines people read: one place, so `import` and `analyze` agree.

/// "1 trace", "3 traces": a count with its noun, plural unless the count is one.
pub fn count(n: impl std::fmt::Display, noun: &str) -> String {
    let n = n.to_string();
    let plural = if n == "1" { "" } else { "s" };
    format!("{n} {noun}{plural}")
}

/// "is" for one, "are" for any other count, to agree with [`count`].
pub fn is_are(n: impl std::fmt::Display) -> &'static str {
    if n.to_string() == "1" {
        "is"
    } else {
        "are"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(count(1usize, "trace"), "1 trace");
        assert_eq!(count(0i64, "host"), "0 hosts");
        assert_eq!(count(12u64, "file"), "12 files");
        assert_eq!(is_are(1), "is");
        assert_eq!(is_are(0), "are");
        assert_eq!(is_are(2), "are");
    }
}

//! What a recording attached and what it could not, with the reason: each hook is attached on
//! its own, so a kernel that lacks one loses only what that hook provides, and says so.

/// What got attached, and what did not with the reason.
#[derive(Debug, Default)]
pub struct Hooks {
    pub attached: Vec<String>,
    pub missing: Vec<(String, String)>,
}

impl Hooks {
    pub fn attached_list(&self) -> String {
        self.attached.join(",")
    }
    pub fn missing_list(&self) -> String {
        self.missing
            .iter()
            .map(|(h, why)| format!("{h}: {why}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Error text for one hook: the verifier log can be thousands of lines, so keep the cause and
/// the verifier's last words.
pub fn short_error(e: &anyhow::Error) -> String {
    let text = format!("{e:#}");
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= 4 {
        return lines.join(" ");
    }
    // the verifier's reason comes just before its statistics (verification time, stack
    // depth, instructions processed)
    let mut tail: Vec<&str> = lines
        .iter()
        .rev()
        .filter(|l| !l.trim().is_empty())
        .take(7)
        .copied()
        .collect();
    tail.reverse();
    format!("{} ... {}", lines[0], tail.join(" | "))
}

//! `scaletrace agent --config FILE`: a TOML file whose keys are the long flag names (with `-`
//! or `_`), turned into arguments placed before the command line's, so the command line wins
//! for single-valued flags and adds to repeatable ones. clap then validates everything once.
use std::path::Path;

use anyhow::{bail, Context as _, Result};

/// The arguments a config file stands for, e.g. `rotate_interval = "5m"` -> `--rotate-interval 5m`.
pub fn to_args(path: &Path, known: &[String]) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config {}", path.display()))?;
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        anyhow::anyhow!("config {}: {}", path.display(), e.message())
    })?;
    let mut args = Vec::new();
    for (key, value) in table {
        let flag = key.replace('_', "-");
        if flag == "config" || !known.contains(&flag) {
            bail!("config {}: unknown key `{key}`", path.display());
        }
        let values = match value {
            toml::Value::Array(items) => items,
            other => vec![other],
        };
        for v in values {
            match v {
                toml::Value::Boolean(true) => args.push(format!("--{flag}")),
                toml::Value::Boolean(false) => {}
                toml::Value::String(s) => args.extend([format!("--{flag}"), s]),
                toml::Value::Integer(i) => args.extend([format!("--{flag}"), i.to_string()]),
                toml::Value::Float(f) => args.extend([format!("--{flag}"), f.to_string()]),
                other => bail!(
                    "config {}: `{key}` must be a string, number, boolean or a list of them, not {}",
                    path.display(),
                    other.type_str()
                ),
            }
        }
    }
    Ok(args)
}

/// The command line with `--config FILE` of subcommand `sub` expanded in place.
pub fn expand(argv: Vec<String>, sub: &str, known: &[String]) -> Result<Vec<String>> {
    // Only as the subcommand itself (argv[1]), not as some flag's value.
    let sub_at = 1;
    if argv.get(sub_at).map(String::as_str) != Some(sub) {
        return Ok(argv);
    }
    let mut config = None;
    let mut rest = Vec::new();
    let mut it = argv[sub_at + 1..].iter();
    while let Some(a) = it.next() {
        if a == "--config" {
            config = Some(it.next().context("--config needs a file")?.clone());
        } else if let Some(v) = a.strip_prefix("--config=") {
            config = Some(v.to_string());
        } else {
            rest.push(a.clone());
        }
    }
    let Some(config) = config else {
        return Ok(argv);
    };
    let mut out = argv[..=sub_at].to_vec();
    out.extend(to_args(Path::new(&config), known)?);
    out.extend(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> Vec<String> {
        [
            "out",
            "rotate-interval",
            "port",
            "no-gpu",
            "nccl-lib",
            "upload",
        ]
        .map(String::from)
        .to_vec()
    }

    #[test]
    fn toml_becomes_flags_before_the_command_line() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.toml");
        std::fs::write(
            &f,
            "out = \"/spool\"\nrotate_interval = \"5m\"\nno-gpu = true\nnccl_lib = [\"/a.so\", \"/b.so\"]\nport = 29500\n",
        )
        .unwrap();
        let argv: Vec<String> = [
            "st",
            "agent",
            "--config",
            f.to_str().unwrap(),
            "--port",
            "1",
        ]
        .map(String::from)
        .to_vec();
        let got = expand(argv, "agent", &known()).unwrap();
        assert_eq!(
            got,
            [
                "st",
                "agent",
                "--nccl-lib",
                "/a.so",
                "--nccl-lib",
                "/b.so",
                "--no-gpu",
                "--out",
                "/spool",
                "--port",
                "29500",
                "--rotate-interval",
                "5m",
                "--port",
                "1"
            ]
        );
    }

    #[test]
    fn unknown_keys_and_bad_toml_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.toml");
        std::fs::write(&f, "rotate_intervl = \"5m\"\n").unwrap();
        let e = to_args(&f, &known()).unwrap_err();
        assert!(
            e.to_string().contains("unknown key `rotate_intervl`"),
            "{e}"
        );
        std::fs::write(&f, "out = \n").unwrap();
        assert!(to_args(&f, &known())
            .unwrap_err()
            .to_string()
            .starts_with("config "));
        std::fs::write(&f, "[s3]\nx = 1\n").unwrap();
        assert!(to_args(&f, &known()).is_err());
        let argv: Vec<String> = ["st", "record", "--out", "x"].map(String::from).to_vec();
        assert_eq!(expand(argv.clone(), "agent", &known()).unwrap(), argv);
    }
}

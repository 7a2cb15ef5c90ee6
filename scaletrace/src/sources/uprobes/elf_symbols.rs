//! Resolving an exported function to its file offset for a uprobe, choosing the default version
//! of a versioned symbol. libibverbs exports `ibv_create_qp@IBVERBS_1.0` (an old ABI kept for
//! compatibility) beside `ibv_create_qp@@IBVERBS_1.1`, which is what programs call; a probe on
//! the first name match would watch the wrong function.
use std::path::Path;

use anyhow::{bail, Context as _, Result};
use object::{
    read::elf::ElfFile64, Endianness, Object as _, ObjectSection as _, ObjectSymbol as _,
};

pub fn function_offset(path: &Path, name: &str) -> Result<u64> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let elf = ElfFile64::<Endianness>::parse(&*data)
        .with_context(|| format!("{} is not a 64-bit ELF object", path.display()))?;
    let endian = elf.endian();
    let versions = elf
        .elf_section_table()
        .versions(endian, elf.data())
        .ok()
        .flatten();
    let mut fallback = None;
    for sym in elf.dynamic_symbols().chain(elf.symbols()) {
        if sym.name() != Ok(name) || sym.address() == 0 {
            continue;
        }
        let hidden = versions
            .as_ref()
            .is_some_and(|v| v.version_index(endian, sym.index()).is_hidden());
        let Some(section) = sym
            .section_index()
            .and_then(|i| elf.section_by_index(i).ok())
        else {
            continue;
        };
        let Some((file_offset, _)) = section.file_range() else {
            continue;
        };
        let offset = sym.address() - section.address() + file_offset;
        if !hidden {
            return Ok(offset);
        }
        fallback.get_or_insert(offset);
    }
    match fallback {
        Some(offset) => Ok(offset),
        None => bail!("symbol {name} not found in {}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIBIBVERBS: &str = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1";

    /// The address `nm -D` shows for the default (`@@`) version of a symbol.
    fn nm_default(lib: &str, name: &str) -> Option<u64> {
        let out = std::process::Command::new("nm")
            .args(["-D", "--defined-only", lib])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
            let mut parts = l.split_whitespace();
            let (addr, _, sym) = (parts.next()?, parts.next()?, parts.next()?);
            (sym == format!("{name}@@IBVERBS_1.1")).then(|| u64::from_str_radix(addr, 16).ok())?
        })
    }

    #[test]
    fn picks_the_default_version_of_a_versioned_symbol() {
        if !Path::new(LIBIBVERBS).exists() {
            eprintln!("skipped: {LIBIBVERBS} not installed (cargo xtask setup installs it)");
            return;
        }
        for name in ["ibv_create_qp", "ibv_modify_qp", "ibv_reg_mr"] {
            let expected = nm_default(LIBIBVERBS, name).expect("nm shows the default version");
            // In this library .text is mapped at its file offset.
            assert_eq!(
                function_offset(Path::new(LIBIBVERBS), name).unwrap(),
                expected,
                "{name}"
            );
        }
    }

    #[test]
    fn missing_symbol_and_non_elf_are_errors() {
        let exe = std::env::current_exe().unwrap();
        assert!(function_offset(&exe, "no_such_symbol_xyz")
            .unwrap_err()
            .to_string()
            .contains("not found"));
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.so");
        std::fs::write(&junk, b"not elf").unwrap();
        assert!(function_offset(&junk, "x")
            .unwrap_err()
            .to_string()
            .contains("not a 64-bit ELF"));
    }
}

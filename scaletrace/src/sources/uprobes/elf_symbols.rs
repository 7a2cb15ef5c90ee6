//! Resolving an exported function to its file offset for a uprobe, choosing the default version
//! of a versioned symbol. libibverbs exports `ibv_create_qp@IBVERBS_1.0` (an old ABI kept for
//! compatibility) beside `ibv_create_qp@@IBVERBS_1.1`, which is what programs call; a probe on
//! the first name match would watch the wrong function.
use std::path::Path;

use anyhow::{bail, Context as _, Result};
use object::{
    read::elf::ElfFile64, Endianness, Object as _, ObjectSection as _, ObjectSymbol as _,
};

/// The functions a library exports, read once: what a family looks up in it, function by
/// function, without reading the file again for each.
pub struct FunctionTable {
    data: Vec<u8>,
}

impl FunctionTable {
    /// Reads `path`; an error when it cannot be read or is not a 64-bit ELF object.
    pub fn read(path: &Path) -> Result<FunctionTable> {
        if path.is_dir() {
            bail!("{} is a directory", path.display());
        }
        let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        ElfFile64::<Endianness>::parse(&*data)
            .with_context(|| format!("{} is not a 64-bit ELF object", path.display()))?;
        Ok(FunctionTable { data })
    }

    /// The file offset of function `name` (its default version), if the library has it.
    pub fn offset(&self, name: &str) -> Option<u64> {
        // (parsed in `read`: it cannot fail here)
        let elf = ElfFile64::<Endianness>::parse(&*self.data).ok()?;
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
                return Some(offset);
            }
            fallback.get_or_insert(offset);
        }
        fallback
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function_offset(path: &Path, name: &str) -> Result<u64> {
        FunctionTable::read(path)?
            .offset(name)
            .with_context(|| format!("symbol {name} not found in {}", path.display()))
    }

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
        assert!(FunctionTable::read(dir.path())
            .err()
            .unwrap()
            .to_string()
            .contains("is a directory"));
    }
}

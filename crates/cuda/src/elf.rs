//! Reads the names of the kernel functions a cubin exports: the global
//! `FUNC` symbols of its ELF64 symbol table. The artifact gate trusts this,
//! not the manifest's own list.

/// Global function symbols of an ELF64 little-endian image.
pub fn function_symbols(image: &[u8]) -> Result<Vec<String>, String> {
    if image.len() < 64 || &image[..4] != b"\x7fELF" {
        return Err("not an ELF image".into());
    }
    if image[4] != 2 || image[5] != 1 {
        return Err("not a 64-bit little-endian ELF image".into());
    }
    let shoff = u64_at(image, 0x28)? as usize;
    let shentsize = u16_at(image, 0x3a)? as usize;
    let shnum = u16_at(image, 0x3c)? as usize;
    if shentsize < 64 {
        return Err(format!("section header size {shentsize} < 64"));
    }
    let section = |i: usize| -> Result<(u32, usize, usize, u32, usize), String> {
        let base = shoff + i * shentsize;
        Ok((
            u32_at(image, base + 4)?,             // sh_type
            u64_at(image, base + 0x18)? as usize, // sh_offset
            u64_at(image, base + 0x20)? as usize, // sh_size
            u32_at(image, base + 0x28)?,          // sh_link
            u64_at(image, base + 0x38)? as usize, // sh_entsize
        ))
    };
    const SHT_SYMTAB: u32 = 2;
    const STT_FUNC: u8 = 2;
    const STB_GLOBAL: u8 = 1;
    let mut names = Vec::new();
    for i in 0..shnum {
        let (kind, offset, size, link, entsize) = section(i)?;
        if kind != SHT_SYMTAB {
            continue;
        }
        let entsize = if entsize == 0 { 24 } else { entsize };
        let (_, str_off, str_size, _, _) = section(link as usize)?;
        let strtab = image
            .get(str_off..str_off + str_size)
            .ok_or("string table out of bounds")?;
        for s in 0..size / entsize {
            let sym = offset + s * entsize;
            let name_off = u32_at(image, sym)? as usize;
            let info = *image.get(sym + 4).ok_or("symbol out of bounds")?;
            if info & 0xf == STT_FUNC && info >> 4 == STB_GLOBAL {
                let rest = strtab.get(name_off..).ok_or("symbol name out of bounds")?;
                let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
                names.push(String::from_utf8_lossy(&rest[..end]).into_owned());
            }
        }
    }
    names.sort();
    names.dedup();
    Ok(names)
}

fn bytes_at<const N: usize>(b: &[u8], at: usize) -> Result<[u8; N], String> {
    b.get(at..at + N)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| format!("ELF read past the end at {at}"))
}
fn u16_at(b: &[u8], at: usize) -> Result<u16, String> {
    bytes_at::<2>(b, at).map(u16::from_le_bytes)
}
fn u32_at(b: &[u8], at: usize) -> Result<u32, String> {
    bytes_at::<4>(b, at).map(u32::from_le_bytes)
}
fn u64_at(b: &[u8], at: usize) -> Result<u64, String> {
    bytes_at::<8>(b, at).map(u64::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64: null section, .strtab, .symtab with one global FUNC,
    /// one local FUNC and one global OBJECT.
    fn tiny_elf() -> Vec<u8> {
        let strtab = b"\0kern_a\0local_f\0data_x\0".to_vec();
        let mut symtab = vec![0u8; 24]; // null symbol
        for (name, info) in [(1u32, 0x12u8), (8, 0x02), (16, 0x11)] {
            let mut s = vec![0u8; 24];
            s[..4].copy_from_slice(&name.to_le_bytes());
            s[4] = info;
            symtab.extend(s);
        }
        let str_off = 64usize;
        let sym_off = str_off + strtab.len();
        let sh_off = sym_off + symtab.len();
        let mut img = vec![0u8; 64];
        img[..4].copy_from_slice(b"\x7fELF");
        img[4] = 2;
        img[5] = 1;
        img[0x28..0x30].copy_from_slice(&(sh_off as u64).to_le_bytes());
        img[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        img[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        img.extend(&strtab);
        img.extend(&symtab);
        let sh = |kind: u32, off: usize, size: usize, link: u32, ent: u64| {
            let mut h = vec![0u8; 64];
            h[4..8].copy_from_slice(&kind.to_le_bytes());
            h[0x18..0x20].copy_from_slice(&(off as u64).to_le_bytes());
            h[0x20..0x28].copy_from_slice(&(size as u64).to_le_bytes());
            h[0x28..0x2c].copy_from_slice(&link.to_le_bytes());
            h[0x38..0x40].copy_from_slice(&ent.to_le_bytes());
            h
        };
        img.extend(sh(0, 0, 0, 0, 0));
        img.extend(sh(3, str_off, strtab.len(), 0, 0));
        img.extend(sh(2, sym_off, symtab.len(), 1, 24));
        img
    }

    #[test]
    fn lists_only_global_functions() {
        assert_eq!(function_symbols(&tiny_elf()).unwrap(), vec!["kern_a"]);
    }

    #[test]
    fn rejects_non_elf_and_truncated_images() {
        assert!(function_symbols(
            b"not an elf at all, just some bytes to fill sixty four bytes...."
        )
        .is_err());
        let img = tiny_elf();
        assert!(function_symbols(&img[..img.len() - 10]).is_err());
    }
}

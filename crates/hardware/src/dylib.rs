//! Loading a system library by the first of several names (`dlopen`): the
//! CUDA driver probe ([`crate::cuda`]) and NVML ([`crate::Nvml`]) both go
//! through [`load_first`], so both report a missing library the same way.

/// The first of `names` that loads, with its name; else one reason per name
/// tried (`dlerror`'s text, naming the library), empty when `names` is.
pub(crate) fn load_first<'a>(
    names: &[&'a str],
) -> Result<(libloading::Library, &'a str), Vec<String>> {
    let mut errors = Vec::new();
    for &name in names {
        // SAFETY: the libraries loaded here (the CUDA driver, NVML) run only
        // their initialisers, which have no preconditions.
        match unsafe { libloading::Library::new(name) } {
            Ok(lib) => return Ok((lib, name)),
            Err(e) => {
                // libloading keeps dlerror()'s text in the source.
                let detail = std::error::Error::source(&e)
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| e.to_string());
                errors.push(if detail.contains(name) {
                    detail
                } else {
                    format!("{name}: {detail}")
                });
            }
        }
    }
    Err(errors)
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_missing_name_gets_a_reason_naming_it() {
        let names = ["libheadroom-no-such-a.so.1", "libheadroom-no-such-b.so.2"];
        let errors = super::load_first(&names).err().unwrap();
        assert_eq!(errors.len(), 2);
        for (e, n) in errors.iter().zip(names) {
            assert!(e.contains(n), "{e}");
        }
        assert!(super::load_first(&[]).err().unwrap().is_empty());
    }
}

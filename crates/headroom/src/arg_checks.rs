//! Command-line values checked the same way in every subcommand: negative
//! numbers reach the flag's own parser (so `--max-tokens -1` names the flag
//! instead of reading `-1` as an unknown argument), durations in seconds are
//! finite and representable, token budgets are at least 1 (worded as the
//! server words `max_tokens`), and a `--host` that does not resolve is named.

use anyhow::{bail, Context};
use std::time::Duration;

/// The longest duration a seconds flag accepts (one year).
pub const MAX_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

/// `cmd` and all its subcommands with negative numbers accepted as values:
/// an unsigned flag given `-1` then fails in its parser, naming the flag.
pub fn allow_negative_numbers(cmd: clap::Command) -> clap::Command {
    let cmd = cmd.mut_args(|a| {
        if a.get_action().takes_values() {
            a.allow_negative_numbers(true)
        } else {
            a
        }
    });
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    names.into_iter().fold(cmd, |cmd, name| {
        cmd.mut_subcommand(name, allow_negative_numbers)
    })
}

/// clap value parser of a duration in seconds: a finite number in
/// `0..=MAX_SECONDS` (so `Duration::from_secs_f64` cannot panic on it).
pub fn seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !(v.is_finite() && (0.0..=MAX_SECONDS).contains(&v)) {
        return Err(format!(
            "{s} seconds is out of range: give a number from 0 to {MAX_SECONDS} (one year)"
        ));
    }
    Duration::try_from_secs_f64(v).map_err(|e| format!("{s} seconds: {e}"))?;
    Ok(v)
}

/// A token budget flag: at least 1, with the server's wording of
/// `max_tokens` ("must be at least 1 (got 0)").
pub fn at_least_one(flag: &str, v: usize) -> anyhow::Result<()> {
    if v == 0 {
        bail!("{flag} must be at least 1 (got {v})");
    }
    Ok(())
}

/// Checks that `host` resolves (with `port`), naming the host when not.
pub fn check_host(host: &str, port: u16) -> anyhow::Result<()> {
    use std::net::ToSocketAddrs;
    let mut addrs = (host, port)
        .to_socket_addrs()
        .with_context(|| format!("--host {host}: cannot resolve this host name"))?;
    if addrs.next().is_none() {
        bail!("--host {host}: resolves to no address");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        cmd: Sub,
    }

    #[derive(clap::Subcommand, Debug)]
    enum Sub {
        Run {
            #[arg(long)]
            max_tokens: usize,
            #[arg(long)]
            verbose: bool,
        },
    }

    #[test]
    fn a_negative_value_for_an_unsigned_flag_names_the_flag() {
        use clap::{CommandFactory, FromArgMatches};
        let args = ["x", "run", "--max-tokens", "-1"];
        let plain = Cli::try_parse_from(args).unwrap_err().to_string();
        assert!(plain.contains("unexpected argument '-1'"), "{plain}");
        let e = allow_negative_numbers(Cli::command())
            .try_get_matches_from(args)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--max-tokens") && e.contains("'-1'"), "{e}");
        assert!(!e.contains("unexpected argument"), "{e}");
        let m = allow_negative_numbers(Cli::command())
            .try_get_matches_from(["x", "run", "--max-tokens", "3", "--verbose"])
            .unwrap();
        let Sub::Run {
            max_tokens,
            verbose,
        } = Cli::from_arg_matches(&m).unwrap().cmd;
        assert_eq!((max_tokens, verbose), (3, true));
    }

    #[test]
    fn seconds_are_finite_and_bounded() {
        assert_eq!(seconds("30").unwrap(), 30.0);
        assert_eq!(seconds("0").unwrap(), 0.0);
        for bad in ["1e300", "-1", "inf", "NaN", "x", "31536001"] {
            let e = seconds(bad).unwrap_err();
            assert!(e.contains(bad) || e.contains("out of range"), "{bad}: {e}");
        }
    }

    #[test]
    fn zero_tokens_and_unknown_hosts_are_named() {
        let e = at_least_one("--max-tokens", 0).unwrap_err().to_string();
        assert_eq!(e, "--max-tokens must be at least 1 (got 0)");
        at_least_one("--max-tokens", 1).unwrap();
        check_host("127.0.0.1", 0).unwrap();
        let e = check_host("no-such-host.invalid", 80)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no-such-host.invalid"), "{e}");
    }
}

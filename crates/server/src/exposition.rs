//! Writing the Prometheus text exposition: one unlabelled metric's HELP,
//! TYPE and value lines. `/metrics` ([`crate::metrics`]) and its GPU lines
//! ([`crate::gpu_metrics`]) both write through it.

use std::fmt::Write;

/// One unlabelled metric in the exposition format: its HELP and TYPE lines
/// and its value.
pub(crate) fn write_metric(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    value: impl std::fmt::Display,
) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_metric_is_its_help_type_and_value_lines() {
        let mut out = String::from("x 1\n");
        super::write_metric(&mut out, "a_total", "counter", "What a counts.", 2.5);
        assert_eq!(
            out,
            "x 1\n# HELP a_total What a counts.\n# TYPE a_total counter\na_total 2.5\n"
        );
    }
}

//! Reading a server's `/metrics` (Prometheus text exposition): one
//! unlabelled metric's value by name. `bench serve`'s pool sampler
//! ([`crate::serve_pool`]) and its GPU readings ([`crate::serve_gpu`]) both
//! read the text through it.

/// The value of the unlabelled metric `name` in a Prometheus text, when
/// it is a finite non-negative number.
pub(crate) fn metric_f64(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let (n, v) = l.split_once(' ')?;
        let v: f64 = v.trim().parse().ok()?;
        (n == name && v.is_finite() && v >= 0.0).then_some(v)
    })
}

#[cfg(test)]
mod tests {
    use super::metric_f64;

    #[test]
    fn reads_a_named_finite_non_negative_value_and_nothing_else() {
        let text = "# HELP a_total x\n# TYPE a_total counter\na_total 12.5\nb -1\nc NaN\n\
                    d{rank=\"0\"} 3\na_total_more 7\ne inf\n";
        assert_eq!(metric_f64(text, "a_total"), Some(12.5));
        assert_eq!(metric_f64(text, "a_total_more"), Some(7.0));
        assert_eq!(metric_f64(text, "b"), None, "negative");
        assert_eq!(metric_f64(text, "c"), None, "NaN");
        assert_eq!(metric_f64(text, "e"), None, "infinite");
        assert_eq!(metric_f64(text, "d"), None, "labelled: another name");
        assert_eq!(metric_f64(text, "missing"), None);
    }
}

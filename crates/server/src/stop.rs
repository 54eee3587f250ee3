//! Stop strings matched on the detokenised text, across token boundaries:
//! text that could still be the start of a stop string is held back until
//! the next piece decides it; a match ends the output just before it.

/// Feeds text pieces, yields the text safe to emit.
#[derive(Debug, Clone)]
pub struct StopMatcher {
    stops: Vec<String>,
    text: String,
    emitted: usize,
    stopped: bool,
}

/// What one piece of text produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fed {
    /// Text to emit now.
    pub emit: String,
    /// A stop string was matched: emit this, then end the output.
    pub stopped: bool,
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> StopMatcher {
        StopMatcher {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            text: String::new(),
            emitted: 0,
            stopped: false,
        }
    }

    /// Adds `piece`; returns what can be emitted and whether a stop matched.
    pub fn feed(&mut self, piece: &str) -> Fed {
        if self.stopped {
            return Fed {
                emit: String::new(),
                stopped: true,
            };
        }
        self.text.push_str(piece);
        let pending = &self.text[self.emitted..];
        let first = self
            .stops
            .iter()
            .filter_map(|s| pending.find(s.as_str()))
            .min();
        if let Some(at) = first {
            let emit = pending[..at].to_string();
            self.emitted = self.text.len();
            self.stopped = true;
            return Fed {
                emit,
                stopped: true,
            };
        }
        let hold = self
            .stops
            .iter()
            .map(|s| held_prefix(pending, s))
            .max()
            .unwrap_or(0);
        let end = self.text.len() - hold;
        let emit = self.text[self.emitted..end].to_string();
        self.emitted = end;
        Fed {
            emit,
            stopped: false,
        }
    }

    /// The held-back text at the end of the output (no stop matched).
    pub fn finish(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        let rest = self.text[self.emitted..].to_string();
        self.emitted = self.text.len();
        rest
    }
}

/// Bytes of the longest proper prefix of `stop` that `text` ends with.
fn held_prefix(text: &str, stop: &str) -> usize {
    (1..stop.len())
        .rev()
        .filter(|&k| stop.is_char_boundary(k) && k <= text.len())
        .find(|&k| text.is_char_boundary(text.len() - k) && text.ends_with(&stop[..k]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (Vec<String>, bool, String) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = Vec::new();
        let mut stopped = false;
        for p in pieces {
            let f = m.feed(p);
            out.push(f.emit);
            if f.stopped {
                stopped = true;
                break;
            }
        }
        let rest = m.finish();
        (out, stopped, rest)
    }

    #[test]
    fn a_stop_split_over_pieces_is_matched_and_never_emitted() {
        let (out, stopped, rest) = run(&["END"], &["abc E", "N", "D tail"]);
        assert!(stopped);
        assert_eq!(out.concat(), "abc ");
        assert_eq!(out, vec!["abc ", "", ""]);
        assert_eq!(rest, "");
    }

    #[test]
    fn a_false_start_is_released_when_decided() {
        let (out, stopped, rest) = run(&["END"], &["xE", "Nq", "z"]);
        assert!(!stopped);
        assert_eq!(out, vec!["x", "ENq", "z"]);
        assert_eq!(rest, "");
        let (out, _, rest) = run(&["END"], &["xEN"]);
        assert_eq!((out.concat(), rest), ("x".to_string(), "EN".to_string()));
    }

    #[test]
    fn the_earliest_of_several_stops_wins_and_unicode_is_kept_whole() {
        let (out, stopped, _) = run(&["wörld", "lo w"], &["hel", "lo wö", "rld"]);
        assert!(stopped);
        assert_eq!(out.concat(), "hel");
        let (out, stopped, _) = run(&["🙂!"], &["a🙂", "🙂", "!"]);
        assert!(stopped);
        assert_eq!(out.concat(), "a🙂");
    }

    #[test]
    fn no_stops_passes_everything() {
        let (out, stopped, rest) = run(&[], &["a", "b"]);
        assert_eq!(
            (out.concat(), stopped, rest),
            ("ab".into(), false, "".into())
        );
    }
}

//! Seeds for seeded tests: a fixed spread by default, or the one in `FSOC_SEED` to replay
//! a failure; and the line a failure prints so it can be replayed.

/// The environment variable that pins a seeded test to one seed (hex with `0x`, or
/// decimal).
pub const SEED_VARIABLE: &str = "FSOC_SEED";

/// The seed in `FSOC_SEED` if set, otherwise `count` fixed, well-spread seeds (the same
/// on every run, so CI is deterministic). Panics on an unparsable `FSOC_SEED`.
pub fn test_seeds(count: usize) -> Vec<u64> {
    if let Ok(text) = std::env::var(SEED_VARIABLE) {
        return vec![parse_seed(&text).unwrap_or_else(|| panic!("bad {SEED_VARIABLE}={text}"))];
    }
    (0..count as u64).map(|index| index.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5eed).collect()
}

/// Parses `0x1f` or `31`.
pub fn parse_seed(text: &str) -> Option<u64> {
    let text = text.trim();
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16).ok(),
        None => text.replace('_', "").parse().ok(),
    }
}

/// `replay: FSOC_SEED=0x… cargo test -p <package> <test>`.
pub fn replay_line(seed: u64, package: &str, test: &str) -> String {
    format!("replay: {SEED_VARIABLE}={seed:#018x} cargo test -p {package} {test}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_seed_reads_hex_and_decimal() {
        assert_eq!(parse_seed("0x9e37_79b9"), Some(0x9e37_79b9));
        assert_eq!(parse_seed("42"), Some(42));
        assert_eq!(parse_seed("zz"), None);
    }

    #[test]
    fn replay_line_round_trips() {
        let line = replay_line(0xabc, "fsoc-model", "self_check");
        assert_eq!(line, "replay: FSOC_SEED=0x0000000000000abc cargo test -p fsoc-model self_check");
        let seed_text = line.split('=').nth(1).and_then(|rest| rest.split(' ').next());
        assert_eq!(seed_text.and_then(parse_seed), Some(0xabc));
    }
}

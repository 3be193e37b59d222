//! "Did you mean" hints for unknown keys: the allowed key nearest to a misspelt one.
//! The hint travels beside GitLab's message (`Diagnostic::hint`); the message itself stays
//! GitLab's.

/// Keys longer than this get no hint (the distance is quadratic in the lengths).
const MAX_KEY_CHARS: usize = 64;

/// Unknown keys of one mapping that get a hint; the rest are named in the message only.
const MAX_HINTED_KEYS: usize = 10;

/// The optimal string alignment distance of `a` and `b` over characters: insertions,
/// deletions, substitutions and swaps of two adjacent characters (`scirpt` is one swap
/// from `script`).
fn distance(a: &[char], b: &[char]) -> usize {
    // Three rolling rows: two before this one, for the swap.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur: Vec<usize> = vec![0; b.len() + 1];
    for (i, &ca) in a.iter().enumerate() {
        if let Some(first) = cur.first_mut() {
            *first = i + 1;
        }
        for (j, &cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            let del = prev.get(j + 1).map_or(usize::MAX, |d| d + 1);
            let ins = cur.get(j).map_or(usize::MAX, |d| d + 1);
            let sub = prev.get(j).map_or(usize::MAX, |d| d + cost);
            let mut best = del.min(ins).min(sub);
            let swapped = i > 0 && j > 0 && a.get(i - 1) == Some(&cb) && b.get(j - 1) == Some(&ca);
            if swapped {
                best = best.min(before.get(j - 1).map_or(usize::MAX, |d| d + 1));
            }
            if let Some(slot) = cur.get_mut(j + 1) {
                *slot = best;
            }
        }
        std::mem::swap(&mut before, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev.get(b.len()).copied().unwrap_or(usize::MAX)
}

/// The allowed key `key` most likely meant: the nearest one, when it is at most a third
/// of `key`'s length away (at least one edit); the first of equally near ones.
pub(crate) fn nearest<'a>(key: &str, allowed: &[&'a str]) -> Option<&'a str> {
    let k: Vec<char> = key.chars().collect();
    if k.is_empty() || k.len() > MAX_KEY_CHARS {
        return None;
    }
    let limit = (k.len() / 3).max(1);
    let mut best: Option<(usize, &'a str)> = None;
    for &candidate in allowed {
        let c: Vec<char> = candidate.chars().collect();
        if c.len().abs_diff(k.len()) > limit {
            continue;
        }
        let d = distance(&k, &c);
        if d <= limit && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, candidate));
        }
    }
    best.map(|(_, c)| c)
}

/// The hint for GitLab's `contains unknown keys: …`: ``did you mean `script`?``, or for
/// several keys ``did you mean `script` for `scirpt`, `stage` for `stgae`?``. `None` when
/// no unknown key is near an allowed one.
pub(crate) fn did_you_mean(unknown: &[&str], allowed: &[&str]) -> Option<String> {
    let pairs: Vec<(&str, &str)> = unknown
        .iter()
        .take(MAX_HINTED_KEYS)
        .filter_map(|u| nearest(u, allowed).map(|a| (*u, a)))
        .collect();
    match pairs.as_slice() {
        [] => None,
        [(_, a)] if unknown.len() == 1 => Some(format!("did you mean `{a}`?")),
        _ => Some(format!(
            "did you mean {}?",
            pairs
                .iter()
                .map(|(u, a)| format!("`{a}` for `{u}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(a: &str, b: &str) -> usize {
        let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
        distance(&a, &b)
    }

    #[test]
    fn distance_counts_edits_and_adjacent_swaps() {
        assert_eq!(d("script", "script"), 0);
        assert_eq!(d("scirpt", "script"), 1);
        assert_eq!(d("scripts", "script"), 1);
        assert_eq!(d("scrpt", "script"), 1);
        assert_eq!(d("sxript", "script"), 1);
        assert_eq!(d("", "abc"), 3);
        assert_eq!(d("abc", ""), 3);
        assert_eq!(d("ca", "abc"), 3);
        assert_eq!(d("étape", "etape"), 1);
    }

    const JOB: &[&str] = &["script", "stage", "image", "variables", "before_script"];

    #[test]
    fn nearest_allowed_key() {
        assert_eq!(nearest("scirpt", JOB), Some("script"));
        assert_eq!(nearest("stgae", JOB), Some("stage"));
        assert_eq!(nearest("imag", JOB), Some("image"));
        assert_eq!(nearest("Script", JOB), Some("script"));
        assert_eq!(nearest("varaibles", JOB), Some("variables"));
        assert_eq!(nearest("before", JOB), None);
        assert_eq!(nearest("foo", JOB), None);
        assert_eq!(nearest("", JOB), None);
        assert_eq!(nearest(&"s".repeat(10_000), JOB), None);
    }

    #[test]
    fn hint_text() {
        assert_eq!(
            did_you_mean(&["scirpt"], JOB).as_deref(),
            Some("did you mean `script`?")
        );
        assert_eq!(
            did_you_mean(&["scirpt", "stgae"], JOB).as_deref(),
            Some("did you mean `script` for `scirpt`, `stage` for `stgae`?")
        );
        assert_eq!(
            did_you_mean(&["foo", "scirpt"], JOB).as_deref(),
            Some("did you mean `script` for `scirpt`?")
        );
        assert_eq!(did_you_mean(&["foo"], JOB), None);
        assert_eq!(did_you_mean(&[], JOB), None);
    }
}

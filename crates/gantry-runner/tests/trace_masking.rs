//! Masking, checked against a naive reference over random texts, random secrets and
//! random write boundaries.

use std::sync::Arc;

use gantry_runner::trace::{MaskSet, Masker};
use proptest::prelude::*;

/// Leftmost-longest replacement, one position at a time.
fn reference(text: &[u8], secrets: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let longest = secrets
            .iter()
            .filter(|s| !s.is_empty() && text[i..].starts_with(s))
            .map(Vec::len)
            .max();
        match longest {
            Some(len) => {
                out.extend_from_slice(b"[MASKED]");
                i += len;
            }
            None => {
                out.push(text[i]);
                i += 1;
            }
        }
    }
    out
}

fn streamed(set: &Arc<MaskSet>, text: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut masker = Masker::new(Arc::clone(set));
    let mut out = Vec::new();
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (text.len() + 1)).collect();
    cuts.sort_unstable();
    let mut at = 0;
    for cut in cuts.into_iter().chain([text.len()]) {
        masker.write(&text[at..cut], &mut out);
        assert!(masker.held() < set.max_pattern_len().max(1));
        at = cut;
    }
    masker.finish(&mut out);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// A tiny alphabet makes overlapping and nested secrets common.
    #[test]
    fn streaming_equals_reference(
        secrets in prop::collection::vec("[abc]{1,6}", 1..4),
        text in "[abcx]{0,80}",
        cuts in prop::collection::vec(0usize..100, 0..8),
    ) {
        let secrets: Vec<Vec<u8>> = secrets.into_iter().map(String::into_bytes).collect();
        let set = Arc::new(MaskSet::builder().values(&secrets).build().unwrap());
        let expected = reference(text.as_bytes(), &secrets);
        prop_assert_eq!(streamed(&set, text.as_bytes(), &cuts), expected);
    }

    /// Real-looking secrets embedded in noise are never leaked, whatever the cuts.
    #[test]
    fn secrets_never_leak(
        noise in prop::collection::vec(any::<u8>(), 0..200),
        at in prop::collection::vec(0usize..200, 1..5),
        cuts in prop::collection::vec(0usize..400, 0..20),
    ) {
        let secrets = [b"hunter2-Secret".to_vec(), b"glcbt-token-123456".to_vec(), b"hunter2-Secret-longer".to_vec()];
        let mut text = noise.clone();
        for (i, position) in at.iter().enumerate() {
            let position = position % (text.len() + 1);
            let secret = &secrets[i % secrets.len()];
            text.splice(position..position, secret.iter().copied());
        }
        let set = Arc::new(MaskSet::builder().values(&secrets).build().unwrap());
        let out = streamed(&set, &text, &cuts);
        prop_assert_eq!(&out, &reference(&text, &secrets));
        for secret in &secrets {
            prop_assert!(!out.windows(secret.len()).any(|w| w == secret.as_slice()) || noise.windows(secret.len()).any(|w| w == secret.as_slice()));
        }
    }
}

#[test]
fn many_patterns_use_the_automaton_fallback_correctly() {
    // More patterns than the SIMD searcher takes.
    let secrets: Vec<Vec<u8>> = (0..300)
        .map(|i| format!("secret-{i:04}-value").into_bytes())
        .collect();
    let set = Arc::new(MaskSet::builder().values(&secrets).build().unwrap());
    let text = b"a secret-0007-value b secret-0299-valu secret-0299-value";
    let out = streamed(&set, text, &[5, 13, 40]);
    assert_eq!(out, reference(text, &secrets));
    assert_eq!(out, b"a [MASKED] b secret-0299-valu [MASKED]".to_vec());
}

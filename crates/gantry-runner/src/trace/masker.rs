//! Masking secrets in the job log (§5.5), streaming.
//!
//! Three kinds of pattern, searched together with one leftmost-longest Aho–Corasick
//! automaton:
//!
//! * **values** (masked variables, the job token): the whole value becomes `[MASKED]`;
//! * **token prefixes** (`glpat-`, …): the prefix stays, the token characters after it
//!   (`[A-Za-z0-9._=-]`) become one `[MASKED]` (gitlab-runner's token sanitizer);
//! * **URL parameters** (`?private_token=`, `&X-Amz-Signature=`, …): the key stays, the
//!   value up to the next `&`, `?`, whitespace or control character becomes `[MASKED]`
//!   (gitlab-runner's URL sanitizer).
//!
//! Output arrives in arbitrary pieces, so a secret may be split across writes. The
//! [`Masker`] holds back only the shortest tail that could still become part of a
//! match: the earliest suffix of the input that is a proper prefix of some pattern.
//! Everything before it is final and passed on at once. The held tail is never longer
//! than the longest pattern minus one byte; [`Masker::finish`] releases it.

use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind, Span, packed};

/// What replaces a secret.
pub const MASK: &[u8] = b"[MASKED]";

/// Token prefixes gitlab-runner masks by default.
pub const DEFAULT_TOKEN_PREFIXES: &[&str] = &["glpat-"];

/// Further prefixes gitlab-runner masks with `FF_MASK_ALL_DEFAULT_TOKENS`.
pub const ALL_DEFAULT_TOKEN_PREFIXES: &[&str] = &[
    "glpat-",
    "gloas-",
    "gldt-",
    "glrt-",
    "glcbt-",
    "glrtr-",
    "glptt-",
    "glft-",
    "glimt-",
    "glagent-",
    "glsoat-",
    "glffct-",
    "_gitlab_session=",
    "gltok-",
];

/// URL query keys whose values are masked (gitlab-runner's list). Matched in lower
/// case and in the usual AWS spelling.
pub const SENSITIVE_URL_PARAMS: &[&str] = &[
    "private_token",
    "authenticity_token",
    "rss_token",
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
    "X-Amz-Signature",
    "X-Amz-Credential",
    "X-Amz-Security-Token",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Value,
    TokenPrefix,
    UrlParam,
}

/// The multi-pattern search: SIMD Teddy when the CPU and pattern count allow it
/// (gigabytes per second on build logs), else an Aho–Corasick DFA.
#[derive(Debug)]
enum Searcher {
    Packed(packed::Searcher),
    Automaton(AhoCorasick),
}

impl Searcher {
    /// Leftmost-longest match in `buf[from..]`: (start, end, pattern index).
    fn find(&self, buf: &[u8], from: usize) -> Option<(usize, usize, usize)> {
        match self {
            Self::Packed(searcher) => searcher
                .find_in(buf, Span::from(from..buf.len()))
                .map(|m| (m.start(), m.end(), m.pattern().as_usize())),
            // An unanchored leftmost search cannot fail; a failure would be no match.
            Self::Automaton(automaton) => automaton
                .try_find(aho_corasick::Input::new(buf).range(from..))
                .ok()
                .flatten()
                .map(|m| (m.start(), m.end(), m.pattern().as_usize())),
        }
    }
}

/// A compiled set of things to mask; shared by every writer of a job.
#[derive(Debug)]
pub struct MaskSet {
    automaton: Option<Searcher>,
    kinds: Vec<Kind>,
    /// All patterns, sorted, for "is this a proper prefix of a pattern" queries.
    sorted: Vec<Vec<u8>>,
    first_bytes: [bool; 256],
    max_len: usize,
    /// What it was built from, to extend it ([`MaskSet::with_values`]).
    source: MaskSetBuilder,
}

/// Why a [`MaskSet`] could not be built.
#[derive(Debug, thiserror::Error)]
#[error("build the log masker: {0}")]
pub struct MaskError(#[from] aho_corasick::BuildError);

/// Collects what to mask.
#[derive(Debug, Default, Clone)]
pub struct MaskSetBuilder {
    patterns: Vec<(Vec<u8>, Kind)>,
}

impl MaskSetBuilder {
    /// Masks every occurrence of `value` (ignored when empty).
    pub fn value(mut self, value: impl AsRef<[u8]>) -> Self {
        let value = value.as_ref();
        if !value.is_empty() {
            self.patterns.push((value.to_vec(), Kind::Value));
        }
        self
    }

    /// Masks every value of `values`.
    pub fn values<I, V>(self, values: I) -> Self
    where
        I: IntoIterator<Item = V>,
        V: AsRef<[u8]>,
    {
        values.into_iter().fold(self, Self::value)
    }

    /// Masks the token characters after every occurrence of `prefix`.
    pub fn token_prefix(mut self, prefix: impl AsRef<[u8]>) -> Self {
        let prefix = prefix.as_ref();
        if !prefix.is_empty() {
            self.patterns.push((prefix.to_vec(), Kind::TokenPrefix));
        }
        self
    }

    /// Masks the values of [`SENSITIVE_URL_PARAMS`] in URLs.
    pub fn url_params(mut self) -> Self {
        for key in SENSITIVE_URL_PARAMS {
            for separator in ["?", "&"] {
                self.patterns
                    .push((format!("{separator}{key}=").into_bytes(), Kind::UrlParam));
            }
        }
        self
    }

    /// Everything gitlab-runner masks for `job`: masked variables, the job token,
    /// `glpat-` tokens (all default prefixes when `all_default_tokens`, the job's
    /// `FF_MASK_ALL_DEFAULT_TOKENS` in force), the server's
    /// `features.token_mask_prefixes`, and sensitive URL parameters.
    pub fn for_job(job: &gantry_protocol::JobResponse, all_default_tokens: bool) -> Self {
        let prefixes = if all_default_tokens {
            ALL_DEFAULT_TOKEN_PREFIXES
        } else {
            DEFAULT_TOKEN_PREFIXES
        };
        let mut builder = Self::default()
            .values(job.variables.iter().filter(|v| v.masked).map(|v| &v.value))
            .value(&job.token)
            .url_params();
        for prefix in prefixes {
            builder = builder.token_prefix(prefix);
        }
        for prefix in job.features.token_mask_prefixes.iter().flatten() {
            builder = builder.token_prefix(prefix);
        }
        builder
    }

    /// Compiles the set. A value that is also a prefix or parameter pattern is masked
    /// as a value.
    pub fn build(mut self) -> Result<MaskSet, MaskError> {
        let source = self.clone();
        // Values first, so a duplicate keeps the strongest treatment.
        self.patterns.sort_by_key(|(_, kind)| *kind != Kind::Value);
        let mut seen = std::collections::HashSet::new();
        self.patterns
            .retain(|(pattern, _)| seen.insert(pattern.clone()));

        let mut first_bytes = [false; 256];
        for (pattern, _) in &self.patterns {
            if let Some(&b) = pattern.first() {
                first_bytes[usize::from(b)] = true;
            }
        }
        let max_len = self
            .patterns
            .iter()
            .map(|(p, _)| p.len())
            .max()
            .unwrap_or(0);
        let automaton = if self.patterns.is_empty() {
            None
        } else {
            let packed = packed::Config::new()
                .match_kind(packed::MatchKind::LeftmostLongest)
                .builder()
                .extend(self.patterns.iter().map(|(p, _)| p))
                .build();
            Some(match packed {
                Some(searcher) => Searcher::Packed(searcher),
                None => Searcher::Automaton(
                    AhoCorasick::builder()
                        .match_kind(MatchKind::LeftmostLongest)
                        .build(self.patterns.iter().map(|(p, _)| p))?,
                ),
            })
        };
        let mut sorted: Vec<Vec<u8>> = self.patterns.iter().map(|(p, _)| p.clone()).collect();
        sorted.sort();
        Ok(MaskSet {
            automaton,
            kinds: self.patterns.iter().map(|(_, kind)| *kind).collect(),
            sorted,
            first_bytes,
            max_len,
            source,
        })
    }
}

impl MaskSet {
    /// Starts a set.
    pub fn builder() -> MaskSetBuilder {
        MaskSetBuilder::default()
    }

    /// A set that masks nothing.
    pub fn empty() -> Self {
        Self {
            automaton: None,
            kinds: Vec::new(),
            sorted: Vec::new(),
            first_bytes: [false; 256],
            max_len: 0,
            source: MaskSetBuilder::default(),
        }
    }

    /// This set and `values` too.
    pub fn with_values<I, V>(&self, values: I) -> Result<MaskSet, MaskError>
    where
        I: IntoIterator<Item = V>,
        V: AsRef<[u8]>,
    {
        self.source.clone().values(values).build()
    }

    /// Whether the set masks nothing.
    pub fn is_empty(&self) -> bool {
        self.automaton.is_none()
    }

    /// Length of the longest pattern: a [`Masker`] never holds more than this minus one.
    pub fn max_pattern_len(&self) -> usize {
        self.max_len
    }

    /// Masks a complete text in one go.
    pub fn mask_all(self: &Arc<Self>, text: &[u8]) -> Vec<u8> {
        let mut masker = Masker::new(Arc::clone(self));
        let mut out = Vec::with_capacity(text.len());
        masker.write(text, &mut out);
        masker.finish(&mut out);
        out
    }

    /// Whether `tail` is a proper prefix of some pattern (a match could still grow out
    /// of it).
    fn is_proper_prefix(&self, tail: &[u8]) -> bool {
        let at = self.sorted.partition_point(|p| p.as_slice() < tail);
        self.sorted[at..]
            .iter()
            .take(2)
            .any(|p| p.len() > tail.len() && p.starts_with(tail))
    }

    /// The earliest position in `from..buf.len()` where a match could start but not yet
    /// end; `buf.len()` when there is none.
    fn first_partial(&self, buf: &[u8], from: usize) -> usize {
        (from..buf.len())
            .find(|&q| self.first_bytes[usize::from(buf[q])] && self.is_proper_prefix(&buf[q..]))
            .unwrap_or(buf.len())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Swallow {
    /// After a token prefix: token characters.
    Token { masked: bool },
    /// After a URL parameter key: everything up to a parameter end.
    Param { masked: bool },
}

impl Swallow {
    fn accepts(self, byte: u8) -> bool {
        match self {
            Self::Token { .. } => {
                byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'=')
            }
            Self::Param { .. } => {
                !(matches!(byte, b'?' | b'&')
                    || byte.is_ascii_whitespace()
                    || byte.is_ascii_control())
            }
        }
    }

    fn masked(self) -> bool {
        match self {
            Self::Token { masked } | Self::Param { masked } => masked,
        }
    }

    fn set_masked(&mut self) {
        match self {
            Self::Token { masked } | Self::Param { masked } => *masked = true,
        }
    }
}

/// Streaming masker for one output stream.
#[derive(Debug)]
pub struct Masker {
    set: Arc<MaskSet>,
    held: Vec<u8>,
    scratch: Vec<u8>,
    swallow: Option<Swallow>,
}

impl Masker {
    /// A masker over `set`.
    pub fn new(set: Arc<MaskSet>) -> Self {
        Self {
            set,
            held: Vec::new(),
            scratch: Vec::new(),
            swallow: None,
        }
    }

    /// Bytes held back because they may be the start of a secret.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Masks `input` (continuing the stream) and appends what is final to `out`.
    pub fn write(&mut self, input: &[u8], out: &mut Vec<u8>) {
        if self.set.is_empty() {
            out.extend_from_slice(input);
            return;
        }
        if self.held.is_empty() {
            let hold = process(&self.set, input, &mut self.swallow, false, out);
            self.held.extend_from_slice(&input[hold..]);
        } else {
            let mut scratch = std::mem::take(&mut self.scratch);
            scratch.clear();
            scratch.extend_from_slice(&self.held);
            scratch.extend_from_slice(input);
            let hold = process(&self.set, &scratch, &mut self.swallow, false, out);
            self.held.clear();
            self.held.extend_from_slice(&scratch[hold..]);
            self.scratch = scratch;
        }
    }

    /// Ends the stream: releases the held tail (masking any complete secret in it).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let held = std::mem::take(&mut self.held);
        process(&self.set, &held, &mut self.swallow, true, out);
        self.swallow = None;
    }
}

/// Masks `buf`, appending final output to `out`; returns where the held tail starts.
fn process(
    set: &MaskSet,
    buf: &[u8],
    swallow: &mut Option<Swallow>,
    last: bool,
    out: &mut Vec<u8>,
) -> usize {
    let Some(automaton) = &set.automaton else {
        out.extend_from_slice(buf);
        return buf.len();
    };
    let len = buf.len();
    // A match starting before `floor` ends inside `buf`, so it can be decided now.
    let floor = if last {
        len
    } else {
        len.saturating_sub(set.max_len.saturating_sub(1))
    };
    let mut pos = 0;
    let mut cut: Option<usize> = None;
    loop {
        if let Some(state) = swallow {
            let n = buf[pos..].iter().take_while(|&&b| state.accepts(b)).count();
            if n > 0 && !state.masked() {
                out.extend_from_slice(MASK);
                state.set_masked();
            }
            pos += n;
            if pos == len {
                return len;
            }
            *swallow = None;
        }
        let cut_at = match cut {
            Some(c) if c >= pos => c,
            _ => {
                let c = if last {
                    len
                } else {
                    set.first_partial(buf, pos.max(floor))
                };
                cut = Some(c);
                c
            }
        };
        // Search to the end, not just to `cut_at`: a complete match starting before a
        // partial one is leftmost, and wins, even if it overlaps it.
        let (start, end, pattern) = match automaton.find(buf, pos) {
            Some(found) if found.0 < cut_at => found,
            _ => {
                out.extend_from_slice(&buf[pos..cut_at]);
                return cut_at;
            }
        };
        out.extend_from_slice(&buf[pos..start]);
        pos = end;
        match set.kinds.get(pattern) {
            Some(Kind::TokenPrefix) => {
                out.extend_from_slice(&buf[start..end]);
                *swallow = Some(Swallow::Token { masked: false });
            }
            Some(Kind::UrlParam) => {
                out.extend_from_slice(&buf[start..end]);
                *swallow = Some(Swallow::Param { masked: false });
            }
            Some(Kind::Value) | None => out.extend_from_slice(MASK),
        }
        if pos == len && swallow.is_none() {
            return len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(values: &[&str]) -> Arc<MaskSet> {
        Arc::new(MaskSet::builder().values(values).build().unwrap())
    }

    fn stream(set: &Arc<MaskSet>, pieces: &[&[u8]]) -> Vec<u8> {
        let mut masker = Masker::new(Arc::clone(set));
        let mut out = Vec::new();
        for piece in pieces {
            masker.write(piece, &mut out);
            assert!(masker.held() < set.max_pattern_len().max(1));
        }
        masker.finish(&mut out);
        out
    }

    #[test]
    fn masks_whole_values() {
        let set = set(&["s3cr3t-value"]);
        assert_eq!(
            set.mask_all(b"a s3cr3t-value b s3cr3t-value"),
            b"a [MASKED] b [MASKED]"
        );
    }

    #[test]
    fn masks_values_split_at_every_position() {
        let set = set(&["abcdef", "xyz"]);
        let text = b"..abcdef..xyz..abcdxyz";
        let expected = b"..[MASKED]..[MASKED]..abcd[MASKED]";
        for split in 0..=text.len() {
            let (a, b) = text.split_at(split);
            assert_eq!(stream(&set, &[a, b]), expected, "split at {split}");
        }
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(stream(&set, &bytes), expected);
    }

    #[test]
    fn an_earlier_partial_match_wins_over_a_later_complete_one() {
        // "abcdzz" must be masked whole although "bcd" completes first.
        let set = set(&["abcdzz", "bcd"]);
        assert_eq!(stream(&set, &[b"abcd", b"zz!"]), b"[MASKED]!");
        assert_eq!(stream(&set, &[b"abcd", b"x"]), b"a[MASKED]x");
    }

    #[test]
    fn a_complete_match_beats_a_later_overlapping_partial_one() {
        let set = set(&["abcd", "cdZZ"]);
        assert_eq!(stream(&set, &[b"xabcd", b"ZZ"]), b"x[MASKED]ZZ");
    }

    #[test]
    fn longest_value_wins() {
        let set = set(&["abc", "abcdef"]);
        assert_eq!(stream(&set, &[b"abc", b"def"]), b"[MASKED]");
        assert_eq!(stream(&set, &[b"abc", b"de"]), b"[MASKED]de");
    }

    #[test]
    fn holds_only_a_prefix_of_a_pattern() {
        let set = set(&["secret"]);
        let mut masker = Masker::new(Arc::clone(&set));
        let mut out = Vec::new();
        masker.write(b"hello sec", &mut out);
        assert_eq!(out, b"hello ");
        assert_eq!(masker.held(), 3);
        masker.write(b"ond", &mut out);
        assert_eq!(out, b"hello second");
        assert_eq!(masker.held(), 0);
    }

    #[test]
    fn token_prefixes_keep_the_prefix() {
        let set = Arc::new(MaskSet::builder().token_prefix("glpat-").build().unwrap());
        assert_eq!(
            stream(&set, &[b"token glpat-abc", b"DEF_12 end glpat- x"]),
            b"token glpat-[MASKED] end glpat- x"
        );
    }

    #[test]
    fn url_parameters_are_masked() {
        let set = Arc::new(MaskSet::builder().url_params().build().unwrap());
        assert_eq!(
            stream(
                &set,
                &[
                    b"GET /x?private_tok",
                    b"en=abc123&page=2 https://s3/o?X-Amz-Signature=ff00\n"
                ]
            ),
            b"GET /x?private_token=[MASKED]&page=2 https://s3/o?X-Amz-Signature=[MASKED]\n"
        );
    }

    #[test]
    fn empty_set_passes_through() {
        let set = Arc::new(MaskSet::empty());
        assert_eq!(stream(&set, &[b"abc", b""]), b"abc");
    }
}

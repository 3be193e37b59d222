//! Streaming UTF-8 sanitising: invalid sequences become U+FFFD (as gitlab-runner's
//! trace buffer does), a character split across writes is kept whole.

const REPLACEMENT: &[u8] = "\u{FFFD}".as_bytes();

/// Sanitiser state for one stream: the bytes of an unfinished character.
#[derive(Debug, Default)]
pub(crate) struct Utf8Sanitizer {
    carry: Vec<u8>,
}

impl Utf8Sanitizer {
    /// Appends the valid UTF-8 form of `input` to `out`; keeps an unfinished trailing
    /// character for the next write.
    pub(crate) fn write(&mut self, mut input: &[u8], out: &mut Vec<u8>) {
        // Finish a carried character first; each round uses at least one input byte.
        while !self.carry.is_empty() && !input.is_empty() {
            let carried = self.carry.len();
            let take = input.len().min(4usize.saturating_sub(carried).max(1));
            let mut small = std::mem::take(&mut self.carry);
            small.extend_from_slice(&input[..take]);
            let consumed = sanitize(&small, false, out);
            if consumed >= carried {
                input = &input[consumed - carried..];
            } else {
                // Still unfinished: it started in the carry and took all `take` bytes.
                self.carry = small.split_off(consumed);
                input = &input[take..];
            }
        }
        let consumed = sanitize(input, false, out);
        self.carry.extend_from_slice(&input[consumed..]);
    }

    /// Ends the stream: an unfinished character becomes U+FFFD.
    pub(crate) fn finish(&mut self, out: &mut Vec<u8>) {
        if !self.carry.is_empty() {
            out.extend_from_slice(REPLACEMENT);
            self.carry.clear();
        }
    }
}

/// Appends the sanitised form of `buf` to `out`; returns how many bytes were consumed
/// (all of them unless `buf` ends with an unfinished character and `last` is false).
fn sanitize(buf: &[u8], last: bool, out: &mut Vec<u8>) -> usize {
    let mut at = 0;
    loop {
        match std::str::from_utf8(&buf[at..]) {
            Ok(_) => {
                out.extend_from_slice(&buf[at..]);
                return buf.len();
            }
            Err(error) => {
                let valid = error.valid_up_to();
                out.extend_from_slice(&buf[at..at + valid]);
                at += valid;
                match error.error_len() {
                    Some(bad) => {
                        out.extend_from_slice(REPLACEMENT);
                        at += bad;
                    }
                    None if last => {
                        out.extend_from_slice(REPLACEMENT);
                        return buf.len();
                    }
                    None => return at,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(pieces: &[&[u8]]) -> Vec<u8> {
        let mut sanitizer = Utf8Sanitizer::default();
        let mut out = Vec::new();
        for piece in pieces {
            sanitizer.write(piece, &mut out);
        }
        sanitizer.finish(&mut out);
        out
    }

    #[test]
    fn keeps_characters_split_across_writes() {
        let text = "aé€😀z".as_bytes();
        for split in 0..=text.len() {
            let (a, b) = text.split_at(split);
            assert_eq!(run(&[a, b]), text, "split at {split}");
        }
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(run(&bytes), text);
    }

    #[test]
    fn replaces_invalid_bytes() {
        assert_eq!(run(&[b"a\xffb"]), "a\u{FFFD}b".as_bytes());
        assert_eq!(run(&[b"a\xe2\x82"]), "a\u{FFFD}".as_bytes());
        assert_eq!(run(&[b"a\xe2", b"b"]), "a\u{FFFD}b".as_bytes());
        assert_eq!(run(&[b"\xe2", b"\x82", b"\xac!"]), "€!".as_bytes());
    }
}

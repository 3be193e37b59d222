//! The scanner's working buffer (libyaml's `parser->buffer`): the characters decoded from
//! the input and not consumed yet. A vector and a read position, as libyaml's pointer
//! into its buffer: looking ahead is an index, consuming a character an increment. (The
//! upstream port's `VecDeque` computed a wrap-around on every look-ahead.)

/// Characters decoded and not yet consumed, oldest first.
#[derive(Debug, Default)]
pub(crate) struct CharQueue {
    chars: Vec<char>,
    /// Index in `chars` of the next character; everything before it is consumed.
    head: usize,
}

/// Consumed characters are dropped from the front once there are this many and they are
/// at least half of the vector (only a reader that delivers its input in pieces gets
/// there; a string is decoded at once).
const COMPACT_AT: usize = 4096;

impl CharQueue {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        CharQueue {
            chars: Vec::with_capacity(capacity),
            head: 0,
        }
    }

    /// The character `i` places ahead of the next one (`0`: the next one).
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&char> {
        self.chars.get(self.head.wrapping_add(i))
    }

    #[inline]
    pub(crate) fn front(&self) -> Option<&char> {
        self.chars.get(self.head)
    }

    /// Consume the next character.
    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<char> {
        let ch = *self.chars.get(self.head)?;
        self.head += 1;
        Some(ch)
    }

    /// Consume the next `n` characters (fewer when fewer are left).
    #[inline]
    pub(crate) fn skip(&mut self, n: usize) {
        self.head = self.head.saturating_add(n).min(self.chars.len());
    }

    /// The characters left, in order.
    #[inline]
    pub(crate) fn as_slice(&self) -> &[char] {
        self.chars.get(self.head..).unwrap_or_default()
    }

    /// How many characters are left.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.chars.len() - self.head
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn clear(&mut self) {
        self.chars.clear();
        self.head = 0;
    }

    /// Make room for `additional` more characters.
    pub(crate) fn reserve(&mut self, additional: usize) {
        if self.head >= COMPACT_AT && self.head * 2 >= self.chars.len() {
            self.chars.drain(..self.head);
            self.head = 0;
        }
        self.chars.reserve(additional);
    }

    #[inline]
    pub(crate) fn push_back(&mut self, ch: char) {
        self.chars.push(ch);
    }

    /// Append every byte of `ascii` (ASCII only) as a character.
    pub(crate) fn extend_ascii(&mut self, ascii: &str) {
        self.chars.extend(ascii.bytes().map(char::from));
    }
}

impl core::ops::Index<usize> for CharQueue {
    type Output = char;

    fn index(&self, i: usize) -> &char {
        &self.chars[self.head + i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_of_characters() {
        let mut q = CharQueue::with_capacity(2);
        q.reserve(3);
        for ch in "abc".chars() {
            q.push_back(ch);
        }
        assert_eq!(
            (q.len(), q.front(), q.get(2), q.get(3)),
            (3, Some(&'a'), Some(&'c'), None)
        );
        assert_eq!(q.pop_front(), Some('a'));
        assert_eq!((q[0], q.get(1)), ('b', Some(&'c')));
        q.skip(5);
        assert!(q.is_empty());
        assert_eq!((q.pop_front(), q.front()), (None, None));
    }

    #[test]
    fn consumed_characters_are_dropped_when_reading_in_pieces() {
        let mut q = CharQueue::default();
        for round in 0..3 {
            q.reserve(COMPACT_AT);
            for _ in 0..COMPACT_AT {
                q.push_back('x');
            }
            q.push_back(char::from(b'0' + round));
            q.skip(COMPACT_AT);
            assert_eq!(q.pop_front(), Some(char::from(b'0' + round)));
        }
        q.reserve(1);
        assert!(q.chars.len() < 2 * COMPACT_AT, "{}", q.chars.len());
    }
}

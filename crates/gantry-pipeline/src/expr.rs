//! GitLab CI expression language used by `rules:if` and `only/except:variables`
//! (spec §4.1–4.3), plus the `/regex/flags` literal syntax shared with
//! `only/except:refs` (§4.6).
//!
//! Mirrors GitLab's `Gitlab::Ci::Pipeline::Expression` (lexer, shunting-yard
//! parser, lexemes) and `Gitlab::UntrustedRegexp::RubySyntax`. RE2 patterns are
//! translated to the `regex` crate's syntax where the two differ (ASCII-only
//! `\d \w \s \b`, literal `[`/`&&`/`~~` inside classes, literal `{`, `\Q…\E`).
//!
//! Flags are GitLab's `[ismU]*`, prepended as RE2's `(?flags)`, so each has RE2's meaning:
//! `i` case-insensitive, `m` multi-line anchors (not Ruby's `m`, which is RE2's `s`), `s`
//! dot matches newline, `U` ungreedy. Another letter after a pattern token (`/re/x`) is left
//! to the lexer, which finds no lexeme for it; a body of one character is not a pattern
//! token at all (GitLab's lexeme needs two): both are "invalid expression syntax".

use std::borrow::Cow;

use regex::{Regex, RegexBuilder};

/// GitLab's `Lexer::MAX_TOKENS`. The lexer loop runs this many times and fails
/// if input remains, so at most `MAX_TOKENS - 1` tokens are accepted.
const MAX_TOKENS: usize = 100;

/// Compiled-program and lazy-DFA size limits for user-supplied regexes.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// RE2's maximum repetition count (`{n,m}` with n or m above it is an error).
const RE2_MAX_REPEAT: u32 = 1000;

/// Parse errors. Messages follow GitLab's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    /// Expression is empty or whitespace only.
    #[error("Empty expression")]
    Empty,
    #[error("Unknown lexeme found!")]
    UnknownLexeme,
    #[error("Too many tokens!")]
    TooManyTokens,
    #[error("Invalid regular expression!")]
    InvalidRegex,
    /// A `)` without a matching `(`.
    #[error("Unmatched parenthesis")]
    UnmatchedParenthesis,
    /// A `(` that is never closed.
    #[error("Unprocessable token found in parse tree: parenthesis_open")]
    UnclosedParenthesis,
    /// An operator without two operands.
    #[error("Invalid left operand")]
    InvalidLeftOperand,
    #[error("Unreachable nodes in parse tree")]
    UnreachableNodes,
    #[error("Empty parse tree")]
    EmptyParseTree,
}

/// A parsed `rules:if` / `only:variables` expression.
#[derive(Debug, Clone)]
pub struct Expression {
    root: std::sync::Arc<Node>,
}

impl Expression {
    /// Parses an expression; errors correspond to GitLab's "invalid expression syntax".
    pub fn parse(text: &str) -> Result<Expression, ExprError> {
        // Rules shared through `extends`/`!reference`/`default` are the same text in many
        // jobs: parse each text once per process.
        static CACHE: Memo<Result<Expression, ExprError>> = Memo::new();
        CACHE.get_or(text, || Self::parse_uncached(text))
    }

    fn parse_uncached(text: &str) -> Result<Expression, ExprError> {
        let tokens = tokenize(text)?;
        if tokens.is_empty() {
            return Err(ExprError::Empty);
        }
        let rpn = to_rpn(tokens)?;
        let root = build_tree(rpn)?;
        Ok(Expression {
            root: std::sync::Arc::new(root),
        })
    }

    /// `vars(name)` returns the raw (unexpanded) value of a CI variable or None if undefined.
    /// `inputs(name)` returns an input value as a string (None if unknown -> treated as null).
    ///
    /// Any runtime error makes the whole expression false.
    pub fn evaluate(
        &self,
        vars: &dyn Fn(&str) -> Option<String>,
        inputs: &dyn Fn(&str) -> Option<String>,
    ) -> bool {
        let ctx = Ctx { vars, inputs };
        match eval(&self.root, &ctx) {
            Ok(value) => value.is_present(),
            Err(RuntimeError) => false,
        }
    }
}

/// Recognises a GitLab `/body/flags` regex string (flags ⊆ `ismU`) as used by
/// `only/except:refs` (`RubySyntax.fabricate`).
///
/// Returns `None` if `s` does not have that shape, `Some(Err(_))` if it does
/// but the pattern is not valid RE2. No `\/` pre-unescaping and no minimum body
/// length (those apply to expression regex tokens only).
pub fn parse_regex_literal(s: &str) -> Option<Result<Regex, ExprError>> {
    let (body, flags) = split_ruby_syntax(s)?;
    Some(compile_re2(body, flags).map(|lit| lit.re))
}

// ---------------------------------------------------------------------------
// Lexer

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BinOp {
    Eq,
    Ne,
    Match,
    NotMatch,
    And,
    Or,
}

impl BinOp {
    /// GitLab precedences: lower binds tighter.
    fn precedence(self) -> u16 {
        match self {
            BinOp::Eq | BinOp::Ne | BinOp::Match | BinOp::NotMatch => 10,
            BinOp::And => 11,
            BinOp::Or => 12,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Leaf {
    Null,
    Bool(bool),
    Str(String),
    Var(String),
    Input(String),
    /// Raw regex token text, e.g. `/a\/b/i`.
    Pattern(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Open,
    Close,
    Value(Leaf),
    Op(BinOp),
}

/// Ruby's `\s`.
fn is_ruby_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r')
}

/// Ruby's (ASCII) `\w`.
fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn tokenize(text: &str) -> Result<Vec<Token>, ExprError> {
    let cs: Vec<char> = text.chars().collect();
    let mut pos = 0;
    let mut tokens = Vec::new();
    for _ in 0..MAX_TOKENS {
        while cs.get(pos).is_some_and(|&c| is_ruby_space(c)) {
            pos += 1;
        }
        if pos >= cs.len() {
            return Ok(tokens);
        }
        let (token, next) = scan_token(&cs, pos).ok_or(ExprError::UnknownLexeme)?;
        tokens.push(token);
        pos = next;
    }
    Err(ExprError::TooManyTokens)
}

fn starts_with(cs: &[char], pos: usize, lit: &str) -> bool {
    lit.chars()
        .enumerate()
        .all(|(k, l)| cs.get(pos + k) == Some(&l))
}

fn collect(cs: &[char], from: usize, to: usize) -> String {
    cs.get(from..to)
        .map(|s| s.iter().collect())
        .unwrap_or_default()
}

/// Tries each lexeme in GitLab's order; returns the token and the next position.
fn scan_token(cs: &[char], pos: usize) -> Option<(Token, usize)> {
    let c = *cs.get(pos)?;
    if c == '(' {
        return Some((Token::Open, pos + 1));
    }
    if c == ')' {
        return Some((Token::Close, pos + 1));
    }
    if let Some((name, next)) = scan_input(cs, pos) {
        return Some((Token::Value(Leaf::Input(name)), next));
    }
    if let Some((name, next)) = scan_variable(cs, pos) {
        return Some((Token::Value(Leaf::Var(name)), next));
    }
    if let Some((s, next)) = scan_string(cs, pos) {
        return Some((Token::Value(Leaf::Str(s)), next));
    }
    if let Some(next) = scan_pattern(cs, pos) {
        return Some((Token::Value(Leaf::Pattern(collect(cs, pos, next))), next));
    }
    if starts_with(cs, pos, "null") {
        return Some((Token::Value(Leaf::Null), pos + 4));
    }
    for (word, value) in [("true", true), ("false", false)] {
        let end = pos + word.len();
        if starts_with(cs, pos, word) && !cs.get(end).is_some_and(|&c| is_word(c)) {
            return Some((Token::Value(Leaf::Bool(value)), end));
        }
    }
    for (lit, op) in [
        ("==", BinOp::Eq),
        ("=~", BinOp::Match),
        ("!=", BinOp::Ne),
        ("!~", BinOp::NotMatch),
        ("&&", BinOp::And),
        ("||", BinOp::Or),
    ] {
        if starts_with(cs, pos, lit) {
            return Some((Token::Op(op), pos + 2));
        }
    }
    None
}

fn scan_word(cs: &[char], mut pos: usize) -> usize {
    while cs.get(pos).is_some_and(|&c| is_word(c)) {
        pos += 1;
    }
    pos
}

/// `\$\[\[\s*inputs\.(\w+)\s*\]\]`
fn scan_input(cs: &[char], pos: usize) -> Option<(String, usize)> {
    if !starts_with(cs, pos, "$[[") {
        return None;
    }
    let mut i = pos + 3;
    while cs.get(i).is_some_and(|&c| is_ruby_space(c)) {
        i += 1;
    }
    if !starts_with(cs, i, "inputs.") {
        return None;
    }
    let name_start = i + 7;
    let name_end = scan_word(cs, name_start);
    if name_end == name_start {
        return None;
    }
    i = name_end;
    while cs.get(i).is_some_and(|&c| is_ruby_space(c)) {
        i += 1;
    }
    if !starts_with(cs, i, "]]") {
        return None;
    }
    Some((collect(cs, name_start, name_end), i + 2))
}

/// `\$(\w+)`
fn scan_variable(cs: &[char], pos: usize) -> Option<(String, usize)> {
    if cs.get(pos) != Some(&'$') {
        return None;
    }
    let end = scan_word(cs, pos + 1);
    (end > pos + 1).then(|| (collect(cs, pos + 1, end), end))
}

/// `"(.*?)"` or `'(.*?)'`; Ruby's `.` excludes `\n`, no escapes.
fn scan_string(cs: &[char], pos: usize) -> Option<(String, usize)> {
    let quote = *cs.get(pos)?;
    if quote != '"' && quote != '\'' {
        return None;
    }
    let mut i = pos + 1;
    loop {
        match cs.get(i) {
            Some(&c) if c == quote => return Some((collect(cs, pos + 1, i), i + 1)),
            Some('\n') | None => return None,
            Some(_) => i += 1,
        }
    }
}

/// GitLab's `^\/([^\/]|\\/)+[^\\]\/[ismU]*` with backtracking (leftmost-first)
/// semantics, computed right to left. Returns the end position.
fn scan_pattern(cs: &[char], pos: usize) -> Option<usize> {
    let s = cs.get(pos..)?;
    if s.first() != Some(&'/') {
        return None;
    }
    let n = s.len();
    // first_end[i]: end of the first match found when, with at least one group
    // repetition done, the matcher stands at i (try `[^/]`, then `\/`, then stop
    // the group and match `[^\\]\/`).
    let mut first_end: Vec<Option<usize>> = vec![None; n + 3];
    let get = |v: &Vec<Option<usize>>, i: usize| v.get(i).copied().flatten();
    for i in (2..=n).rev() {
        let cur = s.get(i).copied();
        let nxt = s.get(i + 1).copied();
        let mut r = None;
        if cur.is_some_and(|c| c != '/') {
            r = get(&first_end, i + 1);
        }
        if r.is_none() && cur == Some('\\') && nxt == Some('/') {
            r = get(&first_end, i + 2);
        }
        if r.is_none() && cur.is_some_and(|c| c != '\\') && nxt == Some('/') {
            r = Some(i + 2);
        }
        if let Some(slot) = first_end.get_mut(i) {
            *slot = r;
        }
    }
    // First repetition (mandatory, position 1).
    let c1 = s.get(1).copied();
    let mut end = None;
    if c1.is_some_and(|c| c != '/') {
        end = get(&first_end, 2);
    }
    if end.is_none() && c1 == Some('\\') && s.get(2) == Some(&'/') {
        end = get(&first_end, 3);
    }
    let mut end = end?;
    while s
        .get(end)
        .is_some_and(|&c| matches!(c, 'i' | 's' | 'm' | 'U'))
    {
        end += 1;
    }
    Some(pos + end)
}

// ---------------------------------------------------------------------------
// Parser (GitLab's shunting-yard)

#[derive(Debug)]
enum Rpn {
    Value(Leaf),
    Op(BinOp),
    Open,
}

fn to_rpn(tokens: Vec<Token>) -> Result<Vec<Rpn>, ExprError> {
    let mut output = Vec::new();
    // Operator stack: `None` marks an open parenthesis (precedence 901, never
    // consumed by operators).
    let mut ops: Vec<Option<BinOp>> = Vec::new();
    for token in tokens {
        match token {
            Token::Value(leaf) => output.push(Rpn::Value(leaf)),
            Token::Op(op) => {
                while let Some(Some(top)) = ops.last().copied() {
                    if op.precedence() < top.precedence() {
                        break;
                    }
                    output.push(Rpn::Op(top));
                    ops.pop();
                }
                ops.push(Some(op));
            }
            Token::Open => ops.push(None),
            Token::Close => {
                while let Some(Some(top)) = ops.last().copied() {
                    output.push(Rpn::Op(top));
                    ops.pop();
                }
                if ops.pop().is_none() {
                    return Err(ExprError::UnmatchedParenthesis);
                }
            }
        }
    }
    while let Some(op) = ops.pop() {
        output.push(match op {
            Some(op) => Rpn::Op(op),
            None => Rpn::Open,
        });
    }
    Ok(output)
}

#[derive(Debug, Clone)]
struct RegexLit {
    /// GitLab's source form, `(?flags)body`; used for `==` between regexes.
    source: String,
    re: Regex,
}

#[derive(Debug, Clone)]
enum Node {
    Null,
    Bool(bool),
    Str(String),
    Var(String),
    Input(String),
    Regex(Box<RegexLit>),
    Bin(BinOp, Box<Node>, Box<Node>),
}

fn build_tree(rpn: Vec<Rpn>) -> Result<Node, ExprError> {
    let mut results: Vec<Node> = Vec::new();
    for item in rpn {
        match item {
            Rpn::Value(leaf) => results.push(build_leaf(leaf)?),
            Rpn::Op(op) => {
                // GitLab pops the right operand first, so a missing operand
                // always surfaces as "Invalid left operand".
                let (Some(right), Some(left)) = (results.pop(), results.pop()) else {
                    return Err(ExprError::InvalidLeftOperand);
                };
                results.push(Node::Bin(op, Box::new(left), Box::new(right)));
            }
            Rpn::Open => return Err(ExprError::UnclosedParenthesis),
        }
    }
    if results.len() > 1 {
        return Err(ExprError::UnreachableNodes);
    }
    results.pop().ok_or(ExprError::EmptyParseTree)
}

fn build_leaf(leaf: Leaf) -> Result<Node, ExprError> {
    Ok(match leaf {
        Leaf::Null => Node::Null,
        Leaf::Bool(b) => Node::Bool(b),
        Leaf::Str(s) => Node::Str(s),
        Leaf::Var(v) => Node::Var(v),
        Leaf::Input(i) => Node::Input(i),
        Leaf::Pattern(raw) => Node::Regex(Box::new(build_pattern(&raw)?)),
    })
}

/// GitLab's `Lexeme::Pattern.new`: unescape `\/`, then `RubySyntax` + RE2.
fn build_pattern(raw: &str) -> Result<RegexLit, ExprError> {
    let unescaped = raw.replace("\\/", "/");
    let (body, flags) = split_ruby_syntax(&unescaped).ok_or(ExprError::InvalidRegex)?;
    compile_re2(body, flags)
}

// ---------------------------------------------------------------------------
// Regex support

/// `RubySyntax::PATTERN` = `^/(.*)/([ismU]*)$` with Ruby semantics: `^`/`$`
/// are line anchors and `.` excludes `\n`, so the first line of that shape wins.
fn split_ruby_syntax(s: &str) -> Option<(&str, &str)> {
    for line in s.split('\n') {
        let Some(rest) = line.strip_prefix('/') else {
            continue;
        };
        let Some(idx) = rest.rfind('/') else {
            continue;
        };
        let (Some(body), Some(flags)) = (rest.get(..idx), rest.get(idx + 1..)) else {
            continue;
        };
        if flags.chars().all(|c| matches!(c, 'i' | 's' | 'm' | 'U')) {
            return Some((body, flags));
        }
    }
    None
}

/// A small bounded memo table keyed by text (pure: results depend only on the key).
/// Cleared when it reaches [`Memo::CAPACITY`] entries, so memory stays bounded whatever the
/// input.
struct Memo<T> {
    map: std::sync::Mutex<Option<rustc_hash::FxHashMap<String, T>>>,
}

impl<T: Clone> Memo<T> {
    const CAPACITY: usize = 4096;

    const fn new() -> Self {
        Self {
            map: std::sync::Mutex::new(None),
        }
    }

    fn get_or(&self, key: &str, make: impl FnOnce() -> T) -> T {
        if let Ok(guard) = self.map.lock() {
            if let Some(v) = guard.as_ref().and_then(|m| m.get(key)) {
                return v.clone();
            }
        }
        let value = make();
        if let Ok(mut guard) = self.map.lock() {
            let map = guard.get_or_insert_with(Default::default);
            if map.len() >= Self::CAPACITY {
                map.clear();
            }
            map.insert(key.to_owned(), value.clone());
        }
        value
    }
}

/// Builds an RE2-compatible regex from a body and `ismU` flags (memoized: the same
/// pattern recurs across jobs and evaluations).
fn compile_re2(body: &str, flags: &str) -> Result<RegexLit, ExprError> {
    static CACHE: Memo<Result<RegexLit, ExprError>> = Memo::new();
    let key = format!("{flags}/{body}");
    CACHE.get_or(&key, || compile_re2_uncached(body, flags))
}

fn compile_re2_uncached(body: &str, flags: &str) -> Result<RegexLit, ExprError> {
    let source = if flags.is_empty() {
        body.to_string()
    } else {
        format!("(?{flags}){body}")
    };
    // RE2 accepts repeated flags; the regex crate does not.
    let mut uniq = String::new();
    for f in flags.chars() {
        if !uniq.contains(f) {
            uniq.push(f);
        }
    }
    let translated = translate_re2(body).ok_or(ExprError::InvalidRegex)?;
    let pattern = if uniq.is_empty() {
        translated
    } else {
        format!("(?{uniq}){translated}")
    };
    let re = RegexBuilder::new(&pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|_| ExprError::InvalidRegex)?;
    Ok(RegexLit { source, re })
}

enum Repeat {
    /// A valid `{n}`, `{n,}` or `{n,m}` of this many chars.
    Valid(usize),
    /// Not a repetition: `{` is a literal in RE2.
    Literal,
    /// Repetition count above RE2's limit.
    Invalid,
}

fn scan_repeat(cs: &[char], pos: usize) -> Repeat {
    let digits = |mut i: usize| -> (usize, Option<u32>) {
        let start = i;
        let mut value: u32 = 0;
        while let Some(d) = cs.get(i).and_then(|c| c.to_digit(10)) {
            value = value.saturating_mul(10).saturating_add(d);
            i += 1;
        }
        (i, (i > start).then_some(value))
    };
    let (i, min) = digits(pos + 1);
    let Some(min) = min else {
        return Repeat::Literal;
    };
    let (i, max) = if cs.get(i) == Some(&',') {
        digits(i + 1)
    } else {
        (i, Some(min))
    };
    if cs.get(i) != Some(&'}') {
        return Repeat::Literal;
    }
    if min > RE2_MAX_REPEAT || max.is_some_and(|m| m > RE2_MAX_REPEAT) {
        return Repeat::Invalid;
    }
    Repeat::Valid(i + 1 - pos)
}

/// Length of a POSIX class `[:name:]` / `[:^name:]` starting at `pos`.
fn posix_class_len(cs: &[char], pos: usize) -> Option<usize> {
    if cs.get(pos) != Some(&'[') || cs.get(pos + 1) != Some(&':') {
        return None;
    }
    let mut i = pos + 2;
    if cs.get(i) == Some(&'^') {
        i += 1;
    }
    let name_start = i;
    while cs.get(i).is_some_and(|c| c.is_ascii_alphabetic()) {
        i += 1;
    }
    (i > name_start && cs.get(i) == Some(&':') && cs.get(i + 1) == Some(&']'))
        .then_some(i + 2 - pos)
}

/// Rewrites RE2 syntax into equivalent `regex` crate syntax. `None` = invalid.
fn translate_re2(body: &str) -> Option<String> {
    let cs: Vec<char> = body.chars().collect();
    let mut out = String::with_capacity(body.len() + 16);
    let mut i = 0;
    let mut in_class = false;
    // RE2 rejects stacked repetition operators (`a**`, `a{2}{3}`, `a*??`).
    let mut after_repeat = false;
    // Whether the previous item was an unescaped `(`.
    let mut after_open = false;
    while let Some(&c) = cs.get(i) {
        if in_class {
            match c {
                ']' => {
                    out.push(']');
                    in_class = false;
                    i += 1;
                }
                '[' => match posix_class_len(&cs, i) {
                    Some(len) => {
                        out.push_str(&collect(&cs, i, i + len));
                        i += len;
                    }
                    None => {
                        out.push_str("\\[");
                        i += 1;
                    }
                },
                // Set operators in the regex crate, literals in RE2.
                '&' | '~' => {
                    out.push('\\');
                    out.push(c);
                    i += 1;
                }
                '-' if cs.get(i + 1) == Some(&'-') => {
                    out.push_str("-\\-");
                    i += 2;
                }
                '\\' => i = translate_escape(&cs, i, true, &mut out)?,
                _ => {
                    out.push(c);
                    i += 1;
                }
            }
            continue;
        }
        let repeat_len = match c {
            '*' | '+' | '?' => Some(1),
            '{' => match scan_repeat(&cs, i) {
                Repeat::Valid(len) => Some(len),
                Repeat::Literal => None,
                Repeat::Invalid => return None,
            },
            _ => None,
        };
        if let Some(mut len) = repeat_len {
            // `(?` starts a group, it is not a repetition.
            let group = c == '?' && after_open;
            after_open = false;
            if !group {
                if after_repeat {
                    return None;
                }
                if cs.get(i + len) == Some(&'?') {
                    len += 1;
                }
                after_repeat = true;
            }
            out.push_str(&collect(&cs, i, i + len));
            i += len;
            continue;
        }
        after_repeat = false;
        after_open = c == '(';
        match c {
            '[' => {
                out.push('[');
                i += 1;
                if cs.get(i) == Some(&'^') {
                    out.push('^');
                    i += 1;
                }
                if cs.get(i) == Some(&']') {
                    out.push_str("\\]");
                    i += 1;
                }
                in_class = true;
            }
            '\\' => i = translate_escape(&cs, i, false, &mut out)?,
            '{' => {
                out.push_str("\\{");
                i += 1;
            }
            '}' => {
                out.push_str("\\}");
                i += 1;
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    Some(out)
}

/// Translates the escape starting at `cs[pos] == '\\'`; returns the next position.
fn translate_escape(cs: &[char], pos: usize, in_class: bool, out: &mut String) -> Option<usize> {
    // A trailing backslash is invalid.
    let c = *cs.get(pos + 1)?;
    let simple = |s: &str, out: &mut String| out.push_str(s);
    match c {
        'd' => simple(if in_class { "0-9" } else { "[0-9]" }, out),
        'D' => simple("[^0-9]", out),
        'w' => simple(
            if in_class {
                "0-9A-Za-z_"
            } else {
                "[0-9A-Za-z_]"
            },
            out,
        ),
        'W' => simple("[^0-9A-Za-z_]", out),
        's' => simple(
            if in_class {
                "\\t\\n\\x0C\\r "
            } else {
                "[\\t\\n\\x0C\\r ]"
            },
            out,
        ),
        'S' => simple("[^\\t\\n\\x0C\\r ]", out),
        'b' if !in_class => simple("(?-u:\\b)", out),
        'B' if !in_class => simple("(?-u:\\B)", out),
        '/' => out.push('/'),
        'Q' => {
            let mut i = pos + 2;
            while let Some(&q) = cs.get(i) {
                if q == '\\' && cs.get(i + 1) == Some(&'E') {
                    return Some(i + 2);
                }
                if q.is_ascii_punctuation() {
                    out.push('\\');
                }
                out.push(q);
                i += 1;
            }
            return Some(i);
        }
        'p' | 'P' | 'x' if cs.get(pos + 2) == Some(&'{') => {
            let close = (pos + 3..cs.len()).find(|&j| cs.get(j) == Some(&'}'))?;
            out.push_str(&collect(cs, pos, close + 1));
            return Some(close + 1);
        }
        _ => {
            out.push('\\');
            out.push(c);
        }
    }
    Some(pos + 2)
}

// ---------------------------------------------------------------------------
// Evaluation

struct Ctx<'f> {
    vars: &'f dyn Fn(&str) -> Option<String>,
    inputs: &'f dyn Fn(&str) -> Option<String>,
}

#[derive(Debug)]
struct RuntimeError;

#[derive(Debug, Clone)]
enum Value<'a> {
    Null,
    Bool(bool),
    Str(Cow<'a, str>),
    Regex(&'a RegexLit),
}

impl Value<'_> {
    /// Ruby truthiness: only `nil` and `false` are falsy.
    fn is_truthy(&self) -> bool {
        !matches!(self, Value::Null | Value::Bool(false))
    }

    /// ActiveSupport `present?`.
    fn is_present(&self) -> bool {
        match self {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Str(s) => !s.chars().all(char::is_whitespace),
            Value::Regex(_) => true,
        }
    }

    /// Ruby `to_s` as used for the left side of `=~`.
    fn to_text(&self) -> Cow<'_, str> {
        match self {
            Value::Null => Cow::Borrowed(""),
            Value::Bool(true) => Cow::Borrowed("true"),
            Value::Bool(false) => Cow::Borrowed("false"),
            Value::Str(s) => Cow::Borrowed(s.as_ref()),
            // Ruby's Object#to_s; the object address is not reproducible.
            Value::Regex(_) => Cow::Borrowed("#<Gitlab::UntrustedRegexp>"),
        }
    }
}

fn values_equal(a: &Value<'_>, b: &Value<'_>) -> bool {
    fn bool_str(b: bool) -> &'static str {
        if b { "true" } else { "false" }
    }
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Str(x), Value::Str(y)) => x == y,
        (Value::Bool(x), Value::Str(s)) | (Value::Str(s), Value::Bool(x)) => {
            s.as_ref() == bool_str(*x)
        }
        (Value::Regex(x), Value::Regex(y)) => x.source == y.source,
        _ => false,
    }
}

/// `Some(matched)`, or `None` when the right side is falsy (`=~` false, `!~` true).
fn regex_matches(left: &Value<'_>, right: &Value<'_>) -> Result<Option<bool>, RuntimeError> {
    let text = left.to_text();
    match right {
        Value::Null | Value::Bool(false) => Ok(None),
        // GitLab raises a non-expression error here.
        Value::Bool(true) => Err(RuntimeError),
        Value::Regex(lit) => Ok(Some(lit.re.is_match(&text))),
        Value::Str(s) => {
            // `Pattern.build_and_evaluate`: a string that is a valid
            // `/re/flags` is used as a regex; otherwise `String#scan`, i.e.
            // "is the left text contained in the right string".
            let unescaped = s.replace("\\/", "/");
            let compiled = split_ruby_syntax(&unescaped)
                .and_then(|(body, flags)| compile_re2(body, flags).ok());
            Ok(Some(match compiled {
                Some(lit) => lit.re.is_match(&text),
                None => s.contains(text.as_ref()),
            }))
        }
    }
}

fn eval<'a>(node: &'a Node, ctx: &Ctx<'_>) -> Result<Value<'a>, RuntimeError> {
    Ok(match node {
        Node::Null => Value::Null,
        Node::Bool(b) => Value::Bool(*b),
        Node::Str(s) => Value::Str(Cow::Borrowed(s)),
        Node::Var(name) => (ctx.vars)(name).map_or(Value::Null, |v| Value::Str(Cow::Owned(v))),
        Node::Input(name) => (ctx.inputs)(name).map_or(Value::Null, |v| Value::Str(Cow::Owned(v))),
        Node::Regex(lit) => Value::Regex(lit),
        Node::Bin(op, left, right) => match op {
            BinOp::And => {
                let l = eval(left, ctx)?;
                if l.is_truthy() { eval(right, ctx)? } else { l }
            }
            BinOp::Or => {
                let l = eval(left, ctx)?;
                if l.is_truthy() { l } else { eval(right, ctx)? }
            }
            BinOp::Eq => Value::Bool(values_equal(&eval(left, ctx)?, &eval(right, ctx)?)),
            BinOp::Ne => Value::Bool(!values_equal(&eval(left, ctx)?, &eval(right, ctx)?)),
            BinOp::Match => {
                let l = eval(left, ctx)?;
                let r = eval(right, ctx)?;
                Value::Bool(regex_matches(&l, &r)?.unwrap_or(false))
            }
            BinOp::NotMatch => {
                let l = eval(left, ctx)?;
                let r = eval(right, ctx)?;
                Value::Bool(regex_matches(&l, &r)?.is_none_or(|m| !m))
            }
        },
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;
    use std::collections::HashMap;

    fn vars() -> HashMap<&'static str, &'static str> {
        HashMap::from([
            ("A", "a"),
            ("B", "b"),
            ("EMPTY", ""),
            ("SPACE", "  \t"),
            ("RE", "/^fea/"),
            ("RE_I", "/^FEA/i"),
            ("RE_SLASH", "/^a\\/b$/"),
            ("BAD_RE", "/[/"),
            ("PLAIN", "1234"),
            ("BRANCH", "feature/x"),
            ("TRUE", "true"),
            ("TEXT", "foo\nbar"),
        ])
    }

    fn inputs() -> HashMap<&'static str, &'static str> {
        HashMap::from([("env", "prod"), ("flag", "true")])
    }

    fn eval_with(expr: &str, v: &HashMap<&str, &str>) -> bool {
        let e = Expression::parse(expr).unwrap_or_else(|err| panic!("{expr:?}: {err}"));
        let inp = inputs();
        e.evaluate(&|n| v.get(n).map(|s| s.to_string()), &|n| {
            inp.get(n).map(|s| s.to_string())
        })
    }

    fn ev(expr: &str) -> bool {
        eval_with(expr, &vars())
    }

    fn err(expr: &str) -> ExprError {
        match Expression::parse(expr) {
            Ok(e) => panic!("{expr:?} parsed: {e:?}"),
            Err(e) => e,
        }
    }

    fn toks(expr: &str) -> Vec<Token> {
        tokenize(expr).unwrap()
    }

    fn val(l: Leaf) -> Token {
        Token::Value(l)
    }

    #[test]
    fn lexes_each_token_kind() {
        assert_eq!(
            toks(
                "( ) $[[ inputs.env ]] $[[inputs.x_1]] $VAR_1 \"dq\" 'sq' /ab/i null true false == =~ != !~ && ||"
            ),
            vec![
                Token::Open,
                Token::Close,
                val(Leaf::Input("env".into())),
                val(Leaf::Input("x_1".into())),
                val(Leaf::Var("VAR_1".into())),
                val(Leaf::Str("dq".into())),
                val(Leaf::Str("sq".into())),
                val(Leaf::Pattern("/ab/i".into())),
                val(Leaf::Null),
                val(Leaf::Bool(true)),
                val(Leaf::Bool(false)),
                Token::Op(BinOp::Eq),
                Token::Op(BinOp::Match),
                Token::Op(BinOp::Ne),
                Token::Op(BinOp::NotMatch),
                Token::Op(BinOp::And),
                Token::Op(BinOp::Or),
            ]
        );
        // No whitespace needed between tokens.
        assert_eq!(
            toks("$A==\"x\"&&$B"),
            vec![
                val(Leaf::Var("A".into())),
                Token::Op(BinOp::Eq),
                val(Leaf::Str("x".into())),
                Token::Op(BinOp::And),
                val(Leaf::Var("B".into())),
            ]
        );
        // `null` has no word boundary, `true` does.
        assert_eq!(toks("nullnull"), vec![val(Leaf::Null), val(Leaf::Null)]);
        assert_eq!(err("truex"), ExprError::UnknownLexeme);
        assert_eq!(toks("true)"), vec![val(Leaf::Bool(true)), Token::Close]);
        assert_eq!(toks("$null"), vec![val(Leaf::Var("null".into()))]);
    }

    #[test]
    fn strings_have_no_escapes() {
        assert_eq!(toks(r#""a\""#), vec![val(Leaf::Str("a\\".into()))]);
        assert_eq!(toks(r#"'it"s'"#), vec![val(Leaf::Str("it\"s".into()))]);
        assert_eq!(toks(r#""""#), vec![val(Leaf::Str(String::new()))]);
        assert_eq!(err(r#""a\"b""#), ExprError::UnknownLexeme);
        assert_eq!(err("\"a\nb\""), ExprError::UnknownLexeme);
        assert_eq!(err("\"open"), ExprError::UnknownLexeme);
        // No variable expansion inside strings.
        assert!(!ev(r#""$A" == "a""#));
        assert!(ev(r#""$A" == '$A'"#));
    }

    #[test]
    fn unsupported_syntax() {
        assert_eq!(err("${A} == 'a'"), ExprError::UnknownLexeme);
        assert_eq!(err("%A% == 'a'"), ExprError::UnknownLexeme);
        assert_eq!(err("!$A"), ExprError::UnknownLexeme);
        assert_eq!(err("$A = 'a'"), ExprError::UnknownLexeme);
        assert_eq!(err("$"), ExprError::UnknownLexeme);
        assert_eq!(err("$[[ inputs. ]]"), ExprError::UnknownLexeme);
        assert_eq!(err("$A == é"), ExprError::UnknownLexeme);
    }

    #[test]
    fn parse_errors() {
        assert_eq!(err(""), ExprError::Empty);
        assert_eq!(err("  \n\t "), ExprError::Empty);
        assert_eq!(err("$A == 'a')"), ExprError::UnmatchedParenthesis);
        assert_eq!(err(")"), ExprError::UnmatchedParenthesis);
        assert_eq!(err("($A == 'a'"), ExprError::UnclosedParenthesis);
        assert_eq!(err("(("), ExprError::UnclosedParenthesis);
        assert_eq!(err("()"), ExprError::EmptyParseTree);
        assert_eq!(err("$A $B"), ExprError::UnreachableNodes);
        assert_eq!(err("$A =="), ExprError::InvalidLeftOperand);
        assert_eq!(err("== $A"), ExprError::InvalidLeftOperand);
        assert_eq!(err("&&"), ExprError::InvalidLeftOperand);
        assert_eq!(err("$A == == $B"), ExprError::InvalidLeftOperand);
        // Messages.
        assert_eq!(
            ExprError::UnknownLexeme.to_string(),
            "Unknown lexeme found!"
        );
        assert_eq!(ExprError::TooManyTokens.to_string(), "Too many tokens!");
        assert_eq!(
            ExprError::InvalidRegex.to_string(),
            "Invalid regular expression!"
        );
        assert_eq!(
            ExprError::UnmatchedParenthesis.to_string(),
            "Unmatched parenthesis"
        );
        assert_eq!(ExprError::Empty.to_string(), "Empty expression");
    }

    #[test]
    fn token_limit() {
        // GitLab's lexer loop runs MAX_TOKENS (100) times, so 99 tokens is the maximum.
        let chain = |n: usize| vec!["$A"; n].join(" || ");
        assert_eq!(tokenize(&chain(50)).unwrap().len(), 99);
        assert!(Expression::parse(&chain(50)).is_ok());
        let t100 = format!("{} || ($A)", chain(48)); // 95 + 1 + 3 = 99
        assert_eq!(tokenize(&t100).unwrap().len(), 99);
        assert_eq!(err(&format!("{} ||", chain(50))), ExprError::TooManyTokens); // 100
        assert_eq!(
            err(&format!("{} || $A", chain(50))),
            ExprError::TooManyTokens
        ); // 101
        assert_eq!(err(&chain(200)), ExprError::TooManyTokens);
        // Trailing whitespace does not count.
        assert!(Expression::parse(&format!("{}   \n", chain(50))).is_ok());
    }

    #[test]
    fn bare_terms() {
        assert!(ev("$A"));
        assert!(!ev("$UNDEFINED"));
        assert!(!ev("$EMPTY"));
        assert!(!ev("$SPACE"));
        assert!(ev("'x'"));
        assert!(!ev("''"));
        assert!(!ev("' '"));
        assert!(ev("/xy/"));
        assert!(!ev("null"));
        assert!(ev("true"));
        assert!(!ev("false"));
        assert!(ev("$[[ inputs.env ]]"));
        assert!(!ev("$[[ inputs.missing ]]"));
    }

    #[test]
    fn equality_and_null() {
        assert!(ev("$A == 'a'"));
        assert!(ev("'a' == $A"));
        assert!(!ev("$A == 'A'"));
        assert!(ev("$A != 'A'"));
        assert!(ev("$UNDEFINED == null"));
        assert!(ev("null == $UNDEFINED"));
        assert!(!ev("$UNDEFINED == ''"));
        assert!(!ev("$EMPTY == null"));
        assert!(ev("$EMPTY != null"));
        assert!(ev("$EMPTY == ''"));
        assert!(ev("$UNDEFINED == $ALSO_UNDEFINED"));
        assert!(ev("null == null"));
        assert!(ev("/ab/ == /ab/"));
        assert!(!ev("/ab/ == /ab/i"));
        assert!(!ev("/ab/ == 'ab'"));
        assert!(ev("$[[ inputs.env ]] == 'prod'"));
        assert!(ev("$[[inputs.missing]] == null"));
    }

    #[test]
    fn boolean_literals_compare_with_strings() {
        assert!(ev("true == true"));
        assert!(ev("true != false"));
        assert!(ev("$TRUE == true"));
        assert!(ev("true == $TRUE"));
        assert!(ev("'false' == false"));
        assert!(!ev("'True' == true"));
        assert!(!ev("'1' == true"));
        assert!(ev("$[[ inputs.flag ]] == true"));
        assert!(!ev("$UNDEFINED == false"));
    }

    #[test]
    fn logical_operators_return_operands() {
        // `$EMPTY` is truthy for `||`, so the result is `""`, which is not present.
        assert!(!ev("$EMPTY || $B"));
        assert!(ev("$EMPTY && $B"));
        assert!(!ev("$EMPTY && $UNDEFINED"));
        assert!(ev("$UNDEFINED || $B"));
        assert!(!ev("$UNDEFINED && $B"));
        assert!(!ev("$A && $EMPTY"));
        assert!(ev("$A || $EMPTY"));
        assert!(!ev("false || null"));
        assert!(ev("$A == 'x' || $B"));
        assert!(!ev("$A == 'x' && $B"));
        // Short-circuit: the right side is not evaluated (would be a runtime error).
        assert!(ev("$A || ($B =~ true)"));
        assert!(!ev("$UNDEFINED && ($B =~ true)"));
    }

    #[test]
    fn precedence_and_parentheses() {
        let v = |a: &'static str, b: &'static str, c: Option<&'static str>| {
            let mut m = HashMap::from([("A", a), ("B", b)]);
            if let Some(c) = c {
                m.insert("C", c);
            }
            m
        };
        let e = r#"$A == "a" || $B == "b" && $C"#;
        // && binds tighter: a || (b && C)
        assert!(eval_with(e, &v("a", "x", None)));
        assert!(!eval_with(e, &v("x", "b", None)));
        assert!(eval_with(e, &v("x", "b", Some("c"))));
        let p = r#"($A == "a" || $B == "b") && $C"#;
        assert!(!eval_with(p, &v("a", "x", None)));
        assert!(eval_with(p, &v("a", "x", Some("c"))));
        // Comparisons are left-associative: ($A == 'a') == true
        assert!(ev("$A == 'a' == true"));
        assert!(!ev("$A == ('a' == true)"));
        // || is left-associative and lowest.
        assert!(ev("$UNDEFINED || $UNDEFINED || $A"));
        assert!(ev("((($A)))"));
        assert!(ev("($A == 'a') && ($B == 'b' || $C)"));
    }

    #[test]
    fn regex_matching() {
        assert!(ev("$BRANCH =~ /^feature/"));
        assert!(!ev("$BRANCH =~ /^FEATURE/"));
        assert!(ev("$BRANCH =~ /^FEATURE/i"));
        assert!(ev("$BRANCH !~ /^main$/"));
        assert!(!ev("$BRANCH !~ /ture/"));
        // Unanchored search.
        assert!(ev("$BRANCH =~ /ure/"));
        // `\/` inside a regex token.
        assert!(ev(r"$BRANCH =~ /^feature\/x$/"));
        assert!(ev(r"'a/b' =~ /a\/b/"));
        // Undefined left side is "".
        assert!(ev("$UNDEFINED =~ /^$/"));
        assert!(!ev("$UNDEFINED =~ /ab/"));
        // Variables are not expanded in regex literals.
        assert!(ev("'$A' =~ /^\\$A$/"));
        // Flags.
        assert!(ev("$TEXT =~ /^bar/m"));
        assert!(!ev("$TEXT =~ /^bar/"));
        assert!(ev("$TEXT =~ /foo.bar/s"));
        assert!(!ev("$TEXT =~ /foo.bar/"));
        assert!(ev("'aaa' =~ /^a+?$/U") == ev("'aaa' =~ /^a+$/"));
        assert!(ev("'FOO' =~ /foo/ii"));
        // Boolean left operand is compared as text.
        assert!(ev("true =~ /^true$/"));
    }

    /// GitLab's `Lexeme::Pattern` (`[ismU]*`) and `RubySyntax` (`(?flags)body`, RE2's
    /// meaning of each flag, not Ruby's).
    #[test]
    fn regex_flags_are_gitlabs() {
        // The source is GitLab's `UntrustedRegexp` source: flags prepended as written.
        let lit = |raw: &str| build_pattern(raw).unwrap();
        assert_eq!(lit("/pattern/").source, "pattern");
        assert_eq!(lit("/pattern/im").source, "(?im)pattern");
        assert_eq!(lit("/a\\/b/U").source, "(?U)a/b");
        // `==` between regexes compares those sources.
        assert!(ev("/ab/im == /ab/im"));
        assert!(!ev("/ab/im == /ab/mi"));
        // `i`: case-insensitive, Unicode folding as in RE2.
        assert!(ev("'ÉTÉ' =~ /^été$/i"));
        // `m` is RE2's multi-line (`^`/`$` at line ends), not Ruby's `m` (dot matches
        // newline): that is `s`.
        assert!(ev("$TEXT =~ /^foo$/m"));
        assert!(!ev("$TEXT =~ /^foo$/"));
        assert!(!ev("$TEXT =~ /foo.bar/m"));
        assert!(ev("$TEXT =~ /foo.bar/s"));
        assert!(ev("$TEXT =~ /^FOO.BAR$/is"));
        // `U` swaps greedy and lazy repetition.
        let find = |raw: &str, text: &str| {
            lit(raw)
                .re
                .find(text)
                .map(|m| m.as_str().to_owned())
                .unwrap()
        };
        assert_eq!(find("/a+/U", "aaa"), "a");
        assert_eq!(find("/a+?/U", "aaa"), "aaa");
        assert_eq!(find("/a+/", "aaa"), "aaa");
        // Every order and repetition of the four flags.
        for flags in ["ismU", "Umsi", "mm", "iiU", "sU"] {
            assert!(
                Expression::parse(&format!("$A =~ /ab/{flags}")).is_ok(),
                "{flags}"
            );
        }
        // Any other letter is left over by the pattern lexeme and no lexeme takes it:
        // "Unknown lexeme found!" (invalid expression syntax), as in GitLab.
        for flags in ["x", "ix", "g", "u", "o", "I", "M", "S"] {
            assert_eq!(
                err(&format!("$A =~ /ab/{flags}")),
                ExprError::UnknownLexeme,
                "{flags}"
            );
        }
        // A one-character body is never a pattern token, with or without flags (GitLab's
        // lexeme needs two characters), nor is an empty one.
        assert_eq!(err("$VAR =~ /X/i"), ExprError::UnknownLexeme);
        assert_eq!(err("$VAR =~ /X/"), ExprError::UnknownLexeme);
        assert_eq!(err("$VAR =~ //i"), ExprError::UnknownLexeme);
        assert!(ev("'X' =~ /XX|X/i"));
        // From a variable, `RubySyntax` decides: `/re/x` is not a regex, so the
        // string's substring test applies.
        let vars = HashMap::from([("R", "/^AB/x"), ("S", "/^AB/i"), ("X", "ab")]);
        assert!(eval_with("$X =~ $S", &vars));
        assert!(!eval_with("$X =~ $R", &vars));
        assert!(eval_with("'AB/' =~ $R", &vars));
    }

    #[test]
    fn regex_token_shape() {
        // Body must be at least 2 chars.
        assert_eq!(err("$A =~ /./"), ExprError::UnknownLexeme);
        assert_eq!(err("$A =~ /a/"), ExprError::UnknownLexeme);
        assert_eq!(err("$A =~ //"), ExprError::UnknownLexeme);
        assert!(Expression::parse("$A =~ /ab/").is_ok());
        // Must not end with a backslash.
        assert_eq!(err(r"$A =~ /ab\/"), ExprError::UnknownLexeme);
        // Unknown flag.
        assert_eq!(err("$A =~ /ab/x"), ExprError::UnknownLexeme);
        // Invalid RE2.
        assert_eq!(err("$A =~ /a(b/"), ExprError::InvalidRegex);
        assert_eq!(err("$A =~ /a**/"), ExprError::InvalidRegex);
        assert_eq!(err("$A =~ /(?=a)b/"), ExprError::InvalidRegex);
        assert_eq!(err(r"$A =~ /(a)\1/"), ExprError::InvalidRegex);
        assert_eq!(err("$A =~ /a{1001}/"), ExprError::InvalidRegex);
        // Two regexes on one line are two tokens.
        assert_eq!(
            toks("/ab/ == /cd/"),
            vec![
                val(Leaf::Pattern("/ab/".into())),
                Token::Op(BinOp::Eq),
                val(Leaf::Pattern("/cd/".into()))
            ]
        );
        assert_eq!(
            toks(r"/a\/b/i"),
            vec![val(Leaf::Pattern(r"/a\/b/i".into()))]
        );
        // GitLab's pattern lets `[^\\]` match a slash: `/ab//` is one token with body `ab/`.
        assert_eq!(toks("/ab//"), vec![val(Leaf::Pattern("/ab//".into()))]);
        assert!(ev("'xab/' =~ /ab//"));
        // Multibyte bodies.
        assert_eq!(err("$A =~ /é/"), ExprError::UnknownLexeme);
        assert!(ev("'café' =~ /fé/"));
    }

    #[test]
    fn regex_in_variable() {
        // A string right side of the form /re/flags is a regex.
        assert!(ev("$BRANCH =~ $RE"));
        assert!(!ev("$A =~ $RE"));
        assert!(ev("$BRANCH =~ $RE_I"));
        assert!(ev("'a/b' =~ $RE_SLASH"));
        assert!(ev("$BRANCH =~ '/^feature/'"));
        // Single-char bodies are fine in variables (no lexer shape check).
        assert!(eval_with(
            "$X =~ $R",
            &HashMap::from([("X", "zaz"), ("R", "/a/")])
        ));
        // Otherwise: reversed substring test, "is the left contained in the right".
        assert!(ev(r#""23" =~ "1234""#));
        assert!(ev(r#""23" =~ $PLAIN"#));
        assert!(!ev(r#""1234" =~ "23""#));
        assert!(!ev(r#"$PLAIN =~ "23""#));
        assert!(ev(r#""23" !~ "1245""#));
        assert!(ev(r#"$UNDEFINED =~ "abc""#));
        assert!(ev("$A =~ $A"));
        // Invalid regex in a variable also falls back to the substring test.
        assert!(ev("'[' =~ $BAD_RE"));
        assert!(!ev("'x' =~ $BAD_RE"));
    }

    #[test]
    fn null_right_side_of_match() {
        assert!(!ev("$A =~ null"));
        assert!(ev("$A !~ null"));
        assert!(!ev("$A =~ $UNDEFINED"));
        assert!(ev("$A !~ $UNDEFINED"));
        assert!(!ev("$A =~ false"));
        assert!(ev("$A !~ false"));
        // `true` on the right is a runtime error: whole expression false.
        assert!(!ev("$A =~ true"));
        assert!(!ev("$A !~ true"));
        assert!(!ev("($A !~ true) || $A"));
    }

    #[test]
    fn re2_dialect() {
        let m = |pat: &str, text: &str| parse_regex_literal(pat).unwrap().unwrap().is_match(text);
        // Perl classes are ASCII-only in RE2.
        assert!(m(r"/^\d+$/", "123"));
        assert!(!m(r"/^\d+$/", "١٢٣"));
        assert!(!m(r"/^\w+$/", "café"));
        assert!(m(r"/^[\w-]+$/", "a-b_c"));
        assert!(m(r"/^[^\d]+$/", "abc"));
        assert!(m(r"/^\S+\s\S+$/", "a b"));
        assert!(m(r"/\bfoo\b/", "a foo b"));
        // Class literals that are operators in the regex crate.
        assert!(m(r"/^[[]$/", "["));
        assert!(m(r"/^[]a]+$/", "]a"));
        assert!(m(r"/^[a&&b]+$/", "&"));
        assert!(m(r"/^[~~]$/", "~"));
        assert!(m(r"/^[[:alpha:]]+$/", "abc"));
        assert!(m(r"/^[[:^digit:]]+$/", "abc"));
        // Literal braces.
        assert!(m(r"/^a{,3}$/", "a{,3}"));
        assert!(m(r"/^{x}$/", "{x}"));
        assert!(m(r"/^a{2}$/", "aa"));
        assert!(m(r"/^a{1,2}$/", "aa"));
        assert!(m(r"/^\p{Greek}+$/", "αβ"));
        assert!(m(r"/^\x{41}$/", "A"));
        assert!(m(r"/^\Q.*\E$/", ".*"));
        assert!(!m(r"/^\Q.*\E$/", "ab"));
        assert!(m(r"/^a\.b$/", "a.b"));
        assert!(m(r"/^\x40$/", "@"));
        assert!(m(r"/^(?i)ab$/", "AB"));
        assert!(m(r"/^(?:ab)+?$/", "abab"));
        assert!(m(r"/^a*?b??$/", "aa"));
        assert!(m(r"/^\(?x$/", "x"));
        for bad in [
            r"/\(?*/",
            r"/a**/",
            r"/a+*/",
            r"/a{2}{3}/",
            r"/a*??/",
            r"/a{2}*/",
        ] {
            assert_eq!(
                parse_regex_literal(bad).map(|r| r.is_err()),
                Some(true),
                "{bad}"
            );
        }
        // Trailing backslash.
        assert!(parse_regex_literal(r"/a\/").is_none_or(|r| r.is_err()));
        assert_eq!(
            parse_regex_literal(r"/ab\/").map(|r| r.is_err()),
            Some(true)
        );
    }

    #[test]
    fn regex_literal_helper() {
        assert!(parse_regex_literal("main").is_none());
        assert!(parse_regex_literal("/main").is_none());
        assert!(parse_regex_literal("main/").is_none());
        assert!(parse_regex_literal("/main/x").is_none());
        let re = parse_regex_literal("/^release-.*$/").unwrap().unwrap();
        assert!(re.is_match("release-1.0"));
        assert!(!re.is_match("main"));
        let re = parse_regex_literal("/^MAIN$/i").unwrap().unwrap();
        assert!(re.is_match("main"));
        // Empty and single-char bodies are allowed here.
        assert!(
            parse_regex_literal("//")
                .unwrap()
                .unwrap()
                .is_match("anything")
        );
        assert!(parse_regex_literal("/./").unwrap().unwrap().is_match("x"));
        // Inner slashes: greedy body up to the last slash.
        assert!(
            parse_regex_literal("/a/b/")
                .unwrap()
                .unwrap()
                .is_match("a/b")
        );
        assert!(
            parse_regex_literal(r"/a\/b/")
                .unwrap()
                .unwrap()
                .is_match("a/b")
        );
        // Shape ok, invalid RE2.
        assert_eq!(parse_regex_literal("/a(/").map(|r| r.is_err()), Some(true));
        // Ruby line anchors: the first line of the right shape is used.
        assert!(
            parse_regex_literal("x\n/^b$/")
                .unwrap()
                .unwrap()
                .is_match("b")
        );
    }

    #[test]
    fn hostile_regex_is_rejected_not_huge() {
        // Exceeds the compiled size limit.
        assert_eq!(err(r"$A =~ /(\pL{100}){100}/"), ExprError::InvalidRegex);
        // Deep nesting is rejected by the parser's nest limit.
        let nested = format!("$A =~ /{}a{}/", "(".repeat(500), ")".repeat(500));
        assert_eq!(err(&nested), ExprError::InvalidRegex);
    }

    #[test]
    fn pattern_scanner_matches_gitlab_regex() {
        // The regex crate has the same leftmost-first semantics as Ruby's backtracking engine.
        let reference = Regex::new(r"^/(?:[^/]|\\/)+[^\\]/[ismU]*").unwrap();
        let alphabet = ['/', '\\', 'a', 'i', ' ', 'é'];
        let k = alphabet.len();
        for len in 1..=7u32 {
            for mut n in 0..k.pow(len) {
                let mut text = String::from("/");
                for _ in 0..len {
                    text.push(alphabet.get(n % k).copied().unwrap_or(' '));
                    n /= k;
                }
                let cs: Vec<char> = text.chars().collect();
                let ours = scan_pattern(&cs, 0).map(|end| collect(&cs, 0, end));
                let theirs = reference.find(&text).map(|m| m.as_str().to_string());
                assert_eq!(ours, theirs, "{text:?}");
            }
        }
    }

    /// Alphabet for the brute-force tests.
    const ALPHABET: &[char] = &[
        '$', 'A', 'B', '"', '\'', '/', '(', ')', '=', '~', '!', '&', '|', ' ', 'n', 'i',
    ];

    fn exercise(s: &str, vs: &[HashMap<&'static str, String>]) {
        if let Ok(e) = Expression::parse(s) {
            for v in vs {
                let _ = e.evaluate(&|n| v.get(n).cloned(), &|_| None);
            }
        }
        let _ = parse_regex_literal(s);
    }

    fn var_sets() -> Vec<HashMap<&'static str, String>> {
        let values = [
            "", "/a/", "/(/", "a", "/", "/ab/i", "\\", "(", "null", " ", "/\\/",
        ];
        let mut sets = vec![HashMap::new()];
        for a in values {
            for b in ["", "/B/", "B", "/[/"] {
                sets.push(HashMap::from([("A", a.to_string()), ("B", b.to_string())]));
            }
        }
        sets
    }

    #[test]
    fn no_panic_exhaustive_short_inputs() {
        let vs = var_sets();
        let k = ALPHABET.len();
        let mut buf = String::new();
        for len in 0..=4u32 {
            for mut n in 0..k.pow(len) {
                buf.clear();
                for _ in 0..len {
                    buf.push(ALPHABET.get(n % k).copied().unwrap_or(' '));
                    n /= k;
                }
                exercise(&buf, &vs[..3]);
            }
        }
    }

    #[test]
    fn no_panic_random_inputs() {
        let vs = var_sets();
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let extra = [
            "$[[ inputs.x ]]",
            "true",
            "false",
            "null",
            "\\",
            "é",
            "\n",
            "[",
            "]",
            "{",
            "}",
            "*",
            "?",
        ];
        for _ in 0..20_000 {
            let len = (next() % 40) as usize;
            let mut s = String::new();
            for _ in 0..len {
                let r = next() as usize;
                if r % 10 == 0 {
                    s.push_str(extra.get(r / 10 % extra.len()).copied().unwrap_or(""));
                } else {
                    s.push(ALPHABET.get(r % ALPHABET.len()).copied().unwrap_or(' '));
                }
            }
            exercise(&s, &vs);
        }
    }
}

//! Moa, the expression language inside `${{ … }}` (GitLab Functions, `doc/ci/functions/moa.md`).
//!
//! ```text
//! literals    null true false 1 2.5 1e3 "text\n" 'raw'  [a, b,]  {key: v, "k-2": v, (expr): v}
//! access      a.b  a["k-1"]  a[0]  f(x)
//! operators   (highest first) postfix . [] (); unary + - !; * / %; + -; == != < <= > >=; &&; ||
//! functions   str(x) num(s) bool(x)
//! ```
//!
//! Values are JSON values; numbers are 64-bit floats. There is no implicit conversion
//! (`"a" + 1` is an error), division by zero is an error, values of different types
//! compare unequal (and `<` between them is an error), `&&`/`||` short-circuit and return
//! an operand (`inputs.tag || "latest"`). Falsy: `false`, `0`, `""`, `[]`, `{}`, `null`.
//! A double-quoted string may hold `${{ … }}`, interpolated when it is evaluated.
//!
//! Limits: an expression of at most [`MAX_EXPR_BYTES`] bytes, nested at most
//! [`MAX_DEPTH`] deep. No input panics: every failure is an [`ExprError`].

pub mod template;

use serde_json::{Map, Number, Value};

/// Longest expression text.
pub const MAX_EXPR_BYTES: usize = 64 * 1024;
/// Deepest nesting of brackets, parentheses and operators.
pub const MAX_DEPTH: usize = 64;

const RESERVED: &[&str] = &[
    "array",
    "as",
    "break",
    "case",
    "const",
    "continue",
    "default",
    "else",
    "fallthrough",
    "float",
    "for",
    "func",
    "function",
    "goto",
    "if",
    "import",
    "in",
    "int",
    "let",
    "loop",
    "map",
    "namespace",
    "number",
    "object",
    "package",
    "range",
    "return",
    "string",
    "struct",
    "switch",
    "type",
    "var",
    "void",
    "while",
];

/// An expression that could not be parsed or evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ExprError {
    /// What went wrong, naming the part of the expression.
    pub message: String,
}

fn err<T>(message: impl Into<String>) -> Result<T, ExprError> {
    Err(ExprError {
        message: message.into(),
    })
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Num(f64),
    /// Double-quoted (may hold `${{ }}`) or single-quoted (raw).
    Str(String, bool),
    Ident(String),
    Punct(&'static str),
}

const PUNCTS: &[&str] = &[
    "==", "!=", "<=", ">=", "&&", "||", ".", "[", "]", "(", ")", "{", "}", ",", ":", "+", "-", "*",
    "/", "%", "!", "<", ">",
];

fn lex(text: &str) -> Result<Vec<Token>, ExprError> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            if i + 1 < chars.len() && chars[i] == '.' && chars[i + 1].is_ascii_digit() {
                i += 1;
                while i < chars.len() && chars[i].is_ascii_digit() {
                    i += 1;
                }
            }
            if i < chars.len() && (chars[i] == 'e' || chars[i] == 'E') {
                let mut j = i + 1;
                if j < chars.len() && (chars[j] == '+' || chars[j] == '-') {
                    j += 1;
                }
                if j < chars.len() && chars[j].is_ascii_digit() {
                    i = j;
                    while i < chars.len() && chars[i].is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            let literal: String = chars[start..i].iter().collect();
            let number: f64 = literal.parse().map_err(|_| ExprError {
                message: format!("`{literal}` is not a number"),
            })?;
            if !number.is_finite() {
                return err(format!("`{literal}` is out of range"));
            }
            tokens.push(Token::Num(number));
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c == '"' || c == '\'' {
            let (s, next) = string(&chars, i)?;
            tokens.push(Token::Str(s, c == '"'));
            i = next;
        } else if let Some(p) = PUNCTS.iter().find(|p| {
            let p: Vec<char> = p.chars().collect();
            chars[i..].starts_with(&p)
        }) {
            tokens.push(Token::Punct(p));
            i += p.len();
        } else {
            return err(format!("unexpected character `{c}`"));
        }
    }
    Ok(tokens)
}

/// A string literal starting at `chars[start]` (its quote); the text and the index after it.
fn string(chars: &[char], start: usize) -> Result<(String, usize), ExprError> {
    let quote = chars[start];
    let mut out = String::new();
    let mut i = start + 1;
    while i < chars.len() {
        let c = chars[i];
        if c == quote {
            return Ok((out, i + 1));
        }
        if c != '\\' {
            out.push(c);
            i += 1;
            continue;
        }
        let Some(&e) = chars.get(i + 1) else {
            break;
        };
        i += 2;
        if quote == '\'' {
            match e {
                '\\' | '\'' => out.push(e),
                _ => {
                    out.push('\\');
                    out.push(e);
                }
            }
            continue;
        }
        match e {
            '\\' | '"' | '/' => out.push(e),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'a' => out.push('\u{7}'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'v' => out.push('\u{b}'),
            // `\${{` stays an escaped opener for the interpolation of the string.
            '$' => out.push_str("\\$"),
            'u' => {
                let hex: String = chars
                    .get(i..i + 4)
                    .map(|h| h.iter().collect())
                    .unwrap_or_default();
                let code = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32);
                match code {
                    Some(ch) if hex.len() == 4 => out.push(ch),
                    _ => return err(format!("`\\u{hex}` is not a valid escape")),
                }
                i += 4;
            }
            other => return err(format!("`\\{other}` is not a valid escape")),
        }
    }
    err(format!("unterminated string starting with {quote}"))
}

#[derive(Debug, Clone, PartialEq)]
enum Expr {
    Lit(Value),
    /// A double-quoted string holding `${{ }}`.
    Template(String),
    Name(String),
    Array(Vec<Expr>),
    Object(Vec<(Expr, Expr)>),
    Member(Box<Expr>, String),
    Index(Box<Expr>, Box<Expr>),
    Call(String, Vec<Expr>),
    Unary(&'static str, Box<Expr>),
    Binary(&'static str, Box<Expr>, Box<Expr>),
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn punct(&self, p: &str) -> bool {
        matches!(self.peek(), Some(Token::Punct(q)) if *q == p)
    }

    fn expect(&mut self, p: &str) -> Result<(), ExprError> {
        if self.punct(p) {
            self.at += 1;
            Ok(())
        } else {
            err(format!("expected `{p}`, found {}", self.describe()))
        }
    }

    fn describe(&self) -> String {
        match self.peek() {
            None => "the end of the expression".to_owned(),
            Some(Token::Num(n)) => format!("`{}`", text(&Value::from(*n))),
            Some(Token::Str(s, _)) => format!("the string {s:?}"),
            Some(Token::Ident(s)) => format!("`{s}`"),
            Some(Token::Punct(p)) => format!("`{p}`"),
        }
    }

    fn nest(&mut self) -> Result<(), ExprError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return err(format!(
                "the expression is nested more than {MAX_DEPTH} deep"
            ));
        }
        Ok(())
    }

    fn binary(&mut self, level: usize) -> Result<Expr, ExprError> {
        const LEVELS: &[&[&str]] = &[
            &["||"],
            &["&&"],
            &["==", "!=", "<", "<=", ">", ">="],
            &["+", "-"],
            &["*", "/", "%"],
        ];
        let Some(ops) = LEVELS.get(level) else {
            return self.unary();
        };
        self.nest()?;
        let mut left = self.binary(level + 1)?;
        while let Some(Token::Punct(p)) = self.peek() {
            let Some(op) = ops.iter().find(|op| *op == p) else {
                break;
            };
            self.at += 1;
            let right = self.binary(level + 1)?;
            left = Expr::Binary(op, Box::new(left), Box::new(right));
        }
        self.depth -= 1;
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr, ExprError> {
        for op in ["!", "-", "+"] {
            if self.punct(op) {
                self.at += 1;
                self.nest()?;
                let operand = self.unary()?;
                self.depth -= 1;
                return Ok(Expr::Unary(op, Box::new(operand)));
            }
        }
        self.postfix()
    }

    fn postfix(&mut self) -> Result<Expr, ExprError> {
        let mut e = self.primary()?;
        loop {
            if self.punct(".") {
                self.at += 1;
                match self.peek().cloned() {
                    Some(Token::Ident(name)) => {
                        self.at += 1;
                        e = Expr::Member(Box::new(e), name);
                    }
                    _ => {
                        return err(format!(
                            "expected a name after `.`, found {}",
                            self.describe()
                        ));
                    }
                }
            } else if self.punct("[") {
                self.at += 1;
                self.nest()?;
                let index = self.binary(0)?;
                self.depth -= 1;
                self.expect("]")?;
                e = Expr::Index(Box::new(e), Box::new(index));
            } else if self.punct("(") {
                let Expr::Name(name) = e else {
                    return err("only the functions str, num and bool can be called");
                };
                self.at += 1;
                let args = self.list(")")?;
                e = Expr::Call(name, args);
            } else {
                return Ok(e);
            }
        }
    }

    /// Comma-separated expressions up to `close` (a trailing comma allowed).
    fn list(&mut self, close: &str) -> Result<Vec<Expr>, ExprError> {
        self.nest()?;
        let mut items = Vec::new();
        while !self.punct(close) {
            items.push(self.binary(0)?);
            if !self.punct(close) {
                self.expect(",")?;
            }
        }
        self.at += 1;
        self.depth -= 1;
        Ok(items)
    }

    fn primary(&mut self) -> Result<Expr, ExprError> {
        let Some(token) = self.peek().cloned() else {
            return err("the expression ends too early");
        };
        self.at += 1;
        match token {
            Token::Num(n) => Ok(Expr::Lit(Value::from(n))),
            Token::Str(s, double) if double && s.contains("${{") => Ok(Expr::Template(s)),
            Token::Str(s, _) => Ok(Expr::Lit(Value::String(s.replace("\\$", "$")))),
            Token::Ident(name) => match name.as_str() {
                "null" => Ok(Expr::Lit(Value::Null)),
                "true" => Ok(Expr::Lit(Value::Bool(true))),
                "false" => Ok(Expr::Lit(Value::Bool(false))),
                reserved if RESERVED.contains(&reserved) => {
                    err(format!("`{reserved}` is a reserved word"))
                }
                _ => Ok(Expr::Name(name)),
            },
            Token::Punct("(") => {
                self.nest()?;
                let e = self.binary(0)?;
                self.depth -= 1;
                self.expect(")")?;
                Ok(e)
            }
            Token::Punct("[") => Ok(Expr::Array(self.list("]")?)),
            Token::Punct("{") => {
                self.nest()?;
                let mut entries = Vec::new();
                while !self.punct("}") {
                    let key = match self.peek().cloned() {
                        Some(Token::Ident(k)) => {
                            self.at += 1;
                            Expr::Lit(Value::String(k))
                        }
                        Some(Token::Str(k, _)) => {
                            self.at += 1;
                            Expr::Lit(Value::String(k))
                        }
                        Some(Token::Punct("(")) => self.primary()?,
                        _ => {
                            return err(format!(
                                "expected an object key, found {}",
                                self.describe()
                            ));
                        }
                    };
                    self.expect(":")?;
                    let value = self.binary(0)?;
                    entries.push((key, value));
                    if !self.punct("}") {
                        self.expect(",")?;
                    }
                }
                self.at += 1;
                self.depth -= 1;
                Ok(Expr::Object(entries))
            }
            Token::Punct(p) => err(format!("unexpected `{p}`")),
        }
    }
}

/// A parsed expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Expression(Expr);

impl Expression {
    /// Parses `text` (what stands between `${{` and `}}`).
    pub fn parse(text: &str) -> Result<Self, ExprError> {
        if text.len() > MAX_EXPR_BYTES {
            return err(format!(
                "the expression is longer than {MAX_EXPR_BYTES} bytes"
            ));
        }
        let tokens = lex(text)?;
        if tokens.is_empty() {
            return err("the expression is empty");
        }
        let mut parser = Parser {
            tokens,
            at: 0,
            depth: 0,
        };
        let e = parser.binary(0)?;
        if parser.at < parser.tokens.len() {
            return err(format!(
                "unexpected {} after the expression",
                parser.describe()
            ));
        }
        Ok(Self(e))
    }

    /// The value of the expression; names are the keys of `context`.
    pub fn eval(&self, context: &Map<String, Value>) -> Result<Value, ExprError> {
        eval(&self.0, context)
    }
}

/// Parses and evaluates `text` against `context`.
pub fn evaluate(text: &str, context: &Map<String, Value>) -> Result<Value, ExprError> {
    Expression::parse(text)?.eval(context)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Moa's truthiness.
pub fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// A value as text, as `str()` makes it: strings as they are, numbers without a needless
/// fraction, `null` as `<null>`, arrays and objects as JSON.
pub fn text(v: &Value) -> String {
    match v {
        Value::Null => "<null>".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
            Some(f) => f.to_string(),
            None => n.to_string(),
        },
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn number(f: f64) -> Result<Value, ExprError> {
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| ExprError {
            message: "the result is not a finite number".to_owned(),
        })
}

fn as_num(v: &Value, op: &str) -> Result<f64, ExprError> {
    match v {
        Value::Number(n) => n.as_f64().ok_or_else(|| ExprError {
            message: format!("`{op}` needs numbers"),
        }),
        other => err(format!("`{op}` needs numbers, not a {}", type_name(other))),
    }
}

fn eval(e: &Expr, cx: &Map<String, Value>) -> Result<Value, ExprError> {
    match e {
        Expr::Lit(v) => Ok(v.clone()),
        Expr::Template(s) => template::expand_text(s, cx).map(Value::String),
        Expr::Name(name) => cx.get(name).cloned().ok_or_else(|| ExprError {
            message: format!(
                "unknown name `{name}` (known: {})",
                cx.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        }),
        Expr::Array(items) => items
            .iter()
            .map(|i| eval(i, cx))
            .collect::<Result<_, _>>()
            .map(Value::Array),
        Expr::Object(entries) => {
            let mut o = Map::new();
            for (k, v) in entries {
                let key = match eval(k, cx)? {
                    Value::String(s) => s,
                    other => {
                        return err(format!(
                            "an object key must be a string, not a {}",
                            type_name(&other)
                        ));
                    }
                };
                o.insert(key, eval(v, cx)?);
            }
            Ok(Value::Object(o))
        }
        Expr::Member(base, key) => member(eval(base, cx)?, key, &describe(base)),
        Expr::Index(base, index) => {
            let b = eval(base, cx)?;
            match (b, eval(index, cx)?) {
                (b @ Value::Object(_), Value::String(key)) => member(b, &key, &describe(base)),
                (Value::Array(items), Value::Number(n)) => {
                    let f = n.as_f64().unwrap_or(f64::NAN);
                    if f.fract() != 0.0 || f < 0.0 || f >= items.len() as f64 {
                        return err(format!(
                            "index {} is out of range for `{}` ({} items)",
                            text(&Value::Number(n)),
                            describe(base),
                            items.len()
                        ));
                    }
                    Ok(items[f as usize].clone())
                }
                (b, i) => err(format!(
                    "cannot index a {} with a {}",
                    type_name(&b),
                    type_name(&i)
                )),
            }
        }
        Expr::Call(name, args) => {
            let values = args
                .iter()
                .map(|a| eval(a, cx))
                .collect::<Result<Vec<_>, _>>()?;
            let [arg] = values.as_slice() else {
                return err(format!("`{name}` takes one argument, not {}", values.len()));
            };
            match name.as_str() {
                "str" => Ok(Value::String(text(arg))),
                "bool" => Ok(Value::Bool(truthy(arg))),
                "num" => match arg {
                    Value::Number(_) => Ok(arg.clone()),
                    Value::Bool(b) => Ok(Value::from(if *b { 1.0 } else { 0.0 })),
                    Value::String(s) => match s.trim().parse::<f64>() {
                        Ok(f) if f.is_finite() => number(f),
                        _ => err(format!("num({s:?}): not a number")),
                    },
                    other => err(format!("num() cannot convert a {}", type_name(other))),
                },
                other => err(format!(
                    "unknown function `{other}` (known: str, num, bool)"
                )),
            }
        }
        Expr::Unary(op, operand) => {
            let v = eval(operand, cx)?;
            match *op {
                "!" => Ok(Value::Bool(!truthy(&v))),
                "-" => number(-as_num(&v, "-")?),
                _ => number(as_num(&v, "+")?),
            }
        }
        Expr::Binary("&&", l, r) => {
            let left = eval(l, cx)?;
            if truthy(&left) { eval(r, cx) } else { Ok(left) }
        }
        Expr::Binary("||", l, r) => {
            let left = eval(l, cx)?;
            if truthy(&left) { Ok(left) } else { eval(r, cx) }
        }
        Expr::Binary(op, l, r) => binary(op, eval(l, cx)?, eval(r, cx)?),
    }
}

/// How an operand reads in a message (`inputs.name`).
fn describe(e: &Expr) -> String {
    match e {
        Expr::Name(n) => n.clone(),
        Expr::Member(b, k) => format!("{}.{k}", describe(b)),
        Expr::Index(b, _) => format!("{}[…]", describe(b)),
        _ => "the value".to_owned(),
    }
}

fn member(base: Value, key: &str, of: &str) -> Result<Value, ExprError> {
    match base {
        Value::Object(mut o) => o.remove(key).ok_or_else(|| ExprError {
            message: format!(
                "`{of}` has no `{key}`{}",
                if o.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (it has: {})",
                        o.keys().cloned().collect::<Vec<_>>().join(", ")
                    )
                }
            ),
        }),
        other => err(format!(
            "`{of}` is a {}, not an object: it has no `{key}`",
            type_name(&other)
        )),
    }
}

fn binary(op: &str, l: Value, r: Value) -> Result<Value, ExprError> {
    match op {
        "==" => Ok(Value::Bool(equal(&l, &r))),
        "!=" => Ok(Value::Bool(!equal(&l, &r))),
        "<" | "<=" | ">" | ">=" => {
            let ord = compare(&l, &r)?;
            Ok(Value::Bool(match op {
                "<" => ord.is_lt(),
                "<=" => ord.is_le(),
                ">" => ord.is_gt(),
                _ => ord.is_ge(),
            }))
        }
        "+" => match (&l, &r) {
            (Value::String(a), Value::String(b)) => Ok(Value::String(format!("{a}{b}"))),
            _ if type_name(&l) != type_name(&r) => err(format!(
                "`+` needs two numbers or two strings, not a {} and a {}",
                type_name(&l),
                type_name(&r)
            )),
            _ => number(as_num(&l, "+")? + as_num(&r, "+")?),
        },
        "-" => number(as_num(&l, "-")? - as_num(&r, "-")?),
        "*" => number(as_num(&l, "*")? * as_num(&r, "*")?),
        "/" | "%" => {
            let (a, b) = (as_num(&l, op)?, as_num(&r, op)?);
            if b == 0.0 {
                return err("division by zero");
            }
            number(if op == "/" { a / b } else { a % b })
        }
        other => err(format!("unknown operator `{other}`")),
    }
}

fn equal(l: &Value, r: &Value) -> bool {
    match (l, r) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| equal(x, y))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().all(|(k, v)| b.get(k).is_some_and(|w| equal(v, w)))
        }
        _ => l == r,
    }
}

fn compare(l: &Value, r: &Value) -> Result<std::cmp::Ordering, ExprError> {
    use std::cmp::Ordering;
    match (l, r) {
        (Value::Number(a), Value::Number(b)) => {
            let (a, b) = (a.as_f64().unwrap_or(0.0), b.as_f64().unwrap_or(0.0));
            Ok(a.partial_cmp(&b).unwrap_or(Ordering::Equal))
        }
        (Value::String(a), Value::String(b)) => Ok(a.cmp(b)),
        (Value::Bool(a), Value::Bool(b)) => Ok(a.cmp(b)),
        (Value::Null, Value::Null) => Ok(Ordering::Equal),
        (Value::Array(a), Value::Array(b)) => {
            for (x, y) in a.iter().zip(b) {
                let o = compare(x, y)?;
                if o.is_ne() {
                    return Ok(o);
                }
            }
            Ok(a.len().cmp(&b.len()))
        }
        (Value::Object(a), Value::Object(b)) => {
            if a.len() != b.len() {
                return Ok(a.len().cmp(&b.len()));
            }
            let mut ka: Vec<&String> = a.keys().collect();
            let mut kb: Vec<&String> = b.keys().collect();
            ka.sort();
            kb.sort();
            let o = ka.cmp(&kb);
            if o.is_ne() {
                return Ok(o);
            }
            for k in ka {
                let o = compare(&a[k], &b[k])?;
                if o.is_ne() {
                    return Ok(o);
                }
            }
            Ok(Ordering::Equal)
        }
        _ => err(format!(
            "cannot compare a {} with a {}",
            type_name(l),
            type_name(r)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cx() -> Map<String, Value> {
        let Value::Object(o) = json!({
            "inputs": {"name": "world", "count": 3, "flag": false, "list": [1, 2], "cfg": {"k-1": "v"}},
            "env": {"HOME": "/root"},
        }) else {
            unreachable!()
        };
        o
    }

    fn ev(s: &str) -> Result<Value, String> {
        evaluate(s, &cx()).map_err(|e| e.message)
    }

    #[test]
    fn literals_access_and_operators() {
        assert_eq!(ev("inputs.name").unwrap(), json!("world"));
        assert_eq!(ev("inputs.count + 2 * 3").unwrap(), json!(9.0));
        assert_eq!(ev("(inputs.count + 2) * 3").unwrap(), json!(15.0));
        assert_eq!(ev("inputs.list[1]").unwrap(), json!(2));
        assert_eq!(ev("inputs.cfg[\"k-1\"]").unwrap(), json!("v"));
        assert_eq!(ev("\"a\" + 'b'").unwrap(), json!("ab"));
        assert_eq!(ev("inputs.flag || \"latest\"").unwrap(), json!("latest"));
        assert_eq!(ev("inputs.name && 1").unwrap(), json!(1.0));
        assert_eq!(ev("!inputs.flag").unwrap(), json!(true));
        assert_eq!(ev("[1, 2,] == inputs.list").unwrap(), json!(true));
        assert_eq!(
            ev("{a: 1, \"b-2\": 2, (\"c\" + \"d\"): 3}").unwrap(),
            json!({"a": 1.0, "b-2": 2.0, "cd": 3.0})
        );
        assert_eq!(
            ev("1 < 2 && 'a' < 'b' && false < true").unwrap(),
            json!(true)
        );
        assert_eq!(
            ev("str(null) + str(1.5) + str(2)").unwrap(),
            json!("<null>1.52")
        );
        assert_eq!(ev("num(\"4.5\") - 0.5").unwrap(), json!(4.0));
        assert_eq!(ev("bool([])").unwrap(), json!(false));
        assert_eq!(ev("1 == \"1\"").unwrap(), json!(false));
        assert_eq!(ev("-inputs.count % 2").unwrap(), json!(-1.0));
        assert_eq!(ev("'raw \\n'").unwrap(), json!("raw \\n"));
        assert_eq!(ev("\"tab\\there \\u00e9\"").unwrap(), json!("tab\there é"));
        assert_eq!(ev("\"hi ${{ inputs.name }}\"").unwrap(), json!("hi world"));
        assert_eq!(ev("1e3").unwrap(), json!(1000.0));
    }

    #[test]
    fn errors_are_precise() {
        assert_eq!(
            ev("\"a\" + 1").unwrap_err(),
            "`+` needs two numbers or two strings, not a string and a number"
        );
        assert_eq!(ev("1 / 0").unwrap_err(), "division by zero");
        assert_eq!(
            ev("inputs.nope").unwrap_err(),
            "`inputs` has no `nope` (it has: name, count, flag, list, cfg)"
        );
        assert_eq!(
            ev("nope.x").unwrap_err(),
            "unknown name `nope` (known: inputs, env)"
        );
        assert_eq!(
            ev("inputs.list[2]").unwrap_err(),
            "index 2 is out of range for `inputs.list` (2 items)"
        );
        assert_eq!(ev("if").unwrap_err(), "`if` is a reserved word");
        assert_eq!(ev("1 +").unwrap_err(), "the expression ends too early");
        assert_eq!(
            ev("1 2").unwrap_err(),
            "unexpected `2` after the expression"
        );
        assert_eq!(
            ev("\"open").unwrap_err(),
            "unterminated string starting with \""
        );
        assert_eq!(
            ev("1 < 'a'").unwrap_err(),
            "cannot compare a number with a string"
        );
        assert_eq!(
            ev("len(1)").unwrap_err(),
            "unknown function `len` (known: str, num, bool)"
        );
        assert_eq!(ev("").unwrap_err(), "the expression is empty");
        assert_eq!(
            ev(&"(".repeat(200)).unwrap_err(),
            format!("the expression is nested more than {MAX_DEPTH} deep")
        );
        assert_eq!(
            ev(&"!".repeat(200)).unwrap_err(),
            format!("the expression is nested more than {MAX_DEPTH} deep")
        );
    }

    proptest::proptest! {
        #[test]
        fn no_input_panics(s in "\\PC{0,40}") {
            let _ = ev(&s);
        }

        #[test]
        fn no_operator_soup_panics(s in "[-+*/%!()\\[\\]{},.:<>=&|'\"a-c0-9 ]{0,40}") {
            let _ = ev(&s);
        }
    }
}

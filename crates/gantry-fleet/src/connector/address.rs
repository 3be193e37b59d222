//! Instance addresses: `host`, `host:port`, `[v6]`, `[v6]:port` or a bare IPv6 address.

use std::fmt;

/// A host and port to dial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Splits `address` into host and port; `default_port` when it names none. The error says
/// what is wrong with it.
pub(crate) fn parse(address: &str, default_port: u16) -> Result<Target, String> {
    let address = address.trim();
    if address.is_empty() {
        return Err("the address is empty".into());
    }
    if let Some(rest) = address.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return Err("`[` without a closing `]`".into());
        };
        if host.is_empty() {
            return Err("empty host between `[` and `]`".into());
        }
        let port = match after {
            "" => default_port,
            _ => match after.strip_prefix(':') {
                Some(port) => parse_port(port)?,
                None => return Err(format!("unexpected {after:?} after `]`")),
            },
        };
        return Ok(Target {
            host: host.to_string(),
            port,
        });
    }
    match address.matches(':').count() {
        0 => Ok(Target {
            host: address.to_string(),
            port: default_port,
        }),
        1 => {
            let (host, port) = address.split_once(':').unwrap_or((address, ""));
            if host.is_empty() {
                return Err("empty host before `:`".into());
            }
            Ok(Target {
                host: host.to_string(),
                port: parse_port(port)?,
            })
        }
        // A bare IPv6 address (`::1`, `fe80::1`): no port can be told apart.
        _ => Ok(Target {
            host: address.to_string(),
            port: default_port,
        }),
    }
}

fn parse_port(port: &str) -> Result<u16, String> {
    match port.parse::<u16>() {
        Ok(0) | Err(_) => Err(format!("invalid port {port:?} (expected 1-65535)")),
        Ok(port) => Ok(port),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(host: &str, port: u16) -> Result<Target, String> {
        Ok(Target {
            host: host.into(),
            port,
        })
    }

    #[test]
    fn forms() {
        assert_eq!(parse("10.0.0.5", 22), target("10.0.0.5", 22));
        assert_eq!(parse("10.0.0.5:2222", 22), target("10.0.0.5", 2222));
        assert_eq!(parse("host.example", 2200), target("host.example", 2200));
        assert_eq!(parse("[::1]:2222", 22), target("::1", 2222));
        assert_eq!(parse("[::1]", 22), target("::1", 22));
        assert_eq!(parse("fe80::1", 22), target("fe80::1", 22));
        assert_eq!(parse(" h:1 ", 22), target("h", 1));
    }

    #[test]
    fn errors() {
        assert!(parse("", 22).is_err());
        assert!(parse("h:0", 22).is_err());
        assert!(parse("h:x", 22).is_err());
        assert!(parse(":22", 22).is_err());
        assert!(parse("[::1", 22).is_err());
        assert!(parse("[::1]x", 22).is_err());
    }

    #[test]
    fn display_brackets_v6() {
        assert_eq!(
            target("::1", 22).map(|t| t.to_string()),
            Ok("[::1]:22".into())
        );
        assert_eq!(target("h", 22).map(|t| t.to_string()), Ok("h:22".into()));
    }
}

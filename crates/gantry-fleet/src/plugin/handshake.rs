//! go-plugin's handshake line (spec `fleet.md` §2.3): the one line a plugin prints on
//! stdout once it serves,
//! `CORE-VERSION|APP-VERSION|NETWORK|ADDRESS|PROTOCOL|SERVER-CERT[|MUX]`.

use std::fmt;

use super::constants::CORE_PROTOCOL_VERSION;

/// How the host reaches the plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    /// A Unix socket; the address is its path.
    Unix,
    /// Loopback TCP (Windows); the address is `127.0.0.1:<port>`.
    Tcp,
}

impl Network {
    /// The handshake spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unix => "unix",
            Self::Tcp => "tcp",
        }
    }
}

/// The RPC protocol a plugin speaks. go-plugin also knows `netrpc` (its legacy default,
/// when the field is absent); fleeting plugins speak gRPC only, so parsing rejects it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// gRPC over HTTP/2.
    Grpc,
}

/// A parsed handshake line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake {
    /// go-plugin's core protocol version (always 1).
    pub core_version: u32,
    /// The app protocol version the plugin chose from those the host offered.
    pub app_version: u32,
    /// Unix socket or TCP.
    pub network: Network,
    /// The socket path or `host:port`.
    pub address: String,
    /// The RPC protocol.
    pub protocol: Protocol,
    /// The DER server certificate when the plugin runs auto-mTLS.
    pub server_cert: Option<Vec<u8>>,
    /// Whether the plugin multiplexes broker connections (7th field; only when asked).
    pub mux: Option<bool>,
}

/// Why a handshake line was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// Fewer than four `|`-separated fields.
    #[error(
        "Unrecognized remote plugin message: {line}\n\
         A plugin must print nothing to stdout before its handshake line \
         (`1|1|unix|/path/to/socket|grpc|`): banners and logs belong on stderr."
    )]
    Unrecognized {
        /// The line as read (trimmed).
        line: String,
    },
    /// The first field is not a number.
    #[error("the core protocol version {field:?} of the handshake is not a number")]
    CoreVersionNotANumber {
        /// The field.
        field: String,
    },
    /// The core protocol version is not 1.
    #[error(
        "incompatible core API version with plugin: plugin version {version}, core version {}\n\
         The plugin was built for another go-plugin protocol; rebuild it against go-plugin v1.",
        CORE_PROTOCOL_VERSION
    )]
    IncompatibleCore {
        /// The plugin's core version.
        version: u32,
    },
    /// The second field is not a number.
    #[error("the app protocol version {field:?} of the handshake is not a number")]
    AppVersionNotANumber {
        /// The field.
        field: String,
    },
    /// The plugin chose an app version the host did not offer.
    #[error(
        "the plugin speaks app protocol version {version}, the host only {offered:?}\n\
         Use a plugin release built for this version of the fleeting protocol."
    )]
    AppVersionNotOffered {
        /// The plugin's choice.
        version: u32,
        /// What the host offered.
        offered: Vec<u32>,
    },
    /// The network is neither `unix` nor `tcp`.
    #[error("unknown network type {network:?} in the handshake (expected unix or tcp)")]
    UnknownNetwork {
        /// The field.
        network: String,
    },
    /// The address field is empty.
    #[error("the handshake names no address to connect to")]
    EmptyAddress,
    /// No protocol field: go-plugin's legacy netrpc.
    #[error(
        "the plugin speaks go-plugin's legacy netrpc protocol (no protocol field in its \
         handshake); fleeting plugins must serve gRPC"
    )]
    NetRpc,
    /// A protocol other than `grpc`.
    #[error("unsupported plugin protocol {protocol:?}: fleeting plugins must serve grpc")]
    UnsupportedProtocol {
        /// The field.
        protocol: String,
    },
    /// The certificate field is not base64 (standard alphabet, no padding).
    #[error("the server certificate in the handshake is not unpadded standard base64")]
    BadCertificate,
    /// The 7th field is not `true`/`false`.
    #[error("the multiplexing field {field:?} of the handshake is not true or false")]
    BadMux {
        /// The field.
        field: String,
    },
}

impl Handshake {
    /// The handshake a plugin serving on `network`/`address` prints (no certificate, no
    /// multiplexing).
    pub fn new(app_version: u32, network: Network, address: impl Into<String>) -> Self {
        Self {
            core_version: CORE_PROTOCOL_VERSION,
            app_version,
            network,
            address: address.into(),
            protocol: Protocol::Grpc,
            server_cert: None,
            mux: None,
        }
    }

    /// Parses `line` as go-plugin's host does; `offered` are the app protocol versions
    /// the host put into `PLUGIN_PROTOCOL_VERSIONS`.
    pub fn parse(line: &str, offered: &[u32]) -> Result<Self, HandshakeError> {
        let line = line.trim();
        let parts: Vec<&str> = line.split('|').map(str::trim).collect();
        if parts.len() < 4 {
            return Err(HandshakeError::Unrecognized { line: line.into() });
        }
        let core_version: u32 =
            parts[0]
                .parse()
                .map_err(|_| HandshakeError::CoreVersionNotANumber {
                    field: parts[0].into(),
                })?;
        if core_version != CORE_PROTOCOL_VERSION {
            return Err(HandshakeError::IncompatibleCore {
                version: core_version,
            });
        }
        let app_version: u32 =
            parts[1]
                .parse()
                .map_err(|_| HandshakeError::AppVersionNotANumber {
                    field: parts[1].into(),
                })?;
        if !offered.contains(&app_version) {
            return Err(HandshakeError::AppVersionNotOffered {
                version: app_version,
                offered: offered.to_vec(),
            });
        }
        let network = match parts[2] {
            "unix" => Network::Unix,
            "tcp" => Network::Tcp,
            other => {
                return Err(HandshakeError::UnknownNetwork {
                    network: other.into(),
                });
            }
        };
        if parts[3].is_empty() {
            return Err(HandshakeError::EmptyAddress);
        }
        let protocol = match parts.get(4) {
            None | Some(&"netrpc") => return Err(HandshakeError::NetRpc),
            Some(&"grpc") => Protocol::Grpc,
            Some(other) => {
                return Err(HandshakeError::UnsupportedProtocol {
                    protocol: (*other).into(),
                });
            }
        };
        // go-plugin only takes the field for a certificate when it is longer than 50.
        let server_cert = match parts.get(5) {
            Some(cert) if cert.len() > 50 => {
                Some(base64_decode(cert).ok_or(HandshakeError::BadCertificate)?)
            }
            _ => None,
        };
        let mux = match parts.get(6) {
            None => None,
            Some(&"true") => Some(true),
            Some(&"false") => Some(false),
            Some(other) => {
                return Err(HandshakeError::BadMux {
                    field: (*other).into(),
                });
            }
        };
        Ok(Self {
            core_version,
            app_version,
            network,
            address: parts[3].into(),
            protocol,
            server_cert,
            mux,
        })
    }
}

/// The line without its `\n`, as go-plugin's server prints it (always with the sixth
/// field, usually empty, so a plain line ends with `|`).
impl fmt::Display for Handshake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let protocol = match self.protocol {
            Protocol::Grpc => "grpc",
        };
        let cert = self.server_cert.as_deref().map(base64_encode);
        write!(
            f,
            "{}|{}|{}|{}|{}|{}",
            self.core_version,
            self.app_version,
            self.network.as_str(),
            self.address,
            protocol,
            cert.unwrap_or_default()
        )?;
        match self.mux {
            Some(mux) => write!(f, "|{mux}"),
            None => Ok(()),
        }
    }
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 without padding (Go's `base64.RawStdEncoding`).
fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(BASE64[(n >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

/// The inverse of [`base64_encode`]; `None` on a character outside the alphabet, padding
/// or an impossible length.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    for chunk in text.as_bytes().chunks(4) {
        if chunk.len() == 1 {
            return None;
        }
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            let value = BASE64.iter().position(|b| b == c)?;
            n |= (value as u32) << (18 - 6 * i);
        }
        for i in 0..chunk.len() - 1 {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Handshake, HandshakeError> {
        Handshake::parse(line, &[1])
    }

    #[test]
    fn a_unix_line_with_the_trailing_empty_field_parses_and_prints_back() {
        let line = "1|1|unix|/tmp/plugin3891544051/plugin.sock|grpc|";
        let handshake = parse(&format!("{line}\n")).unwrap();
        assert_eq!(
            handshake,
            Handshake::new(1, Network::Unix, "/tmp/plugin3891544051/plugin.sock")
        );
        assert_eq!(handshake.to_string(), line);
    }

    #[test]
    fn a_tcp_line_parses() {
        let handshake = parse("1|1|tcp|127.0.0.1:10003|grpc|").unwrap();
        assert_eq!(handshake.network, Network::Tcp);
        assert_eq!(handshake.address, "127.0.0.1:10003");
    }

    #[test]
    fn fields_are_trimmed() {
        let handshake = parse("  1 | 1 | unix | /tmp/s | grpc | \r\n").unwrap();
        assert_eq!(handshake, Handshake::new(1, Network::Unix, "/tmp/s"));
    }

    #[test]
    fn a_short_line_is_unrecognized_and_says_stdout_is_reserved() {
        let error = parse("Name: fleeting-plugin-aws Version: 1.0.0").unwrap_err();
        assert_eq!(
            error,
            HandshakeError::Unrecognized {
                line: "Name: fleeting-plugin-aws Version: 1.0.0".into()
            }
        );
        let message = error.to_string();
        assert!(message.starts_with(
            "Unrecognized remote plugin message: Name: fleeting-plugin-aws Version: 1.0.0\n"
        ));
        assert!(
            message.contains("must print nothing to stdout"),
            "{message}"
        );
        assert!(matches!(
            parse("1|1|unix"),
            Err(HandshakeError::Unrecognized { .. })
        ));
        assert!(matches!(
            parse(""),
            Err(HandshakeError::Unrecognized { .. })
        ));
    }

    #[test]
    fn the_core_version_must_be_1() {
        assert_eq!(
            parse("2|1|unix|/tmp/s|grpc|"),
            Err(HandshakeError::IncompatibleCore { version: 2 })
        );
        assert!(
            parse("2|1|unix|/tmp/s|grpc|")
                .unwrap_err()
                .to_string()
                .contains("plugin version 2, core version 1")
        );
        assert!(matches!(
            parse("x|1|unix|/tmp/s|grpc|"),
            Err(HandshakeError::CoreVersionNotANumber { .. })
        ));
    }

    #[test]
    fn the_app_version_must_be_one_the_host_offered() {
        assert_eq!(
            Handshake::parse("1|3|unix|/tmp/s|grpc|", &[1, 2]),
            Err(HandshakeError::AppVersionNotOffered {
                version: 3,
                offered: vec![1, 2]
            })
        );
        assert_eq!(
            Handshake::parse("1|2|unix|/tmp/s|grpc|", &[1, 2])
                .unwrap()
                .app_version,
            2
        );
        assert!(matches!(
            parse("1|one|unix|/tmp/s|grpc|"),
            Err(HandshakeError::AppVersionNotANumber { .. })
        ));
    }

    #[test]
    fn the_network_is_unix_or_tcp_and_the_address_is_not_empty() {
        assert_eq!(
            parse("1|1|udp|127.0.0.1:1|grpc|"),
            Err(HandshakeError::UnknownNetwork {
                network: "udp".into()
            })
        );
        assert_eq!(parse("1|1|unix||grpc|"), Err(HandshakeError::EmptyAddress));
    }

    #[test]
    fn netrpc_and_a_missing_protocol_are_rejected() {
        assert_eq!(parse("1|1|unix|/tmp/s"), Err(HandshakeError::NetRpc));
        assert_eq!(
            parse("1|1|unix|/tmp/s|netrpc|"),
            Err(HandshakeError::NetRpc)
        );
        assert!(
            parse("1|1|unix|/tmp/s")
                .unwrap_err()
                .to_string()
                .contains("legacy netrpc")
        );
        assert_eq!(
            parse("1|1|unix|/tmp/s|http|"),
            Err(HandshakeError::UnsupportedProtocol {
                protocol: "http".into()
            })
        );
    }

    #[test]
    fn the_cert_field_counts_only_when_longer_than_50() {
        assert_eq!(parse("1|1|unix|/tmp/s|grpc|abc").unwrap().server_cert, None);
        let der: Vec<u8> = (0..=255u8).cycle().take(301).collect();
        let line = format!("1|1|unix|/tmp/s|grpc|{}", base64_encode(&der));
        let handshake = parse(&line).unwrap();
        assert_eq!(handshake.server_cert.as_deref(), Some(der.as_slice()));
        assert_eq!(handshake.to_string(), line);
        let padded = format!("1|1|unix|/tmp/s|grpc|{}==", "A".repeat(62));
        assert_eq!(parse(&padded), Err(HandshakeError::BadCertificate));
    }

    #[test]
    fn the_optional_seventh_field_is_the_mux_flag() {
        let handshake = parse("1|1|unix|/tmp/s|grpc||true").unwrap();
        assert_eq!(handshake.mux, Some(true));
        assert_eq!(handshake.to_string(), "1|1|unix|/tmp/s|grpc||true");
        assert_eq!(
            parse("1|1|unix|/tmp/s|grpc||false").unwrap().mux,
            Some(false)
        );
        assert!(matches!(
            parse("1|1|unix|/tmp/s|grpc||yes"),
            Err(HandshakeError::BadMux { .. })
        ));
    }

    #[test]
    fn base64_round_trips_every_length() {
        for len in 0..10 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 200) as u8).collect();
            let text = base64_encode(&bytes);
            assert!(!text.contains('='));
            assert_eq!(base64_decode(&text), Some(bytes));
        }
        assert_eq!(base64_encode(b"Man"), "TWFu");
        assert_eq!(base64_encode(b"Ma"), "TWE");
        assert_eq!(base64_decode("TWE"), Some(b"Ma".to_vec()));
        assert_eq!(base64_decode("T"), None);
    }
}

//! `wire_enum!`: a closed set of string values on the wire.
//!
//! One list of `Variant = "value"` pairs generates the enum, `ALL`, `NAMES`, `as_str`,
//! `FromStr`, `Display` and serde impls that go through `as_str`/`FromStr`, so the
//! string forms cannot drift apart. Unknown values are a [`ProtocolError::UnknownValue`]
//! naming every accepted value. `empty = Variant` makes `""` parse as that variant
//! (gitlab-runner treats an empty `when` as `on_success`, an empty cache policy as
//! `pull-push`).
//!
//! [`ProtocolError::UnknownValue`]: crate::ProtocolError::UnknownValue

macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident ($kind:literal $(, empty = $empty:ident)?) {
            $(
                $(#[$vmeta:meta])*
                $variant:ident = $value:literal,
            )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $(
                $(#[$vmeta])*
                $variant,
            )+
        }

        impl $name {
            /// Every value, in the order the spec lists them.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            /// Every wire string, in the order of [`Self::ALL`].
            pub const NAMES: &'static [&'static str] = &[$($value),+];

            /// The wire string.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $value,)+
                }
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::ProtocolError;

            fn from_str(value: &str) -> Result<Self, Self::Err> {
                $(
                    if value.is_empty() {
                        return Ok(Self::$empty);
                    }
                )?
                match value {
                    $($value => Ok(Self::$variant),)+
                    _ => Err($crate::ProtocolError::UnknownValue {
                        kind: $kind,
                        value: value.to_owned(),
                        expected: Self::NAMES,
                    }),
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Visitor;

                impl ::serde::de::Visitor<'_> for Visitor {
                    type Value = $name;

                    fn expecting(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                        write!(f, "a {} string", $kind)
                    }

                    fn visit_str<E: ::serde::de::Error>(self, value: &str) -> Result<$name, E> {
                        value.parse().map_err(E::custom)
                    }
                }

                deserializer.deserialize_str(Visitor)
            }
        }
    };
}

pub(crate) use wire_enum;
